package server

// A node that takes over a session its clients followed from the stream
// moves those clients onto the session it now hosts.
//
// Before, they stayed on the node's follow of the stream, which the node
// now fed itself: each event went out to NATS and came back before they
// saw it, while the answers to their commands, now run here, went out at
// once. A pi-server client thus got a prompt's answer before the run's
// last events (state_changed idle came after agent_end, ahead of neither
// answer nor test; TestClusterHandoverKeepsSeqsContiguous saw two clients
// agree on agent_end as the last seq while idle was still on its way, and
// took that as the run's tail). On the hosted session they get the
// events as the session emits them, before any answer, as on one server.

// adoptFeed moves this node's clients that follow hosted session h from
// the stream onto h, in a goroutine of the cluster's (a client whose
// cursor is from before the takeover is replayed from the stream, which
// must not hold up the session's opening). A no-op when no client here
// follows h.
func (cs *clusterState) adoptFeed(h *Hosted) {
	if cs.feedHosted(h.id) == nil {
		return
	}
	cs.wg.Add(1)
	go func() {
		defer cs.wg.Done()
		cs.moveFeed(h)
	}()
}

// moveFeed moves each subscriber of the feed of h's session onto h, from
// the last event the feed sent it: taken off the feed first, then
// subscribed to h with that cursor, so an event that reaches neither
// subscription in between is in what h replays (its log, or the stream
// for a cursor from before the takeover). A subscription still being
// made (held) stays on the feed; checkNodes tries again. The feed stops
// once nobody follows it.
func (cs *clusterState) moveFeed(h *Hosted) {
	f := cs.feedHosted(h.id)
	if f == nil || cs.ctx.Err() != nil {
		return
	}
	type moving struct {
		c     *Client
		codec Codec
		after uint64
	}
	var moves []moving
	f.subMu.Lock()
	for c, sub := range f.subs {
		if sub.held {
			continue
		}
		moves = append(moves, moving{c, sub.codec, sub.after})
		delete(f.subs, c)
	}
	f.subMu.Unlock()
	for _, m := range moves {
		if m.c.Closing() {
			continue
		}
		after := m.after
		if res := cs.s.Subscribe(m.c, h, m.codec, &after, nil); !res.Resumed {
			// Neither the log nor the stream could give what the client
			// missed: it is told, and resumes from its last seq.
			cs.s.Unsubscribe(m.c, h)
			cs.s.log.Warn("cluster: a client following a session taken over here could not be moved onto it", "session", h.id, "after", after)
			m.c.Close(Close{Kind: CloseOverloaded, Reason: "Lost the session's event stream; reconnect and resume from the last seq you saw"})
			continue
		}
		if cs.hostedHere(h.id) != h && !cs.feedHas(h.id, m.c) {
			// Unloaded meanwhile (its lease lost, lost() moving its
			// clients back to the stream may have missed this one): back
			// to the stream from what h sent it.
			h.subMu.Lock()
			sub := h.subs[m.c]
			delete(h.subs, m.c)
			h.subMu.Unlock()
			if sub != nil && !sub.held {
				after = sub.after
			}
			cs.subscribeRemote(m.c, h.id, m.codec, &after, nil)
		}
	}
	cs.unwatched(f)
}

// hostedHere is session id if this node hosts it (with its lease), else
// nil.
func (cs *clusterState) hostedHere(id string) *Hosted {
	cs.s.mu.RLock()
	defer cs.s.mu.RUnlock()
	if h := cs.s.sessions[id]; h != nil && h.cl != nil {
		return h
	}
	return nil
}

// feedHas reports whether c follows session id from the stream here.
func (cs *clusterState) feedHas(id string, c *Client) bool {
	f := cs.feedHosted(id)
	return f != nil && f.Subscribed(c)
}
