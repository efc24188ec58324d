package piserver

import (
	"context"
	"fmt"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/piwire"
	"github.com/agentd-dev/agentd/internal/server"
)

// link is what a transport provides: writing one frame and closing with a
// WebSocket close code and reason. write is called from the connection's
// writer goroutine only.
type link interface {
	write(ctx context.Context, frame []byte) error
	close(code int, reason string)
}

// Close codes.
const (
	closeNormal     = 1000
	closeGoingAway  = 1001
	closePolicy     = 1008 // authentication failed
	closeOverloaded = 1011
	closeTryAgain   = 1013 // connection limit
)

// wireLink adapts a link to the layer: it maps why the layer closes a
// client to pi-server's close codes.
type wireLink struct{ l link }

func (w wireLink) Write(ctx context.Context, frames [][]byte) error {
	if b, ok := w.l.(batchLink); ok {
		return b.writeBatch(ctx, frames)
	}
	for _, f := range frames {
		if err := w.l.write(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

// batchLink is a link that writes several frames in one go.
type batchLink interface {
	writeBatch(ctx context.Context, frames [][]byte) error
}

func (w wireLink) Close(c server.Close) {
	code := closeNormal
	switch c.Kind {
	case server.CloseGoingAway:
		code = closeGoingAway
	case server.CloseOverloaded:
		code = closeOverloaded
	}
	w.l.close(code, c.Reason)
}

// conn is one client connection of this face: a client of the layer, plus
// what the face needs to know of it.
type conn struct {
	srv       *Server
	transport string
	remote    string // the peer's address, for logs
	link      link
	client    *server.Client
	// ownLifecycle limits the lifecycle events sent to this connection to
	// those of its own commands (the client asked with ?lifecycle=own).
	ownLifecycle bool
	// who is the principal the connection authenticated as.
	who server.Principal
}

func newConn(srv *Server, transport string, l link) *conn {
	return &conn{srv: srv, transport: transport, link: l}
}

// refusal is a connection the server turns away, with the close code and
// reason the client sees.
type refusal struct {
	code   int
	reason string
}

func (r *refusal) Error() string { return r.reason }

// start attaches the connection, sends server_ready first and starts the
// writer. An error (a *refusal) means the connection was refused.
func (c *conn) start() error {
	cl, err := c.srv.srv.Attach(wireLink{c.link}, server.ClientOptions{
		Face: face, Transport: c.transport, Value: c,
		// startup_recovery_summary follows server_ready, redacted: a client
		// asks get_startup_recovery for the paths and ids.
		First: [][]byte{readyFrame(c.srv.opt.Version), piwire.Marshal(frame{"startup_recovery_summary", recoveryData(c.srv.srv.Pipeline().StartupRecovery().Redacted())})},
	})
	if err != nil {
		code := closeOverloaded
		switch fault.CodeOf(err) {
		case fault.ShuttingDown:
			code = closeGoingAway
		case fault.Limit:
			code = closeTryAgain
		}
		return &refusal{code, err.Error()}
	}
	c.client = cl
	return nil
}

func (c *conn) send(f []byte) { c.client.Send(f) }

// closed is called by the transport when the client went away.
func (c *conn) closed() { c.client.Close(server.Close{Kind: server.CloseNormal}) }

// done is closed once the connection's writer has stopped.
func (c *conn) done() <-chan struct{} { return c.client.Done() }

// oversize answers a frame of n bytes that was too big to read.
func (c *conn) oversize(n int) {
	c.srv.srv.Reject(server.RejectMessageSize)
	c.send(failureFrame("", "unknown", fmt.Sprintf("Message size %d exceeds limit %d", n, c.srv.srv.Limits().MaxFrameBytes)))
}

// origin is what the pipeline hands back on a command's lifecycle events
// and what its handler sees: the connection, and the hold that keeps a
// subscription the handler makes from sending before the response.
type origin struct {
	c    *conn
	hold *server.Hold
}

// Principal is who sent the command, for a cluster node passing it on.
func (o *origin) Principal() server.Principal { return o.c.who }

// SubscribeTarget lets a cluster node subscribe the connection to a
// session another node runs, as the handler would have here.
func (o *origin) SubscribeTarget() (*server.Client, server.Codec, *server.Hold) {
	return o.c.client, o.c.srv.codec, o.hold
}

// rateClass is the budget a command is counted against: control commands
// (what a client needs to regain control) never starve behind data.
func rateClass(typ string) server.RateClass {
	switch typ {
	case "extension_ui_response":
		return server.RateUIResponse
	case "delete_session", "switch_session", "abort", "abort_bash", "abort_retry", "abort_compaction":
		return server.RateControl
	}
	return server.RateData
}

// handle admits one inbound frame.
func (c *conn) handle(data []byte) {
	s := c.srv
	lim := s.srv.Limits()
	if len(data) > lim.MaxFrameBytes {
		c.oversize(len(data))
		return
	}
	cmd, perr := decodeCommand(data, s.commandSpecs)
	if perr != nil {
		c.send(failureFrame(perr.id, perr.command, perr.msg))
		return
	}
	if !c.client.Acquire() {
		s.srv.Reject(server.RejectPending)
		c.send(failureFrame(cmd.ID, cmd.Type, fmt.Sprintf("Too many pending commands on this connection (max %d)", lim.MaxPending)))
		return
	}
	settled := func() {}
	if (cmd.Type == "create_session" || cmd.Type == "load_session") && cmd.SessionID != "" {
		settled = s.srv.Expect(cmd.SessionID)
	}
	started := time.Now()
	// Command ids and idempotency keys are remembered server-wide for
	// replay; a scoped principal's live in a namespace of its own, so one
	// subject's id never replays another's answer.
	scoped := c.who.Scoped
	cmd.ID, cmd.IdempotencyKey = c.who.Own(cmd.ID), c.who.Own(cmd.IdempotencyKey)
	for i, d := range cmd.DependsOn {
		cmd.DependsOn[i] = c.who.Own(d)
	}
	o := &origin{c: c, hold: server.NewHold()}
	cmd.Origin = o
	// Counted against the rate limits once the pipeline knows the command
	// runs: a replay of an id or idempotency key it has an outcome (or a
	// run) for is answered with that outcome, uncounted (spec §8.1/§8.2),
	// also when the bucket is full: it is the retry path clients are told
	// to use.
	sid, class := cmd.SessionID, rateClass(cmd.Type)
	cmd.Admit = func() *fault.Error {
		if e := s.srv.Admit(sid, class); e != nil {
			return e.Error
		}
		return nil
	}
	cmd.Sender = c // a slow connection holds up only its own answers
	s.srv.Submit(cmd, func(r pipeline.Response) {
		// The session a create or load announced has arrived (or
		// failed) by now: lookups stop waiting for it before anything
		// below looks it up.
		settled()
		c.client.Release()
		if m := s.srv.Metrics(); m != nil {
			m.ObserveCommand(cmd.Type, r.Success, time.Since(started))
		}
		s.log(cmd, r, time.Since(started))
		if scoped {
			r.ID = server.ClientID(r.ID)
			if r.Err != nil {
				e := *r.Err
				e.Message = server.ClientText(e.Message)
				r.Err = &e
			}
		}
		c.send(responseFrame(r))
		// Subscriptions the handler made send from here on: after the
		// response.
		o.hold.Release()
		s.afterResponse(c, cmd, r)
	})
}
