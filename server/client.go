package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// CloseKind says why the server closes a client; each transport maps it
// to its wire (a WebSocket close code, the end of an event stream).
type CloseKind int

// Close kinds.
const (
	// CloseNormal: the client went away or the exchange is over.
	CloseNormal CloseKind = iota
	// CloseGoingAway: the server is shutting down, or the transport lost
	// the client (a missed heartbeat).
	CloseGoingAway
	// CloseOverloaded: the client fell too far behind, or a write failed;
	// it may reconnect and resume from the last seq it saw.
	CloseOverloaded
)

// Close is why a client is closed, with a reason a person can read.
type Close struct {
	Kind   CloseKind
	Reason string
}

// Link is what a transport provides to a client: writing one frame, and
// closing with a reason. Write is called from the client's writer
// goroutine only; Close may be called from any goroutine, more than once.
type Link interface {
	Write(ctx context.Context, frame []byte) error
	Close(c Close)
}

// Client is one connection of any face: its outbound queue, drained by
// one writer goroutine so that no session or command ever waits on a slow
// client; its subscriptions; and its commands in flight. Producers
// (session fan-out, lifecycle broadcasts, responses) only append.
type Client struct {
	srv  *Server
	face string
	link Link
	// Value is the face's own state for the connection.
	Value any

	mu       sync.Mutex
	cond     *sync.Cond
	queue    [][]byte
	queued   atomic.Int64 // bytes in queue, read by the budget without mu
	closing  bool
	cl       Close
	watching map[string]struct{}
	pending  int
	dropped  bool // cut off: the queue was discarded and uncounted

	done chan struct{} // closed when the writer has stopped
}

// ClientOptions describe a connection being attached.
type ClientOptions struct {
	// Face names the protocol face; Broadcast reaches the clients of one
	// face.
	Face string
	// Transport names the transport, for metrics ("websocket", "stdio").
	Transport string
	// First are queued before anything else can be (server_ready, and
	// what a face sends right after it).
	First [][]byte
	Value any
}

// Attach registers a connection and starts its writer. An error means the
// connection is refused (the connection limit, shutdown): it is a
// *fault.Error saying which.
func (s *Server) Attach(link Link, o ClientOptions) (*Client, error) {
	c := &Client{srv: s, face: o.Face, link: link, Value: o.Value, watching: map[string]struct{}{}, done: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	for _, f := range o.First {
		c.Send(f)
	}
	if err := s.addClient(c, o.Transport); err != nil {
		close(c.done)
		return nil, err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		c.writeLoop(o.Transport)
	}()
	return c, nil
}

// Face is the face the client belongs to.
func (c *Client) Face() string { return c.face }

// Done is closed once the client's writer has stopped and the client is
// detached.
func (c *Client) Done() <-chan struct{} { return c.done }

// Send queues a frame. A client that lets more than its share pile up is
// disconnected rather than letting the server's memory grow without
// bound; it may reconnect and resume from the last seq it saw.
func (c *Client) Send(f []byte) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	limit := int64(c.srv.lim.MaxQueuedBytes)
	if q := c.queued.Load(); q+int64(len(f)) > limit && q > 0 {
		c.cutLocked(fmt.Sprintf("Client too slow: more than %d bytes waiting to be sent", limit))
		c.mu.Unlock()
		return
	}
	c.queue = append(c.queue, f)
	c.queued.Add(int64(len(f)))
	c.cond.Signal()
	c.mu.Unlock()
	c.srv.budget.charge(c.srv, int64(len(f)))
}

// cutLocked drops what is queued and closes the client as overloaded;
// c.mu is held. It reports false when the client was closing already.
func (c *Client) cutLocked(reason string) bool {
	if c.closing {
		return false
	}
	c.closing, c.dropped, c.cl = true, true, Close{CloseOverloaded, reason}
	c.srv.budget.release(c.queued.Swap(0))
	c.queue = nil
	c.cond.Signal()
	return true
}

// cut is cutLocked for a caller without the lock.
func (c *Client) cut(reason string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cutLocked(reason)
}

// Close closes the client once what is queued has been written.
func (c *Client) Close(cl Close) {
	c.mu.Lock()
	if !c.closing {
		c.closing, c.cl = true, cl
	}
	c.cond.Signal()
	c.mu.Unlock()
}

// Closing reports whether the client is being closed.
func (c *Client) Closing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing
}

// Acquire counts one more command in flight, or reports false when the
// client has its limit in flight already.
func (c *Client) Acquire() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending >= c.srv.lim.MaxPending {
		return false
	}
	c.pending++
	return true
}

// Release ends a command Acquire counted.
func (c *Client) Release() {
	c.mu.Lock()
	c.pending--
	c.mu.Unlock()
}

// wait waits up to d for the writer to stop, then closes the link.
func (c *Client) wait(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		c.link.Close(Close{CloseGoingAway, "Server shutting down"})
	}
}

func (c *Client) writeLoop(transport string) {
	defer close(c.done)
	defer c.detach(transport)
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.closing {
			c.cond.Wait()
		}
		if len(c.queue) == 0 || c.dropped {
			cl := c.cl
			c.mu.Unlock()
			c.srv.log.Debug("closing connection", "face", c.face, "transport", transport, "kind", cl.Kind, "reason", cl.Reason)
			c.link.Close(cl)
			return
		}
		// One frame at a time: a client stuck in a write holds only the
		// frame being written, so cutting it off frees the rest at once.
		f := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		c.mu.Unlock()
		if err := c.link.Write(c.srv.ctx, f); err != nil {
			c.srv.log.Debug("connection write failed", "face", c.face, "transport", transport, "err", err)
			c.mu.Lock()
			if !c.dropped {
				c.closing, c.dropped = true, true
				c.srv.budget.release(c.queued.Swap(0))
			}
			c.queue = nil
			c.mu.Unlock()
			c.link.Close(Close{CloseOverloaded, "write failed"})
			return
		}
		c.mu.Lock()
		if !c.dropped {
			c.queued.Add(-int64(len(f)))
			c.srv.budget.release(int64(len(f)))
		}
		c.mu.Unlock()
	}
}

// detach unregisters the client and its subscriptions.
func (c *Client) detach(transport string) {
	c.mu.Lock()
	ids := make([]string, 0, len(c.watching))
	for id := range c.watching {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	c.srv.unsubscribeAll(c, ids)
	c.srv.removeClient(c, transport)
}

func (c *Client) watch(id string) {
	c.mu.Lock()
	c.watching[id] = struct{}{}
	c.mu.Unlock()
}

func (c *Client) forget(id string) {
	c.mu.Lock()
	delete(c.watching, id)
	c.mu.Unlock()
}

// budget bounds the bytes queued for all clients together. Each client
// has its own limit too; the budget is what keeps many slow clients, each
// within its own limit, from adding up to more than the server can hold.
// Over budget, the clients furthest behind are cut off first.
type budget struct {
	max   int64
	total atomic.Int64
}

func (b *budget) charge(s *Server, n int64) {
	if b.max <= 0 || b.total.Add(n) <= b.max {
		return
	}
	// Cut off the clients with the most queued until under budget again.
	// Rare, so a scan of every client is fine.
	for b.total.Load() > b.max {
		victim := s.furthestBehind()
		if victim == nil {
			return
		}
		if victim.cut(fmt.Sprintf("Server send budget exhausted (%d bytes queued for all clients): this client was furthest behind; reconnect and resume from the last seq you saw", b.max)) {
			s.rejectedBudget.Add(1)
		}
	}
}

func (b *budget) release(n int64) {
	if n != 0 {
		b.total.Add(-n)
	}
}
