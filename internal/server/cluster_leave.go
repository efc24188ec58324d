package server

import "time"

// A session this node hosted leaves it: its lease ended under it (the
// node stalled, or lost its NATS link, past the lease, and another node
// took the session over), and lost unloads it. The clients of this node
// that watched it keep watching it, as clients of a node that never ran
// it do: from the cluster's stream, from the last event each was sent.
//
// A face whose codec holds the hosted session itself (the per-session
// WebSocket's watch reads the session's status and open questions from
// it) moves its clients itself (Leaver): put on the stream with that
// codec, a client was sent nothing of the next owner's questions, its
// query_state answered the session as it stood when it left, and its
// provide_input answered the unloaded session. A client the stream
// cannot take yet (the node cannot follow it: its NATS link is down,
// which is how it lost the lease) is put on it once it can, from the
// same seq, and is closed with the reason, to resume from its last seq,
// if that does not come within LeftFollowFor. It was left subscribed to
// nothing before: after a partition healed, pi-server, SSE and session-WS
// clients of the old owner heard nothing more, and were told nothing.

// Leaver is a Codec whose face moves its clients itself when the session
// they watch leaves this node.
type Leaver interface {
	// Left tells the codec that client c, which watched session id with
	// it, was sent the events through seq after when the session left
	// this node: the client is subscribed to nothing now, and the face
	// subscribes it again (as a client of a node that does not run the
	// session) or closes it with the reason. Left must not block. False
	// says the codec's face has nothing to move: the client follows the
	// session from the stream with the codec, as any other.
	Left(c *Client, id string, after uint64) bool
}

// movedClose is what a client is told when its session left this node
// and it could not go on watching it here.
const movedClose = "Session moved to another node and cannot be followed here now; reconnect and resume from the last seq you saw"

// LeftFollowFor bounds how long the clients of a session that left this
// node wait for the cluster's stream to become readable (the node's NATS
// link back) before they are closed: six lease TTLs, time for a
// partition that cost the lease to heal and for a takeover, beyond the
// first try, which waits up to clusterOpenTimeout for NATS (70 s at the
// default TTL). A face that moves its clients itself (Leaver) waits as
// long. Zero without a cluster.
func (s *Server) LeftFollowFor() time.Duration {
	if s.cl == nil {
		return 0
	}
	return 6*s.cl.node.LeaseTTL() + clusterOpenTimeout
}

// leftFollow is a client to put on the stream.
type leftFollow struct {
	c     *Client
	codec Codec
	after uint64
}

// left moves the clients that watched hosted session h off it, in a
// goroutine of the cluster's, once it is unloaded; closed says the
// node's cluster link closed (the node stops): nobody follows anything
// here then.
func (cs *clusterState) left(h *Hosted, closed bool) {
	cs.wg.Add(1)
	go func() {
		defer cs.wg.Done()
		h.subMu.Lock()
		subs := make(map[*Client]*subscription, len(h.subs))
		for c, sub := range h.subs {
			subs[c] = sub
		}
		h.subMu.Unlock()
		if cs.s.unload(h, false) != nil || closed {
			return
		}
		// From the last event each was sent, read once unload has
		// stopped the fan-out.
		var follow []leftFollow
		for c, sub := range subs {
			h.subMu.Lock()
			after, held := sub.after, sub.held
			h.subMu.Unlock()
			if held || c.Closing() {
				continue
			}
			if l, ok := sub.codec.(Leaver); ok && l.Left(c, h.id, after) {
				continue
			}
			follow = append(follow, leftFollow{c, sub.codec, after})
		}
		cs.followLeft(h.id, follow)
	}()
}

// followLeft puts the clients of session id, which left this node, on
// the stream: at once when it can be read, else as soon as it can (a
// node loses its lease when it lost its NATS link, and the link comes
// back), within LeftFollowFor; a client still not following then is
// closed with the reason.
func (cs *clusterState) followLeft(id string, follow []leftFollow) {
	deadline := time.NewTimer(cs.s.LeftFollowFor())
	defer deadline.Stop()
	pause := 100 * time.Millisecond
	for {
		kept := follow[:0]
		for _, f := range follow {
			if f.c.Closing() {
				continue
			}
			if res := cs.subscribeRemote(f.c, id, f.codec, &f.after, nil); !res.Resumed {
				kept = append(kept, f)
			}
		}
		follow = kept
		if len(follow) == 0 {
			return
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
			pause = min(2*pause, 2*time.Second)
			continue
		case <-deadline.C:
		case <-cs.ctx.Done():
		}
		t.Stop()
		if cs.ctx.Err() != nil {
			return // stopping: the server closes its clients
		}
		for _, f := range follow {
			cs.s.log.Warn("cluster: a client of a session that left this node could not follow it from the stream", "session", id, "after", f.after)
			f.c.Close(Close{Kind: CloseOverloaded, Reason: movedClose})
		}
		return
	}
}
