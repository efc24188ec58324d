package server

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/pipeline"
)

// A client of another node gets a run's events live, while the owner's
// appends to the stream are held back, each once and in seq order; once
// they are let go the stream catches up, and the next run still reaches
// the client exactly once.
func TestClusterRemoteWatcherLive(t *testing.T) {
	nodes := startCluster(t, "a", "b")
	a, b := nodes["a"], nodes["b"]
	sid := sessionOn("b", "a", "b")
	link := newListLink()
	c, err := a.srv.Attach(link, ClientOptions{Face: "t"})
	if err != nil {
		t.Fatal(err)
	}
	o := &testOrigin{c: c, codec: testCodec, hold: NewHold()}
	if r := submit(t, a, pipeline.Command{Type: "t.create", ID: "c1", SessionID: sid, Origin: o}); r.Err != nil || string(r.Data) != `"b"` {
		t.Fatalf("create from a: %+v (data %s), want it placed on b", r.Err, r.Data)
	}
	o.hold.Release()
	h, err := b.srv.Session(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lastSeq := func() uint64 {
		t.Helper()
		seq, err := b.node.LastSeq(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	waitStored := func(want uint64) {
		t.Helper()
		for lastSeq() < want {
			if ctx.Err() != nil {
				t.Fatalf("the stream has seq %d, want %d", lastSeq(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitClient := func(want uint64) []uint64 {
		t.Helper()
		for {
			got := link.seqs()
			if len(got) > 0 && got[len(got)-1] >= want {
				return got
			}
			select {
			case <-link.more:
			case <-ctx.Done():
				t.Fatalf("a's client got seqs %v, want them up to %d", got, want)
			}
		}
	}
	// A first run, stored.
	if r := submit(t, b, pipeline.Command{Type: "t.prompt", SessionID: sid}); r.Err != nil {
		t.Fatal(r.Err)
	}
	stored := h.Session().Seq()
	waitStored(stored)
	waitClient(stored)

	hold := make(chan struct{})
	b.srv.cl.durableHold.Store(&hold)
	released := false
	release := func() {
		if !released {
			released = true
			close(hold)
		}
	}
	defer release()
	if r := submit(t, b, pipeline.Command{Type: "t.prompt", SessionID: sid}); r.Err != nil {
		t.Fatal(r.Err)
	}
	first := h.Session().Seq()
	waitClient(first)
	if got := lastSeq(); got != stored {
		t.Fatalf("the stream went from seq %d to %d while held", stored, got)
	}
	// A second client of a joins the feed now, from a cursor before what
	// the feed showed live: the stream does not have those events yet,
	// and the client gets them once it does (replayThrough), not a gap.
	link2 := newListLink()
	c2, err := a.srv.Attach(link2, ClientOptions{Face: "t"})
	if err != nil {
		t.Fatal(err)
	}
	joined := make(chan struct{})
	go func() {
		defer close(joined)
		cursor := stored
		a.srv.cl.subscribeRemote(c2, sid, testCodec, &cursor, nil)
	}()
	for registered := false; !registered; {
		if fh := a.srv.cl.feedHosted(sid); fh != nil {
			fh.subMu.Lock()
			_, registered = fh.subs[c2]
			fh.subMu.Unlock()
		}
		if ctx.Err() != nil {
			t.Fatal("the second client never joined the feed")
		}
		runtime.Gosched()
	}
	release()
	b.srv.cl.durableHold.Store(nil)
	waitStored(first)
	<-joined
	for {
		got := link2.seqs()
		if len(got) > 0 && got[len(got)-1] >= first {
			for i, seq := range got {
				if seq != stored+1+uint64(i) {
					t.Fatalf("the client that joined after %d got seqs %v: want each of %d..%d once", stored, got, stored+1, first)
				}
			}
			break
		}
		select {
		case <-link2.more:
		case <-ctx.Done():
			t.Fatalf("the client that joined after %d got seqs %v, want them up to %d", stored, got, first)
		}
	}
	if r := submit(t, b, pipeline.Command{Type: "t.prompt", SessionID: sid}); r.Err != nil {
		t.Fatal(r.Err)
	}
	second := h.Session().Seq()
	waitStored(second)
	got := waitClient(second)
	for i := 1; i < len(got); i++ {
		if got[i] != got[i-1]+1 {
			t.Fatalf("a's client got seqs %v: not each once in order", got)
		}
	}
	if got[len(got)-1] != second {
		t.Fatalf("a's client got seqs %v, want them to end at %d", got, second)
	}
}
