package server

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
)

// heldLink holds its first write until released, so that frames queue
// behind it, then counts the frames written.
type heldLink struct {
	release chan struct{}
	entered chan struct{}
	frames  *atomic.Int64
	held    atomic.Bool
}

func (l *heldLink) Write(ctx context.Context, frames [][]byte) error {
	if l.held.CompareAndSwap(false, true) {
		l.entered <- struct{}{}
		select {
		case <-l.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	l.frames.Add(int64(len(frames)))
	return nil
}

func (l *heldLink) Close(Close) {}

// liveHeap is the heap after the collections relieveMemory makes.
func liveHeap() uint64 {
	returnMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestIdleClientRetains: a client that has written a full batch and
// gone idle holds little memory once the server has given memory back
// (relieveMemory): no batch scratch of its writer (~50 KB each when
// every writer kept its own), no queue array, no pooled buffer. An
// allocation budget, not a timing: per idle client, what the heap holds
// after a burst of maxBatchFrames+ frames to each.
func TestIdleClientRetains(t *testing.T) {
	const (
		clients   = 100
		perClient = maxBatchFrames + 44
		budget    = 4 << 10 // bytes per idle client
	)
	s := newEnv(t).start(t, Limits{})
	var written atomic.Int64
	frame := []byte(`{"type":"message_update","delta":"abcd"}`)
	before := liveHeap()
	cs := make([]*Client, clients)
	for i := range cs {
		l := &heldLink{release: make(chan struct{}), entered: make(chan struct{}, 1), frames: &written}
		c, err := s.Attach(l, ClientOptions{Face: "test", Transport: "test"})
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c
		// The writer takes the first frame and waits in the write; the
		// rest queue behind it and go as full batches.
		c.Send(frame)
		<-l.entered
		for range perClient {
			c.Send(frame)
		}
		close(l.release)
	}
	for written.Load() != clients*(perClient+1) {
		runtime.Gosched()
	}
	// The last batch's bookkeeping happens after its write returns.
	for _, c := range cs {
		for c.QueuedBytes() != 0 {
			runtime.Gosched()
		}
	}
	after := liveHeap()
	per := (int64(after) - int64(before)) / clients
	t.Logf("an idle client holds %d bytes after %d frames", per, perClient+1)
	if per > budget {
		t.Errorf("an idle client holds %d bytes after a burst; the budget is %d", per, budget)
	}
	for _, c := range cs {
		c.Close(Close{})
		<-c.Done()
	}
}
