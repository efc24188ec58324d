package convapi

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/streamtest"
)

// slowLink is an SSE client that reads slower than the model writes.
type slowLink struct {
	delay time.Duration

	mu     sync.Mutex
	out    strings.Builder
	writes int
}

func (l *slowLink) Write(_ context.Context, frames [][]byte) error {
	time.Sleep(l.delay)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes++
	for _, f := range frames {
		if &f[0] == &pingFrame[0] {
			continue
		}
		l.out.Write(f)
	}
	return nil
}

func (l *slowLink) Close(server.Close) {}

// codecLayer is a started layer with the REST face over a faux model
// that streams a chunk a millisecond.
func codecLayer(t *testing.T) (*faux.Provider, *server.Server, *Server) {
	t.Helper()
	fp := faux.New(faux.Options{ChunkDelay: time.Millisecond})
	layer := streamtest.FauxLayer(t, fp)
	face, err := New(layer, Options{Models: fixedModels{faux.Model()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := layer.Start(); err != nil {
		t.Fatal(err)
	}
	return fp, layer, face
}

// runOnce has session h answer a user message and waits for the run's end.
func runOnce(t *testing.T, h *server.Hosted) {
	t.Helper()
	if err := h.Session().Append(inputMessage("user", "go", timeZero)); err != nil {
		t.Fatal(err)
	}
	if err := h.Session().Step(session.StepOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.Session().Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A client that falls behind a streaming answer gets its text fragments
// joined (one generation_progress for many), still in order, with the
// newest seq, and the same text in the end as a client that keeps up.
func TestLaggingClientGetsTokensJoined(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fp, layer, face := codecLayer(t)
		defer layer.Close()
		h, err := layer.Create(context.Background(), server.CreateRequest{ID: "lag"})
		if err != nil {
			t.Fatal(err)
		}
		fast, slow := &slowLink{}, &slowLink{delay: time.Second}
		for _, l := range []*slowLink{fast, slow} {
			c, err := layer.Attach(l, server.ClientOptions{Face: "rest", Transport: "test"})
			if err != nil {
				t.Fatal(err)
			}
			layer.Subscribe(c, h, face.codec, nil, nil)
		}
		words := strings.Repeat("lorem ipsum dolor sit amet ", 800)
		fp.Push(faux.Response{Text: words})
		runOnce(t, h)
		time.Sleep(time.Minute)
		synctest.Wait()

		text := func(l *slowLink) (string, int) {
			l.mu.Lock()
			defer l.mu.Unlock()
			var b strings.Builder
			n := 0
			var last uint64
			for _, frame := range strings.Split(strings.TrimSuffix(l.out.String(), "\n\n"), "\n\n") {
				ev := parseFrame(t, frame)
				if ev.seq() < last {
					t.Errorf("seq %d after %d", ev.seq(), last)
				}
				last = ev.seq()
				if ev.typ() == "generation_progress" {
					b.WriteString(ev.str("token"))
					n++
				}
			}
			return b.String(), n
		}
		ft, fn := text(fast)
		st, sn := text(slow)
		if ft != words || st != words {
			t.Fatalf("the text differs: fast %d bytes, slow %d bytes, want %d", len(ft), len(st), len(words))
		}
		if sn >= fn {
			t.Errorf("the lagging client got %d progress events, the fast one %d: nothing was joined", sn, fn)
		}
		t.Logf("progress events: fast %d, lagging %d (%d writes)", fn, sn, slow.writes)
	})
}

// parseFrame reads one SSE frame.
func parseFrame(t *testing.T, frame string) event {
	t.Helper()
	var ev event
	for _, l := range strings.Split(frame, "\n") {
		switch {
		case strings.HasPrefix(l, "id: "):
			ev.id = l[4:]
		case strings.HasPrefix(l, "data: "):
			ev.raw = l[6:]
		default:
			t.Fatalf("a line that is neither id nor data: %q in %q", l, frame)
		}
	}
	if err := unmarshalInto([]byte(ev.raw), &ev.m); err != nil {
		t.Fatalf("frame data is not JSON: %q", frame)
	}
	return ev
}

// An attachment no stream or request has used for the idle time is
// gone; one with a stream attached stays however long it is idle.
func TestAttachmentsIdleCleanup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAttachments(10 * time.Minute)
		idle := a.create("c")
		streaming := a.create("c")
		c := &server.Client{}
		a.attach(streaming.id, c)
		time.Sleep(9 * time.Minute)
		if _, ok := a.get(idle.id); !ok {
			t.Fatal("gone before its idle time")
		}
		time.Sleep(11 * time.Minute)
		if _, ok := a.get(idle.id); ok {
			t.Error("an attachment idle past its time is still there")
		}
		if _, ok := a.get(streaming.id); !ok {
			t.Error("an attachment with a stream was cleaned up")
		}
		a.detach(streaming.id, c)
		time.Sleep(11 * time.Minute)
		if got := a.list(); len(got) != 0 {
			t.Errorf("left: %v", got)
		}
	})
}

// Thinking streams inside <thinking> tags, so the joined tokens read as
// the finished message's content does.
func TestThinkingStreamsAsTaggedTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fp, layer, face := codecLayer(t)
		defer layer.Close()
		h, err := layer.Create(context.Background(), server.CreateRequest{ID: "think"})
		if err != nil {
			t.Fatal(err)
		}
		link := &slowLink{}
		c, err := layer.Attach(link, server.ClientOptions{Face: "rest", Transport: "test"})
		if err != nil {
			t.Fatal(err)
		}
		layer.Subscribe(c, h, face.codec, nil, nil)
		fp.Push(faux.Response{Thinking: "first this, then that", Text: "the answer"})
		runOnce(t, h)
		time.Sleep(time.Second)
		synctest.Wait()

		link.mu.Lock()
		defer link.mu.Unlock()
		var streamed strings.Builder
		final := ""
		for _, frame := range strings.Split(strings.TrimSuffix(link.out.String(), "\n\n"), "\n\n") {
			ev := parseFrame(t, frame)
			switch ev.typ() {
			case "generation_progress":
				streamed.WriteString(ev.str("token"))
			case "message_added":
				if m, _ := ev.m["message"].(map[string]any); m["role"] == "assistant" {
					final, _ = m["content"].(string)
				}
			}
		}
		want := "<thinking>\nfirst this, then that\n</thinking>\n\nthe answer"
		if final != want {
			t.Fatalf("message_added content %q, want %q", final, want)
		}
		if streamed.String() != final {
			t.Errorf("streamed tokens %q, want the message's content %q", streamed.String(), final)
		}
	})
}
