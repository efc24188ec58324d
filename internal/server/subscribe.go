package server

import (
	"sync"

	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/session"
)

// Codec encodes a session's events for one face's wire. Encode returns a
// Frame with neither Data nor Merge for an event the face has no form for.
// For a live event it runs on the session's emitting goroutine, where the
// partial message of a message_update is valid; for a replayed one it
// gets the logged copy. The server calls it once per event and codec,
// whatever the number of subscribers. A codec marks the frames a lagging
// client may get merged (Frame.Key): deltas of one content block. It may
// leave a frame to be encoded when a writer takes it (Merge without Data),
// with a State that keeps what the frame needs. Codec values must be
// comparable (pointers).
type Codec interface {
	Encode(sessionID string, ev session.Event) Frame
}

// PendingEncoder is a Codec that can tell a new subscriber of a question
// still open: one asked before it subscribed, which no replay brings it
// when it came without a cursor (or with one the log cannot serve). The
// frame is sent before any event, marked as no event of the log.
type PendingEncoder interface {
	EncodePending(sessionID string, r interaction.Request) Frame
}

// subscription is one client watching one session. While held, frames
// wait in pending (the client must first receive the response that
// answered its request to subscribe).
type subscription struct {
	codec   Codec
	after   uint64 // frames with a seq at or below this were sent already
	held    bool
	hold    *Hold
	pending []Frame
	seqs    []uint64
	// open are the questions still open when the client subscribed
	// (PendingEncoder), sent before pending.
	open []Frame
}

// Hold keeps new subscriptions from sending until it is released: a face
// subscribes while answering a command and releases once the answer is
// queued, so the client reads the answer before the events. Subscribing
// with a released Hold sends at once.
type Hold struct {
	// mu is a leaf, taken under Hosted.subMu (Subscribe adds to the
	// Hold); Release drops it before taking each subMu.
	mu       sync.Mutex
	released bool
	subs     []heldSub
}

type heldSub struct {
	h   *Hosted
	c   *Client
	sub *subscription
}

// NewHold returns an unreleased Hold.
func NewHold() *Hold { return &Hold{} }

// Release sends what the Hold's subscriptions kept back and lets them
// run. It may be called more than once.
func (hd *Hold) Release() {
	hd.mu.Lock()
	if hd.released {
		hd.mu.Unlock()
		return
	}
	hd.released = true
	subs := hd.subs
	hd.subs = nil
	hd.mu.Unlock()
	for _, x := range subs {
		x.h.subMu.Lock()
		if x.h.subs[x.c] == x.sub {
			x.sub.flush(x.c)
		}
		x.h.subMu.Unlock()
	}
}

// add reports false when the Hold is released already.
func (hd *Hold) add(x heldSub) bool {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	if hd.released {
		return false
	}
	hd.subs = append(hd.subs, x)
	return true
}

// flush sends what was held back, dropping what the client already has;
// h.subMu is held.
func (sub *subscription) flush(c *Client) {
	for _, f := range sub.open {
		c.SendFrame(f)
	}
	sub.open = nil
	for i, f := range sub.pending {
		if sub.seqs[i] > sub.after {
			c.SendFrame(f)
			sub.after = sub.seqs[i]
		}
	}
	sub.pending, sub.seqs, sub.held = nil, nil, false
}

// Subscribed is the outcome of a subscription.
type Subscribed struct {
	// Seq is the last event the client has or is about to get.
	Seq uint64
	// Resumed: a cursor was given and every event after it follows.
	Resumed bool
	// TooOld: a cursor was given that the log cannot serve (older than
	// the log, or beyond the last event); the client needs the whole
	// context instead, and gets events from Seq on.
	TooOld bool
}

// Subscribe makes c receive h's events, encoded by codec. With a cursor
// (after != nil), the events after it are sent first, or the result says
// the cursor is too old; without, events from now on. A subscription of c
// to h made before is replaced. With hold, nothing is sent until it is
// released.
func (s *Server) Subscribe(c *Client, h *Hosted, codec Codec, after *uint64, hold *Hold) Subscribed {
	sub := &subscription{codec: codec, held: true}
	h.subMu.Lock()
	h.subs[c] = sub
	h.subMu.Unlock()
	if !c.watch(h.id) {
		s.unsubscribeAll(c, []string{h.id})
		return Subscribed{Seq: h.sess.Seq()}
	}

	var missed []session.Event
	ok := false
	if after != nil {
		missed, ok = h.sess.EventsSince(*after)
		if !ok && s.cl != nil && h.cl != nil {
			// A cursor from before this node took the session over.
			missed, ok = s.cl.replaySince(h, *after)
		}
	}
	cur := h.sess.Seq()

	h.subMu.Lock()
	defer h.subMu.Unlock()
	if h.subs[c] != sub {
		return Subscribed{Seq: cur} // replaced or unsubscribed meanwhile
	}
	sub.after = cur
	if after != nil && ok {
		sub.after = *after
		// What the client missed goes before the live events that came
		// in meanwhile; duplicates are dropped by seq when sent.
		frames := make([]Frame, 0, len(missed)+len(sub.pending))
		seqs := make([]uint64, 0, len(missed)+len(sub.pending))
		for _, ev := range missed {
			// A replay is every event after the cursor, each as it was:
			// replayed frames are never merged.
			if f := codec.Encode(h.id, ev); f.Data != nil || f.Merge != nil {
				frames = append(frames, f.Encoded())
				seqs = append(seqs, ev.Seq)
			}
		}
		sub.pending = append(frames, sub.pending...)
		sub.seqs = append(seqs, sub.seqs...)
	}
	if pe, can := codec.(PendingEncoder); can && (after == nil || !ok) {
		for _, r := range h.sess.Interactions() {
			if f := pe.EncodePending(h.id, r); f.Data != nil {
				sub.open = append(sub.open, f)
			}
		}
	}
	res := Subscribed{Seq: max(cur, sub.after), Resumed: after != nil && ok, TooOld: after != nil && !ok}
	if hold != nil && hold.add(heldSub{h, c, sub}) {
		sub.hold = hold
		return res
	}
	sub.flush(c)
	return res
}

// Unsubscribe stops c watching h.
func (s *Server) Unsubscribe(c *Client, h *Hosted) {
	h.subMu.Lock()
	delete(h.subs, c)
	h.subMu.Unlock()
	c.forget(h.id)
}

func (s *Server) unsubscribeAll(c *Client, ids []string) {
	for _, id := range ids {
		s.mu.RLock()
		h := s.sessions[id]
		s.mu.RUnlock()
		if h != nil {
			h.subMu.Lock()
			delete(h.subs, c)
			h.subMu.Unlock()
		}
		if s.cl != nil {
			if f := s.cl.feedHosted(id); f != nil {
				f.subMu.Lock()
				delete(f.subs, c)
				f.subMu.Unlock()
				s.cl.unwatched(f)
			}
		}
	}
}

// fanOut sends one session event to the subscribers. It runs on the
// session's emitting goroutine: it encodes once per codec and only queues.
func (h *Hosted) fanOut(ev session.Event) { h.fanOutFed(ev, false) }

// fanOutFed is fanOut of an event a remote feed delivered (cluster
// follow): with now, its frame goes out at once rather than after its
// Linger, taking along the frames of the events that came with it. Such
// an event has waited a round trip to the stream already, and those that
// came in the same stream message are its company: lingering after them
// (StreamLinger, a timer that fires late on a loaded machine) only added
// to how far a watcher on another node trails the session.
func (h *Hosted) fanOutFed(ev session.Event, now bool) {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	if len(h.subs) == 0 {
		return
	}
	if m := h.srv.cfg.Metrics; m != nil {
		m.Event(string(ev.Type))
	}
	// Faces have one or two codecs: a slice beats a map.
	type encoded struct {
		codec Codec
		frame Frame
	}
	cache := make([]encoded, 0, 2) // on the stack: an allocation per event otherwise
	for c, sub := range h.subs {
		var f Frame
		found := false
		for _, e := range cache {
			if e.codec == sub.codec {
				f, found = e.frame, true
				break
			}
		}
		if !found {
			f = sub.codec.Encode(h.id, ev)
			cache = append(cache, encoded{sub.codec, f})
		}
		if f.Data == nil && f.Merge == nil {
			continue
		}
		if sub.held {
			sub.pending = append(sub.pending, f)
			sub.seqs = append(sub.seqs, ev.Seq)
			continue
		}
		if ev.Seq > sub.after {
			sub.after = ev.Seq
			if now {
				f.Linger = 0
			}
			c.SendFrame(f)
		}
	}
}

// Publish sends the frame build makes to every client watching h through
// codec, ordered with the session's event frames: a frame published after
// an event's frames were queued follows them for every client. build runs
// once, under the lock that orders them. Clients whose subscription is
// still held (answering the subscribe) are skipped: they are about to be
// sent the current state anyway.
func (s *Server) Publish(h *Hosted, codec Codec, build func() Frame) {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	var f Frame
	built := false
	for c, sub := range h.subs {
		if sub.codec != codec || sub.held {
			continue
		}
		if !built {
			f, built = build(), true
			if f.Data == nil {
				return
			}
		}
		c.SendFrame(f)
	}
}

// UnsubscribeAfterEvents ends c's subscription to h and, in the same
// step, queues the frame build makes from the seq of the last event frame
// queued to c from h (0 when c did not watch h): a goodbye that counts
// every event the client was sent, with none after it.
func (s *Server) UnsubscribeAfterEvents(c *Client, h *Hosted, build func(seq uint64) []byte) {
	h.subMu.Lock()
	var seq uint64
	if sub := h.subs[c]; sub != nil && !sub.held {
		seq = sub.after
	}
	delete(h.subs, c)
	c.Send(build(seq))
	h.subMu.Unlock()
	c.forget(h.id)
}

// SendAfterEvents queues a frame for c made by build from the seq of the
// last event frame queued to c from h (0 when c does not watch h), so a
// response that carries a cursor never gets ahead of the events it
// counts.
func (s *Server) SendAfterEvents(c *Client, h *Hosted, build func(seq uint64) []byte) {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	var seq uint64
	if sub := h.subs[c]; sub != nil && !sub.held {
		seq = sub.after
	}
	c.Send(build(seq))
}
