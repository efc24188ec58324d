package sessionws

import (
	"context"
	"strconv"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/server"
)

// A session this node ran moves to another node while connections here
// watch it: this node lost its lease (it stalled, or lost its NATS link,
// past the lease) and another node took the session over. Each
// connection goes on as one of a node that never ran the session
// (cluster.go): the new owner's reading starts the connection's view,
// and its subscription follows the cluster's stream from the last event
// the connection was sent, so the client sees the events go on, each
// once, without a message of the move. Before, the connection kept
// reading the unloaded session: the new owner's questions never reached
// it (input_required is sent for a question still open in the view),
// query_state answered the session as it stood when it left, and
// provide_input answered the unloaded session, not the new owner.

// hosted is the session the connection watches when this node runs it,
// or nil.
func (c *conn) hosted() *server.Hosted {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.h
}

// dropHosted forgets the session this node ran and the connection's
// watch of it, as the session left this node; it reports whether the
// connection watched it (was subscribed). Called with c.op held.
func (c *conn) dropHosted() (subscribed bool) {
	c.mu.Lock()
	w := c.watch
	c.h = nil
	if w != nil && w.away == nil {
		c.watch = nil
	}
	c.mu.Unlock()
	if w == nil || w.away != nil {
		return false
	}
	w.remove(c)
	c.f.release(w)
	return true
}

// Left implements server.Leaver: the session left this node while
// client cl watched it through this watch, and was sent its events
// through after. Its connection moves, in a goroutine of the face's (the
// new owner is asked). A watch of a connection that followed the session
// from another node before this one took it over (its view tracked from
// the events) has nothing to move: it follows the stream again.
func (w *watch) Left(cl *server.Client, _ string, after uint64) bool {
	if w.away != nil {
		return false
	}
	w.mu.Lock()
	var c *conn
	for k := range w.conns {
		if k.client == cl {
			c = k
			break
		}
	}
	w.mu.Unlock()
	if c == nil {
		return false
	}
	f := w.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return true // the server is going: it closes its clients
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		c.moveAway(after)
	}()
	return true
}

// moveAway makes connection c, which watched a session that left this
// node, watch it as a connection of a node that does not run it, from
// the event after `after`. A connection that cannot is closed with the
// reason and the seq to resume after; one whose session was deleted
// meanwhile is told so (4004).
func (c *conn) moveAway(after uint64) {
	c.op.Lock()
	defer c.op.Unlock()
	if c.hosted() == nil || !c.dropHosted() {
		return // unsubscribed, or subscribed again meanwhile (subscribe)
	}
	// Within the time the layer gives its own clients to follow the
	// stream again (the node lost the lease by losing NATS: it may not
	// reach the new owner until its link heals).
	ctx, cancel := context.WithTimeout(c.ctx, max(c.f.srv.LeftFollowFor(), askAgain))
	defer cancel()
	var s seed
	if err := c.ask(ctx, "sessionws.state", struct{}{}, c.who, &s); err != nil {
		c.movedFailed(after, err)
		return
	}
	w := c.f.awayWatchFor(c, &s)
	c.mu.Lock()
	c.watch = w
	c.mu.Unlock()
	hold := server.NewHold()
	var res server.Subscribed
	err := c.ask(ctx, "sessionws.watch", watchPayload{After: &after}, &server.WatchOrigin{Who: c.who, Client: c.client, Codec: w, Hold: hold}, &res)
	if err != nil {
		hold.Release()
		c.leave(nil)
		c.movedFailed(after, err)
		return
	}
	if res.TooOld {
		// What it missed is gone from every log: the state as it is,
		// as a resume with a cursor too old gets.
		snap := c.snapshot(c.f.opt.Now())
		snap.Seq = res.Seq
		c.client.Send(encode(snap))
	}
	hold.Release()
}

// movedFailed closes a connection whose session moved to another node
// and could not be followed from here: with 1011 and the seq to
// subscribe after on a new connection; 4004 when the session is gone.
func (c *conn) movedFailed(after uint64, err error) {
	if c.ctx.Err() != nil {
		return // the connection is closing
	}
	if fault.CodeOf(err) == fault.NotFound {
		c.refuseAway(err)
		return
	}
	c.f.srv.Logger().Warn("sessionws: a connection of a session that moved to another node could not follow it", "session", c.id, "after", after, "err", err)
	c.client.Close(server.Close{Kind: server.CloseOverloaded, Reason: "Session moved to another node; reconnect and subscribe with after_seq " + strconv.FormatUint(after, 10)})
}
