package server

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd-dev/agentd/internal/cluster"
	"github.com/agentd-dev/agentd/internal/session"
)

// Remote feeds: sessions owned elsewhere that clients here watch.

// feed is the follow of a session owned by another node.
type feed struct {
	follow *cluster.Follow

	mu      sync.Mutex
	seq     uint64 // the last event delivered
	waiters []feedWaiter

	// fanning is the seq of the event being fanned out or the last one
	// fanned out, set before its fan-out begins: a subscriber added after
	// that fan-out gets what it missed up to here from the stream.
	fanning atomic.Uint64
}

type feedWaiter struct {
	seq  uint64
	done chan struct{}
}

// feedCatchUp bounds how long an answer waits for its events to arrive
// through the stream. At 1,000 sessions on two cores the stream lagged
// past 5 s for one prompt in 5,000; the wait ends sooner when the feed
// stops or the node does.
const feedCatchUp = 30 * time.Second

// advance records that the feed delivered seq.
func (fd *feed) advance(seq uint64) {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if seq > fd.seq {
		fd.seq = seq
	}
	kept := fd.waiters[:0]
	for _, w := range fd.waiters {
		if w.seq <= fd.seq {
			close(w.done)
		} else {
			kept = append(kept, w)
		}
	}
	clear(fd.waiters[len(kept):])
	fd.waiters = kept
}

func (fd *feed) delivered(seq uint64) bool {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	return fd.seq >= seq
}

// reached is closed once the feed has delivered seq.
func (fd *feed) reached(seq uint64) <-chan struct{} {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	done := make(chan struct{})
	if fd.seq >= seq {
		close(done)
		return done
	}
	fd.waiters = append(fd.waiters, feedWaiter{seq: seq, done: done})
	return done
}

// catchUp waits until the feed has delivered seq, within feedCatchUp; it
// ends sooner when stopped closes (the feed's follow ended) or ctx ends.
// late says the bound passed first, delivered what the feed had
// delivered by then. A wait that ends without its seq leaves no waiter
// behind: a feed that stalls must not collect one per answer.
func (fd *feed) catchUp(ctx context.Context, seq uint64, stopped <-chan struct{}) (late bool, delivered uint64) {
	t := time.NewTimer(feedCatchUp)
	defer t.Stop()
	done := fd.reached(seq)
	select {
	case <-done:
		return false, 0
	case <-stopped:
	case <-ctx.Done():
	case <-t.C:
		late = true
	}
	fd.mu.Lock()
	defer fd.mu.Unlock()
	fd.waiters = slices.DeleteFunc(fd.waiters, func(w feedWaiter) bool { return w.done == done })
	if late {
		return true, fd.seq
	}
	return false, 0
}

// subscribeRemote makes c watch session id, owned by another node, from
// the stream: the events after *after (all of them the stream has), then
// the live ones.
func (cs *clusterState) subscribeRemote(c *Client, id string, codec Codec, after *uint64, hold *Hold) Subscribed {
	h, err := cs.feedFor(id, *after)
	if err != nil {
		cs.s.log.Warn("cluster: following a session", "session", id, "err", err)
		return Subscribed{Seq: *after}
	}
	sub := &subscription{codec: codec, held: true}
	h.subMu.Lock()
	h.subs[c] = sub
	h.subMu.Unlock()
	if !c.watch(id) {
		cs.s.unsubscribeAll(c, []string{id}) // stops the feed if nobody else watches
		return Subscribed{Seq: *after}
	}
	ctx, cancel := context.WithTimeout(cs.ctx, clusterOpenTimeout)
	missed, err := cs.replayThrough(ctx, id, *after, h.feed.fanning.Load())
	cancel()
	if err != nil {
		cs.s.log.Warn("cluster: replaying a session", "session", id, "err", err)
	}
	h.subMu.Lock()
	defer h.subMu.Unlock()
	if h.subs[c] != sub {
		return Subscribed{Seq: *after}
	}
	sub.after = *after
	frames := make([]Frame, 0, len(missed)+len(sub.pending))
	seqs := make([]uint64, 0, len(missed)+len(sub.pending))
	for _, e := range missed {
		ev, ok := cs.decode(id, e)
		if !ok {
			continue
		}
		if f := codec.Encode(id, ev); f.Data != nil || f.Merge != nil {
			frames = append(frames, f.Encoded())
			seqs = append(seqs, ev.Seq)
		}
	}
	sub.pending = append(frames, sub.pending...)
	sub.seqs = append(seqs, sub.seqs...)
	res := Subscribed{Seq: *after, Resumed: true}
	if n := len(seqs); n > 0 {
		res.Seq = seqs[n-1]
	}
	if hold != nil && hold.add(heldSub{h, c, sub}) {
		sub.hold = hold
		return res
	}
	sub.flush(c)
	return res
}

// replayThrough reads the session's events after after from the stream,
// through seq reach at least: what the shared feed had fanned out before
// the subscriber joined it. The feed delivers events from the live path
// before the stream stores them (cluster.Follow), so the stream may not
// have them yet; it is read again, a little later each time, until it
// does or ctx ends (the owner died before storing them: the subscriber
// goes on without them, as the owner's own clients would have seen them
// and the stream never will).
func (cs *clusterState) replayThrough(ctx context.Context, id string, after, reach uint64) ([]cluster.Event, error) {
	missed, err := cs.node.Replay(ctx, id, after)
	last := after
	if n := len(missed); n > 0 {
		last = missed[n-1].Seq
	}
	for wait := 10 * time.Millisecond; err == nil && last < reach; wait = min(2*wait, 250*time.Millisecond) {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			cs.s.log.Warn("cluster: the stream did not store what a session's feed had shown in time; a subscriber joining it misses those events",
				"session", id, "stored", last, "shown", reach)
			return missed, nil
		case <-t.C:
		}
		var more []cluster.Event
		more, err = cs.node.Replay(ctx, id, last)
		missed = append(missed, more...)
		if n := len(more); n > 0 {
			last = more[n-1].Seq
		}
	}
	return missed, err
}

func (cs *clusterState) decode(id string, e cluster.Event) (session.Event, bool) {
	var ev session.Event
	if err := json.Unmarshal(e.Data, &ev); err != nil {
		cs.s.log.Warn("cluster: an event in the stream could not be read", "session", id, "seq", e.Seq, "err", err)
		return ev, false
	}
	ev.Seq = e.Seq
	return ev, true
}

// replaySince is what a client of this node missed of hosted session h
// after the cursor after, when h's own log cannot say: the cursor is from
// before this node took h over, and the log starts at this node's first
// seq. The stream keeps every event published, by any owner; the log has
// those not published yet. As a client of another node resumes through
// the stream (Remote.Subscribe), so does one of this node.
func (cs *clusterState) replaySince(h *Hosted, after uint64) ([]session.Event, bool) {
	if after > h.sess.Seq() {
		return nil, false // a cursor this session never issued
	}
	if cs.s.tooFarBack(h.sess.Seq(), after) {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(cs.ctx, clusterOpenTimeout)
	defer cancel()
	evs, err := cs.node.Replay(ctx, h.id, after)
	if err != nil {
		cs.s.log.Warn("cluster: replaying a session for a resumed client", "session", h.id, "err", err)
		return nil, false
	}
	out := make([]session.Event, 0, len(evs))
	last := after
	for _, e := range evs {
		ev, ok := cs.decode(h.id, e)
		if !ok {
			return nil, false // a hole in what the client would get
		}
		out = append(out, ev)
		last = ev.Seq
	}
	// Seqs between the last owner's and this node's first are never
	// used: a new owner starts past what the old one had reserved.
	rest, ok := h.sess.EventsSince(max(last, h.sess.FirstSeq()))
	if !ok {
		return nil, false
	}
	return append(out, rest...), true
}

// feedFor returns the follow of session id shared by this node's
// subscribers, starting one after seq when there is none. The follow is
// started without cs.mu held (it reads the stream), so routing never
// waits on it.
func (cs *clusterState) feedFor(id string, after uint64) (*Hosted, error) {
	cs.mu.Lock()
	h := cs.feeds[id]
	cs.mu.Unlock()
	if h != nil {
		return h, nil
	}
	h = &Hosted{srv: cs.s, id: id, subs: map[*Client]*subscription{}, gone: make(chan struct{})}
	fd := &feed{seq: after}
	ctx, cancel := context.WithTimeout(cs.ctx, clusterOpenTimeout)
	defer cancel()
	outputs := lastOutputs{}
	fd.fanning.Store(after)
	f, err := cs.node.Follow(ctx, id, after, func(e cluster.Event) {
		fd.fanning.Store(e.Seq)
		if ev, ok := cs.decode(id, e); ok {
			outputs.fill(&ev)
			h.fanOutFed(ev, !e.More)
		}
		fd.advance(e.Seq)
	})
	if err != nil {
		return nil, err
	}
	fd.follow = f
	h.feed = fd
	cs.mu.Lock()
	if other := cs.feeds[id]; other != nil {
		cs.mu.Unlock()
		f.Stop() // another subscriber started one meanwhile
		return other, nil
	}
	if cs.ctx.Err() != nil {
		cs.mu.Unlock()
		f.Stop()
		return nil, errors.New("the server is shutting down")
	}
	cs.feeds[id] = h
	cs.mu.Unlock()
	return h, nil
}

// feedHosted is the feed of session id, if this node follows it.
func (cs *clusterState) feedHosted(id string) *Hosted {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.feeds[id]
}

// unwatched stops the feed of h once no client of this node watches it.
func (cs *clusterState) unwatched(h *Hosted) {
	if h.feed == nil || h.Subscribers() > 0 {
		return
	}
	cs.mu.Lock()
	if cs.feeds[h.id] != h || h.Subscribers() > 0 {
		cs.mu.Unlock()
		return
	}
	delete(cs.feeds, h.id)
	cs.mu.Unlock()
	h.feed.follow.Stop()
}

// feedBroke closes the clients of a follow that stopped by itself (the
// stream could not be read): they reconnect and resume from their last
// seq, which starts a new one.
func (cs *clusterState) feedBroke(h *Hosted) {
	cs.s.log.Warn("cluster: following a session stopped", "session", h.id, "err", h.feed.follow.Err())
	for _, c := range h.dropSubscribers() {
		c.Close(Close{Kind: CloseOverloaded, Reason: "Lost the session's event stream; reconnect and resume from the last seq you saw"})
	}
}

// watch ends the commands in flight on nodes that left, and takes over
// sessions followed here whose owner is gone (a subscriber should not
// wait for a command to bring its session back).
func (cs *clusterState) watch() {
	defer cs.wg.Done()
	t := time.NewTicker(cs.node.LeaseTTL() / 3)
	defer t.Stop()
	for {
		select {
		case <-cs.ctx.Done():
			return
		case <-t.C:
		}
		cs.checkNodes()
	}
}
