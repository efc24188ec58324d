package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// The live path. A session's events reach the stream one message at a
// time (the per-subject fence of batch.go needs the position the last
// one got), behind a replicated round trip each: on a loaded machine a
// watcher on another node waited for the publish in flight, then for its
// own round trip, then for the stream's delivery, and trailed a watcher
// of the owner by three times as much. So the owner also sends each flush
// at once, as core NATS messages on the session's live subject
// (PublishLive), and Follow delivers from there what continues exactly
// where it is; the stream stays the durable truth and fills in whatever
// the live path missed (a message dropped, a gap, a follow that starts
// behind), in seq order, never a seq twice.
//
// What a follower saw live and the stream never got (the owner died
// before its durable publish) is like what the owner's own clients saw
// before it died: the next owner numbers after the previous one's
// reservation, capped at the stream's last seq plus the event log's size
// (server's nextSeq). The owner keeps its live seqs under both (the
// server shows live no further than the log's size past what it stored),
// so no seq a follower took live is used again by another owner. A live
// message from an owner whose lease is not valid on its own clock is
// never sent, and one older than the newest epoch a follow has seen is
// dropped.

// livePrefix is the prefix of a session's live subject. It is not one of
// the stream's subjects: nothing stores it.
const livePrefix = "agentd.live."

// liveKind is the signature kind of a live message: its seq, epoch and
// batch headers are part of what is signed, so a NATS client that is not
// a node cannot pass a real message off under another seq or epoch.
func liveKind(h nats.Header) string {
	return sigLive + "|" + h.Get(hdrSeq) + "|" + h.Get(hdrEpoch) + "|" + h.Get(hdrBatch)
}

// errNotLive says that PublishLive sent nothing: the lease is not valid
// here, or the connection to NATS is not up.
var errNotLive = errors.New("cluster: not publishing live")

// PublishLive sends a session's events (ascending seqs) on its live
// subject at once, signed, without waiting for anything: at most once,
// for followers that are there now (Follow). It sends nothing (an error
// wrapping errNotLive) unless this node holds the session's lease and its
// deadline has not passed on this node's clock, and the connection to
// NATS is up: nats.go would buffer a message through a reconnect, and
// deliver it after the lease may have ended.
func (n *Node) PublishLive(sessionID string, evs []Event) error {
	if len(evs) == 0 {
		return nil
	}
	l := n.Lease(sessionID)
	if l == nil || !l.liveValid() {
		return fmt.Errorf("%w: session %s has no valid lease on node %s", errNotLive, sessionID, n.cfg.NodeID)
	}
	if s := n.nc.Status(); s != nats.CONNECTED {
		return fmt.Errorf("%w: the connection to NATS is %s", errNotLive, s)
	}
	limit := n.batchBytes()
	for len(evs) > 0 {
		k := batchLen(evs, limit)
		m, _ := eventsMsg(livePrefix+sessionID, sessionID, evs[:k], l.epoch, n.cfg.NodeID)
		n.sig.sign(liveKind(m.Header), m)
		if err := n.nc.PublishMsg(m); err != nil {
			return fmt.Errorf("cluster: publishing session %s live: %w", sessionID, err)
		}
		evs = evs[k:]
	}
	return nil
}

// liveValid reports whether the lease is live and within its deadline on
// this node's clock (a lease past it may be another node's by now).
func (l *Lease) liveValid() bool {
	if l.Err() != nil {
		return false
	}
	l.mu.Lock()
	deadline := l.deadline
	l.mu.Unlock()
	return time.Now().Before(deadline)
}

// subscribeLive subscribes f to the session's live subject. A core NATS
// subscription outlives a break of the connection (nats.go subscribes
// again on the server it reconnects to), so one serves the follow for
// its whole life.
func (f *Follow) subscribeLive(ctx context.Context, n *Node, sessionID string) error {
	seen := newNonces()
	sub, err := n.nc.Subscribe(livePrefix+sessionID, func(m *nats.Msg) {
		if err := n.sig.verify(liveKind(m.Header), m, seen); err != nil {
			n.refused.Add(1)
			n.log.Warn("cluster: dropped a live event message", "session", sessionID, "from", m.Header.Get(hdrNode), "err", err)
			return
		}
		evs, err := parseEvents(m.Subject, m.Header, 0, m.Data)
		if err != nil {
			n.log.Warn("cluster: skipping an unreadable live event message", "session", sessionID, "err", err)
			return
		}
		f.deliverLive(evs)
	})
	if err != nil {
		return fmt.Errorf("cluster: following session %s live: %w", sessionID, err)
	}
	// In place at the server before the follow reads the stream, when
	// the connection is up (a test publishes right after); when it is
	// not, the stream serves until it is, and the follow does not wait.
	if n.nc.Status() == nats.CONNECTED {
		fctx, cancel := context.WithTimeout(ctx, fetchWait)
		_ = n.nc.FlushWithContext(fctx)
		cancel()
	}
	f.live = sub
	return nil
}

// deliverLive delivers a live message's events if they continue the
// follow exactly: the first at most one past the last seq delivered (those
// at or below it were delivered already), from an owner not older than the
// newest one the follow has seen. Anything else is left to the stream,
// which delivers it in order.
func (f *Follow) deliverLive(evs []Event) {
	f.dmu.Lock()
	defer f.dmu.Unlock()
	if f.stopped || len(evs) == 0 || evs[0].Seq > f.maxSeq+1 || evs[0].Epoch < f.epoch {
		return
	}
	f.deliverLocked(evs)
}

// deliverLocked delivers the events of evs above the cursor, all but the
// last of them marked More; f.dmu is held.
func (f *Follow) deliverLocked(evs []Event) {
	for i, ev := range evs {
		if ev.Seq <= f.maxSeq {
			continue
		}
		f.maxSeq = ev.Seq
		f.epoch = max(f.epoch, ev.Epoch)
		ev.More = i < len(evs)-1
		f.deliver(ev)
	}
}

// halt stops deliveries from both sources: after it returns, deliver is
// not called again.
func (f *Follow) halt() {
	if f.live != nil {
		_ = f.live.Unsubscribe()
	}
	f.dmu.Lock()
	f.stopped = true
	f.dmu.Unlock()
}
