package acp

import (
	"io"
	"sync"
	"time"
)

// output writes lines from one goroutine, so a session emitting updates
// never waits for the editor to read them.
type output struct {
	mu     sync.Mutex
	cond   *sync.Cond
	queue  [][]byte
	closed bool
	done   chan struct{}
	w      io.Writer
}

func newOutput(w io.Writer) *output {
	o := &output{w: w, done: make(chan struct{})}
	o.cond = sync.NewCond(&o.mu)
	go o.loop()
	return o
}

func (o *output) write(line []byte) {
	o.mu.Lock()
	if !o.closed {
		o.queue = append(o.queue, line)
		o.cond.Signal()
	}
	o.mu.Unlock()
}

func (o *output) loop() {
	defer close(o.done)
	var buf []byte
	for {
		o.mu.Lock()
		for len(o.queue) == 0 && !o.closed {
			o.cond.Wait()
		}
		q := o.queue
		o.queue = nil
		closed := o.closed
		o.mu.Unlock()
		if len(q) == 0 && closed {
			return
		}
		buf = buf[:0]
		for _, l := range q {
			buf = append(buf, l...)
			buf = append(buf, '\n')
		}
		if _, err := o.w.Write(buf); err != nil {
			// The editor is gone: nothing more can reach it.
			o.mu.Lock()
			o.closed = true
			o.queue = nil
			o.mu.Unlock()
			return
		}
		if cap(buf) > 1<<20 {
			buf = nil
		}
	}
}

// close writes what is queued and stops the writer; a reader that never
// reads does not keep agentd from exiting.
func (o *output) close() {
	o.mu.Lock()
	o.closed = true
	o.cond.Signal()
	o.mu.Unlock()
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-o.done:
	case <-t.C:
	}
}
