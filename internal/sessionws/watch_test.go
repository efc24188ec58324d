package sessionws

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/streamtest"
)

// Every goroutine a test's layer and face start must be gone when it ends.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A connection that joins a deleted session's watch after the watch told
// its connections is refused, so its subscribe can say the session is
// gone instead of leaving the client waiting on a watch that will never
// send again (subscribe checks Gone before it joins, and the session can
// be deleted in between).
func TestWatchJoinAfterDeletion(t *testing.T) {
	layer := streamtest.FauxLayer(t, faux.New(faux.Options{}))
	f, err := New(layer, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := layer.Start(); err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	ctx := t.Context()
	h, err := layer.Create(ctx, server.CreateRequest{ID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	w := f.watchFor(h)
	defer f.release(w)
	first := &conn{f: f, h: h, id: h.ID()}
	if !w.add(first) {
		t.Fatal("a live session's watch refused a connection")
	}
	w.remove(first) // its close would need a client; only the flag matters here
	if err := layer.Delete(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.mu.Lock()
		told := w.deleted
		w.mu.Unlock()
		if told {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watch did not see the deletion")
		}
		time.Sleep(time.Millisecond)
	}
	if w.add(&conn{f: f, h: h, id: h.ID()}) {
		t.Error("a connection joined a deleted session's watch after its connections were told")
	}
}
