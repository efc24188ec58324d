package server

import (
	"slices"
	"time"

	"github.com/agentd-dev/agentd/internal/session"
)

// What a face needs to serve a client of this node from the cluster's
// stream when the session runs elsewhere, beyond WatchOrigin: where the
// client's subscription is now (it moves from the node's feed of the
// session onto the session when this node takes it over: moveFeed), and
// a status derived from the events the client is sent, as a hosted
// session derives its own (tracker).

// Watched is what client c watches session id through on this node: the
// session when this node hosts it, or this node's feed of it from the
// cluster's stream; nil when c watches neither. A face orders a frame
// after the events it counts with it (SendAfterEvents, Publish), looking
// it up each time: a takeover moves the client from the feed onto the
// hosted session.
func (s *Server) Watched(c *Client, id string) *Hosted {
	s.mu.RLock()
	h := s.sessions[id]
	s.mu.RUnlock()
	if h != nil && h.Subscribed(c) {
		return h
	}
	if s.cl != nil {
		if f := s.cl.feedHosted(id); f != nil && f.Subscribed(c) {
			return f
		}
	}
	return nil
}

// UnwatchAfterEvents is UnsubscribeAfterEvents (Unsubscribe when bye is
// nil) on what c watches session id through (Watched), and stops this
// node's feed of the session once none of its clients follows it;
// bye(0) is sent when c watches nothing.
func (s *Server) UnwatchAfterEvents(c *Client, id string, bye func(seq uint64) []byte) {
	h := s.Watched(c, id)
	if h == nil {
		if bye != nil {
			c.Send(bye(0))
		}
		return
	}
	if bye != nil {
		s.UnsubscribeAfterEvents(c, h, bye)
	} else {
		s.Unsubscribe(c, h)
	}
	if h.feed != nil && s.cl != nil {
		s.cl.unwatched(h)
	}
}

// StatusTracker derives a session's Status and history from its events
// on a node that does not run it: seeded from the owner's reading at a
// known seq, then fed each event after it, as the session itself feeds
// its own. Safe for concurrent use.
type StatusTracker struct{ t *tracker }

// NewStatusTracker starts from st (read at event st.Seq) and the history
// of state changes read with it.
func NewStatusTracker(st Status, history []Transition) *StatusTracker {
	t := &tracker{st: st, history: slices.Clone(history), entryID: func() string { return "" }}
	t.state = session.State(st.State)
	if st.State == "" || Terminal(st.State) {
		t.state = session.StateIdle
	}
	if n := len(t.history); n > 0 {
		t.version = t.history[n-1].Version
	}
	if t.st.Updated.IsZero() {
		t.st.Updated = time.Now()
	}
	return &StatusTracker{t: t}
}

// Observe feeds ev; an event at or before the status's seq is one the
// reading had taken in already, and changes nothing.
func (s *StatusTracker) Observe(ev session.Event) {
	t := s.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if ev.Seq != 0 && ev.Seq <= t.st.Seq {
		return
	}
	if t.update(ev) {
		t.rev.Add(1)
	}
}

// Status reads where the session is, as Hosted.Status.
func (s *StatusTracker) Status() Status {
	return (&Hosted{track: s.t}).Status()
}

// StatusRev changes whenever Status does, as Hosted.StatusRev.
func (s *StatusTracker) StatusRev() uint64 { return s.t.rev.Load() }

// History lists the state changes, oldest first, as Hosted.History.
func (s *StatusTracker) History() []Transition { return (&Hosted{track: s.t}).History() }

// TransitionAt is the state change recorded for event seq, as
// Hosted.TransitionAt.
func (s *StatusTracker) TransitionAt(seq uint64) (Transition, bool) {
	return (&Hosted{track: s.t}).TransitionAt(seq)
}
