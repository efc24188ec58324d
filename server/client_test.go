package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// gateLink holds every write until opened, as a client that stopped
// reading, and records what was written.
type gateLink struct {
	mu     sync.Mutex
	open   chan struct{}
	frames []string
	closed chan Close
}

func newGateLink() *gateLink {
	return &gateLink{open: make(chan struct{}), closed: make(chan Close, 1)}
}

func (l *gateLink) Write(ctx context.Context, frames [][]byte) error {
	select {
	case <-l.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range frames {
		l.frames = append(l.frames, string(f))
	}
	return nil
}

func (l *gateLink) Close(c Close) {
	select {
	case l.closed <- c:
	default:
	}
}

func (l *gateLink) written() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.frames...)
}

// A frame with Replace takes the place of the waiting frame with its key
// wherever it waits; More go out right after their frame; a lower queue
// limit of a face cuts its client off sooner.
func TestReplaceMoreAndFaceQueueLimit(t *testing.T) {
	s := newEnv(t).start(t, Limits{})
	l := newGateLink()
	c, err := s.Attach(l, ClientOptions{Face: "test", Transport: "test", MaxQueuedBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// The writer takes the first frame and blocks on it.
	c.Send([]byte("first"))
	time.Sleep(20 * time.Millisecond)
	c.SendFrame(Frame{Data: []byte("p1"), Key: "progress", Replace: true})
	c.SendFrame(Frame{Data: []byte("critical-1"), More: [][]byte{[]byte("critical-1b")}})
	c.SendFrame(Frame{Data: []byte("p2"), Key: "progress", Replace: true})
	c.Send([]byte("critical-2"))
	c.SendFrame(Frame{Data: []byte("p3"), Key: "progress", Replace: true})
	close(l.open)
	deadline := time.Now().Add(5 * time.Second)
	want := "first critical-1 critical-1b critical-2 p3"
	for strings.Join(l.written(), " ") != want {
		if time.Now().After(deadline) {
			t.Fatalf("written %q, want %q", l.written(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if c.Merged() != 2 {
		t.Fatalf("merged %d, want 2", c.Merged())
	}

	// A face limit of 1 MiB: a stuck client is cut there, not at the
	// server's 64 MiB.
	l2 := newGateLink()
	c2, err := s.Attach(l2, ClientOptions{Face: "test", Transport: "test", MaxQueuedBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	big := []byte(strings.Repeat("x", 64<<10))
	for i := 0; i < 40 && !c2.Closing(); i++ {
		c2.Send(big)
	}
	if !c2.Closing() {
		t.Fatal("a client over its face's limit was not cut off")
	}
	// The close reaches the link once a write in flight is over.
	close(l2.open)
	select {
	case cl := <-l2.closed:
		if cl.Kind != CloseOverloaded || !strings.Contains(cl.Reason, fmt.Sprint(1<<20)) {
			t.Fatalf("closed %+v", cl)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cut-off client's link was not closed")
	}
	<-c2.Done()
	c.Close(Close{})
	<-c.Done()
}
