package piserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/pipeline"
)

// link is what a transport provides to a connection: writing one frame and
// closing with a reason. write is called from the connection's writer
// goroutine only.
type link interface {
	write(ctx context.Context, frame []byte) error
	close(code int, reason string)
}

// conn is one client connection: its subscriptions, its commands in flight
// and its outbound queue, drained by one writer goroutine so that no
// session or command ever waits on a slow client.
type conn struct {
	srv       *Server
	transport string
	link      link

	mu       sync.Mutex
	cond     *sync.Cond
	queue    [][]byte
	queued   int // bytes in queue
	closing  bool
	code     int
	reason   string
	watching map[string]struct{}
	pending  int
	// ownLifecycle limits the lifecycle events sent to this connection to
	// those of its own commands (the client asked with ?lifecycle=own).
	ownLifecycle bool

	done chan struct{} // closed when the writer has stopped
}

func newConn(srv *Server, transport string, l link) *conn {
	c := &conn{srv: srv, transport: transport, link: l, watching: map[string]struct{}{}, done: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// start registers the connection, sends server_ready and starts the
// writer. An error means the connection was refused (limit, shutdown).
func (c *conn) start() error {
	// server_ready is queued before the connection is visible to
	// broadcasts, so it is always the first frame.
	c.send(readyFrame(c.srv.opt.Version))
	if err := c.srv.addConn(c); err != nil {
		close(c.done)
		return err
	}
	c.srv.wg.Add(1)
	go func() {
		defer c.srv.wg.Done()
		c.writeLoop()
	}()
	return nil
}

// send queues a frame. A client that lets more than MaxQueuedBytes pile up
// is disconnected rather than letting the server's memory grow without
// bound; it may reconnect and resume from the last seq it saw.
func (c *conn) send(f []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	if c.queued+len(f) > c.srv.lim.MaxQueuedBytes && c.queued > 0 {
		c.closing, c.code = true, 1011
		c.reason = fmt.Sprintf("Client too slow: more than %d bytes waiting to be sent", c.srv.lim.MaxQueuedBytes)
		c.queue, c.queued = nil, 0
		c.cond.Signal()
		return
	}
	c.queue = append(c.queue, f)
	c.queued += len(f)
	c.cond.Signal()
}

// shutdown closes the connection once what is queued has been written.
func (c *conn) shutdown(code int, reason string) {
	c.mu.Lock()
	if !c.closing {
		c.closing, c.code, c.reason = true, code, reason
	}
	c.cond.Signal()
	c.mu.Unlock()
}

func (c *conn) wait(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		c.link.close(1001, "Server shutting down")
	}
}

func (c *conn) writeLoop() {
	defer close(c.done)
	defer c.finish()
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.closing {
			c.cond.Wait()
		}
		if len(c.queue) == 0 {
			code, reason := c.code, c.reason
			c.mu.Unlock()
			c.srv.log.Debug("closing connection", "transport", c.transport, "code", code, "reason", reason)
			c.link.close(code, reason)
			return
		}
		q := c.queue
		c.queue = nil
		c.mu.Unlock()
		for i, f := range q {
			if err := c.link.write(c.srv.ctx, f); err != nil {
				c.srv.log.Debug("connection write failed", "transport", c.transport, "err", err)
				c.mu.Lock()
				c.closing, c.queue, c.queued = true, nil, 0
				c.mu.Unlock()
				c.link.close(1011, "write failed")
				return
			}
			q[i] = nil
			c.mu.Lock()
			c.queued -= len(f)
			c.mu.Unlock()
		}
	}
}

// finish unregisters the connection and its subscriptions.
func (c *conn) finish() {
	c.mu.Lock()
	ids := make([]string, 0, len(c.watching))
	for id := range c.watching {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	c.srv.unsubscribeAll(c, ids)
	c.srv.removeConn(c)
}

// closed is called by the transport when the client went away.
func (c *conn) closed() { c.shutdown(1000, "") }

func (c *conn) watch(id string) {
	c.mu.Lock()
	c.watching[id] = struct{}{}
	c.mu.Unlock()
}

func (c *conn) forget(id string) {
	c.mu.Lock()
	delete(c.watching, id)
	c.mu.Unlock()
}

// oversize answers a frame of n bytes that was too big to read.
func (c *conn) oversize(n int) {
	c.srv.rejected.messageSize.Add(1)
	c.send(failureFrame("", "unknown", fmt.Sprintf("Message size %d exceeds limit %d", n, c.srv.lim.MaxFrameBytes)))
}

// handle admits one inbound frame.
func (c *conn) handle(data []byte) {
	s := c.srv
	if len(data) > s.lim.MaxFrameBytes {
		c.oversize(len(data))
		return
	}
	cmd, perr := decodeCommand(data, s.commandSpecs)
	if perr != nil {
		c.send(failureFrame(perr.id, perr.command, perr.msg))
		return
	}
	if e := s.rates.admit(cmd); e != nil {
		switch e.limit {
		case "global":
			s.rejected.globalRateLimit.Add(1)
		case "ui":
			s.rejected.uiRateLimit.Add(1)
		default:
			s.rejected.rateLimit.Add(1)
		}
		c.send(failureFrame(cmd.ID, cmd.Type, e.msg))
		return
	}
	c.mu.Lock()
	if c.pending >= s.lim.MaxPending {
		c.mu.Unlock()
		s.rejected.pending.Add(1)
		c.send(failureFrame(cmd.ID, cmd.Type, fmt.Sprintf("Too many pending commands on this connection (max %d)", s.lim.MaxPending)))
		return
	}
	c.pending++
	c.mu.Unlock()
	settle := func() {}
	if (cmd.Type == "create_session" || cmd.Type == "load_session") && cmd.SessionID != "" {
		settle = s.expectSession(cmd.SessionID)
	}
	started := time.Now()
	cmd.Origin = c
	s.pipe.Submit(cmd, func(r pipeline.Response) {
		defer settle()
		c.mu.Lock()
		c.pending--
		c.mu.Unlock()
		if s.opt.Metrics != nil {
			s.opt.Metrics.ObserveCommand(cmd.Type, r.Success, time.Since(started))
		}
		if r.Err == nil || r.Err.Code != pipeline.CodeShuttingDown {
			s.executed.Add(1)
		}
		c.send(responseFrame(r))
		s.afterResponse(c, cmd, r)
	})
}
