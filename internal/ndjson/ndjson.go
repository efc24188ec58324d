// Package ndjson writes newline-delimited JSON frames to a client that
// reads at its own pace: the stdio faces (pi's RPC mode, ACP) share it.
package ndjson

import (
	"io"
	"sync"
	"time"
)

// maxBatch is the size the writer aims at for one write.
const maxBatch = 64 << 10

// Writer writes lines, each followed by a newline, from one goroutine of
// its own, so no producer waits on the client's reading. Once a write
// fails the client is gone, and later lines are dropped.
type Writer struct {
	mu     sync.Mutex
	cond   *sync.Cond
	queue  [][]byte
	closed bool
	done   chan struct{}
	w      io.Writer
}

// New starts a Writer on w; Close stops it.
func New(w io.Writer) *Writer {
	o := &Writer{w: w, done: make(chan struct{})}
	o.cond = sync.NewCond(&o.mu)
	go o.loop()
	return o
}

// Write queues line (without its newline); it never blocks on w.
func (o *Writer) Write(line []byte) {
	o.mu.Lock()
	if !o.closed {
		o.queue = append(o.queue, line)
		o.cond.Signal()
	}
	o.mu.Unlock()
}

func (o *Writer) loop() {
	defer close(o.done)
	var batch []byte
	for {
		o.mu.Lock()
		for len(o.queue) == 0 && !o.closed {
			o.cond.Wait()
		}
		if len(o.queue) == 0 && o.closed {
			o.mu.Unlock()
			return
		}
		q := o.queue
		o.queue = nil
		o.mu.Unlock()
		// Write in chunks and let go of each line once written: a long
		// answer in pi's full format is tens of MB, and copying the whole
		// backlog into one buffer doubled peak memory.
		for len(q) > 0 {
			batch = batch[:0]
			n := 0
			for n < len(q) && (n == 0 || len(batch)+len(q[n]) < maxBatch) {
				batch = append(batch, q[n]...)
				batch = append(batch, '\n')
				q[n] = nil
				n++
			}
			q = q[n:]
			if _, err := o.w.Write(batch); err != nil {
				o.mu.Lock()
				o.closed = true
				o.queue = nil
				o.mu.Unlock()
				return
			}
			if cap(batch) > 4*maxBatch {
				batch = nil
			}
		}
	}
}

// Close writes what is queued and stops the writer; a reader that never
// reads holds it up for 10 s at most.
func (o *Writer) Close() {
	o.mu.Lock()
	o.closed = true
	o.cond.Signal()
	o.mu.Unlock()
	select {
	case <-o.done:
	case <-time.After(10 * time.Second):
	}
}
