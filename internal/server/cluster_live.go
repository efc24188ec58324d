package server

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd-dev/agentd/internal/cluster"
	"github.com/agentd-dev/agentd/internal/session"
)

// A hosted session's publisher is two goroutines. The first (publish)
// reads the session's new events from its log, encodes them once, sends
// them live to the followers on other nodes (cluster.PublishLive) without
// waiting for anything, and queues them for the second (durable), which
// appends them to the stream, one message in flight at a time under the
// stream's fence, retrying after a failure. A watcher on another node no
// longer waits behind the durable publish in flight and its replicated
// round trip: that cost the cross-node watchers of a loaded machine three
// times the lag of the owner's own.

// durable appends a hosted session's encoded events to the stream, in
// seq order, each once.
type durable struct {
	cs    *clusterState
	h     *Hosted
	hc    *hosted
	limit int // the most events queued: the event log's size

	mu      sync.Mutex      // a leaf: guards queue and through
	queue   []cluster.Event // encoded, not yet in the stream, ascending seqs
	through uint64          // the seq of the last event read from the log

	// stored is the seq of the last event this owner knows the stream
	// holds: the stream's last when the durable started (base, once
	// known) or the last it appended since (0 while neither is known).
	// Live events go no further than the log's size past it (showLive).
	stored atomic.Uint64
	known  atomic.Bool

	wake   chan struct{} // capacity 1: something was queued
	finish chan struct{} // closed when the session stops: append what is queued, then return
	quit   chan struct{} // closed when the lease is lost: return at once
	done   chan struct{}
}

func (cs *clusterState) newDurable(h *Hosted, hc *hosted, last uint64) *durable {
	n := cs.s.cfg.EventLogSize
	if n <= 0 {
		n = session.DefaultEventLogSize
	}
	return &durable{cs: cs, h: h, hc: hc, limit: n, through: last,
		wake: make(chan struct{}, 1), finish: make(chan struct{}), quit: make(chan struct{}), done: make(chan struct{})}
}

// push queues evs (read from the log through seq through) for the
// stream. Like the log, the queue keeps the newest limit events: when
// NATS is away for long, the oldest go, with the warning the publisher
// gives for events that left the log.
func (d *durable) push(evs []cluster.Event, through uint64) {
	d.mu.Lock()
	d.queue = append(d.queue, evs...)
	d.through = max(d.through, through)
	var dropped []cluster.Event
	if over := len(d.queue) - d.limit; over > 0 {
		dropped = d.queue[:over]
		d.queue = d.queue[over:]
	}
	d.mu.Unlock()
	if len(dropped) > 0 {
		d.cs.s.log.Warn("cluster: events left the log before they were published", "session", d.h.id,
			"after", dropped[0].Seq-1, "through", dropped[len(dropped)-1].Seq)
	}
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// run appends what is queued until the session stops or its lease ends.
func (d *durable) run() {
	defer close(d.done)
	d.readBase()
	var (
		retry <-chan time.Time // an append failed: try again then
		pause time.Duration
	)
	for {
		select {
		case <-d.quit:
			return
		case <-d.finish:
			// The session stops (unhost): what was queued before it
			// goes out, so that a clean handover leaves everything in
			// the stream.
			if d.hc.lease.Err() == nil {
				d.recordFile()
				d.flush()
			}
			return
		case <-d.wake:
		case <-retry:
			retry = nil
		}
		if d.hc.lease.Err() != nil {
			// Lost: publish sees the lease end and unloads the session.
			select {
			case <-d.quit:
			case <-d.finish:
			}
			return
		}
		d.recordFile()
		if d.flush() {
			pause, retry = 0, nil
			continue
		}
		// Retried soon, and on the next event: the queue keeps what is
		// not out yet, in order. Waiting for an event alone left a run
		// that ended while NATS was away unpublished, its last events
		// never reaching another node's clients.
		pause = min(max(2*pause, 100*time.Millisecond), 2*time.Second)
		retry = time.After(pause)
	}
}

// readBase reads the stream's last seq for the session, which bounds what
// showLive sends before the first append. Without it (the stream cannot
// be read now) nothing goes live until an append succeeds.
func (d *durable) readBase() {
	ctx, cancel := context.WithTimeout(d.cs.ctx, clusterReadTimeout)
	defer cancel()
	base, err := d.cs.node.LastSeq(ctx, d.h.id)
	if err != nil {
		d.cs.s.log.Debug("cluster: reading a session's last seq in the stream; no events go live until one is stored", "session", d.h.id, "err", err)
		return
	}
	d.storedAt(base)
}

// storedAt records that the stream holds the session's events through
// seq.
func (d *durable) storedAt(seq uint64) {
	for {
		cur := d.stored.Load()
		if seq <= cur || d.stored.CompareAndSwap(cur, seq) {
			break
		}
	}
	d.known.Store(true)
}

// recordFile records in the cluster's index that the session moved to
// another transcript file, if it did.
func (d *durable) recordFile() {
	if !d.hc.file.Swap(false) {
		return
	}
	ctx, cancel := context.WithTimeout(d.cs.ctx, clusterReadTimeout)
	defer cancel()
	if err := d.cs.record(ctx, d.h, d.hc.lease, false); err != nil {
		d.cs.s.log.Warn("cluster: recording a session's new file", "session", d.h.id, "err", err)
	}
}

// flush appends everything queued (cluster.PublishEvents: several events
// to a message) and reports whether it all went; hc.published then says
// the stream has everything read so far.
func (d *durable) flush() bool {
	if hold := d.cs.durableHold.Load(); hold != nil {
		select {
		case <-*hold:
		case <-d.cs.ctx.Done():
		}
	}
	d.mu.Lock()
	evs, through := d.queue, d.through
	d.mu.Unlock()
	if len(evs) > 0 {
		ctx, cancel := context.WithTimeout(d.cs.ctx, clusterPublishTimeout)
		got, err := d.cs.node.PublishEvents(ctx, d.h.id, evs)
		cancel()
		if got > 0 {
			d.storedAt(got)
			d.mu.Lock()
			i := 0
			for i < len(d.queue) && d.queue[i].Seq <= got {
				i++
			}
			d.queue = d.queue[i:]
			d.mu.Unlock()
		}
		if err != nil {
			d.cs.s.log.Warn("cluster: publishing events", "session", d.h.id, "after", got, "through", evs[len(evs)-1].Seq, "err", err)
			return false
		}
	}
	d.hc.published.Store(through)
	return true
}

// encodeEvents encodes the session's events for the cluster once, for the
// live subject and the stream: each as JSON, those too large for a
// stream message left out (with a warning).
func (cs *clusterState) encodeEvents(h *Hosted, evs []session.Event) []cluster.Event {
	out := make([]cluster.Event, 0, len(evs))
	limit := cs.node.MaxEventBytes()
	for _, ev := range evs {
		b, err := json.Marshal(ev)
		if err != nil {
			cs.s.log.Error("cluster: encoding an event", "session", h.id, "seq", ev.Seq, "err", err)
			continue
		}
		if len(b) > limit {
			// No message carries it (a client's 2 MB message, a large
			// image in a tool result): retried, it held back every
			// later event of the session for good. Clients of other
			// nodes miss it, and read it with the conversation.
			cs.s.log.Warn("cluster: an event larger than a stream message is not published; clients of other nodes miss it",
				"session", h.id, "seq", ev.Seq, "type", ev.Type, "bytes", len(b), "limit", limit)
			continue
		}
		out = append(out, cluster.Event{Seq: ev.Seq, Data: b})
	}
	return out
}

// showLive sends evs live to the followers on other nodes, those of them
// no further than the event log's size past the last event the stream is
// known to hold (none past first, where this owner's seqs began, while
// that is not known). A node that takes the session over after a crash
// numbers from at most the stream's last seq plus that much (nextSeq),
// so a seq a follower took live is never used again by another owner.
func (cs *clusterState) showLive(h *Hosted, d *durable, first uint64, evs []cluster.Event) {
	limit := first
	if d.known.Load() {
		limit = max(limit, d.stored.Load()+uint64(d.limit))
	}
	k := 0
	for k < len(evs) && evs[k].Seq <= limit {
		k++
	}
	if k == 0 {
		return
	}
	if err := cs.node.PublishLive(h.id, evs[:k]); err != nil {
		cs.s.log.Debug("cluster: events not sent live; they follow from the stream", "session", h.id, "err", err)
	}
}
