package server

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/agentd-dev/agentd/internal/cluster"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/session"
)

// hosted is what the cluster keeps of a session this node owns.
type hosted struct {
	lease *cluster.Lease
	kick  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	// file is set when the session moved to another transcript file; the
	// publisher records it in the cluster's index.
	file atomic.Bool
	// published is the seq of the last event the publisher is done with.
	published atomic.Uint64
}

// host starts serving a session opened here under lease: its record in
// the cluster's index and the publisher of its events (commands reach
// it through the node's subject, serveNode). A session that was not just created (adopt) first takes over
// the outcomes of its commands from the cluster's journal: a command
// replayed by id returns its stored outcome, one that was running on the
// previous owner answers interrupted.
func (cs *clusterState) host(ctx context.Context, h *Hosted, l *cluster.Lease, first uint64, adopt bool) error {
	if ctx == nil || ctx.Err() != nil {
		ctx = cs.ctx
	}
	ctx, cancel := context.WithTimeout(ctx, clusterOpenTimeout)
	defer cancel()
	if adopt && cs.s.pipe != nil {
		recs, err := cs.node.JournalFor(ctx, h.id)
		if err != nil {
			return fault.Wrap(fault.Unavailable, err, "Session "+h.id+": the outcomes of its commands could not be read: "+err.Error())
		}
		cs.s.pipe.Adopt(recs)
	}
	// A run the previous owner began and never ended (it died mid-run)
	// ends here for the clients that watched it, on every node: before
	// the publisher starts, so its first flush carries the end.
	if adopt {
		if last, ok, err := cs.node.LastEvent(ctx, h.id); err != nil {
			cs.s.log.Warn("cluster: reading a session's last event", "session", h.id, "err", err)
		} else if ok && last.Epoch < l.Epoch() {
			if ev, ok := cs.decode(h.id, last); ok && session.RunInProgress(ev) && h.sess.EndInterrupted() {
				cs.s.log.Info("cluster: ended the run the session's previous owner left", "session", h.id, "node", last.Node, "seq", last.Seq)
			}
		}
	}
	if err := cs.record(ctx, h, l, false); err != nil {
		return err
	}
	hc := &hosted{lease: l, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	h.cl = hc
	// Events the session emitted while it opened (a run the previous
	// owner left ends as interrupted) go out now, not with the next one.
	hc.kick <- struct{}{}
	cs.wg.Add(1)
	go cs.publish(h, hc, first)
	return nil
}

// record writes the session's entry in the cluster's index, fenced by
// its lease: a stale owner cannot overwrite what a later one wrote.
func (cs *clusterState) record(ctx context.Context, h *Hosted, l *cluster.Lease, deleted bool) error {
	prev, _ := cs.s.index.get(h.id)
	created := prev.Created
	if created.IsZero() {
		created = h.created
	}
	_, err := l.UpdateSession(ctx, func(r *cluster.SessionRecord) error {
		if r.Deleted && !deleted {
			*r = cluster.SessionRecord{Revision: r.Revision} // the id was freed: a new session
		}
		if r.Created.IsZero() {
			r.Created = created
		}
		r.ID, r.File, r.Cwd, r.Deleted = h.id, h.sess.File(), h.cwd, deleted
		if r.Owner == "" {
			r.Owner = h.owner
		}
		if prev.Sandbox != "" {
			r.Sandbox = prev.Sandbox
		}
		r.LastSeq = max(r.LastSeq, h.sess.Seq())
		return nil
	})
	if err != nil {
		return fault.Wrap(fault.Unavailable, err, "Session "+h.id+" could not be recorded in the cluster: "+err.Error())
	}
	return nil
}

// publish copies the session's logged events to the stream in seq order,
// each once, until the session is unloaded or the lease ends. When the
// lease is lost the session stops here: another node owns it now. It
// sends each new event live at once and leaves the stream to a durable
// (cluster_live.go), whose appends it never waits for.
func (cs *clusterState) publish(h *Hosted, hc *hosted, last uint64) {
	defer cs.wg.Done()
	defer close(hc.done)
	d := cs.newDurable(h, hc, last)
	go d.run()
	first := last
	shown := toolOutputs{} // running calls' output, as it goes out
	read := func() {
		evs, ok := h.sess.EventsSince(last)
		if !ok {
			cs.s.log.Warn("cluster: events left the log before they were published", "session", h.id, "after", last)
			last = h.sess.Seq()
			d.push(nil, last)
			return
		}
		if len(evs) == 0 {
			d.push(nil, last) // wakes the durable: the file may have changed
			return
		}
		// All that waits goes out together, several events to a message
		// (cluster.PublishEvents): one at a time, each waiting for its
		// acknowledgement, a session emitting faster than a round trip per
		// event queued behind its publisher, and watchers on other nodes
		// trailed by p99 half a second.
		// Clients of other nodes see a running call's output (the log
		// keeps none) as it comes, at most once a second a call.
		shown.attach(evs, h.sess.ToolProgress(), time.Now())
		out := cs.encodeEvents(h, evs)
		last = evs[len(evs)-1].Seq
		cs.showLive(h, d, first, out)
		d.push(out, last)
	}
	for {
		select {
		case <-hc.kick:
			read()
		case <-hc.lease.Done():
			close(d.quit)
			cs.lost(h)
			<-hc.stop
			<-d.done
			return
		case <-hc.stop:
			if hc.lease.Err() == nil {
				read()
			}
			close(d.finish)
			<-d.done
			return
		}
	}
}

// lost unloads a session whose lease ended while hosted: a stale owner
// must neither run it nor write for it.
func (cs *clusterState) lost(h *Hosted) {
	err := h.cl.lease.Err()
	if errors.Is(err, cluster.ErrReleased) {
		return // given back by unhost, which is unloading it
	}
	cs.s.log.Warn("cluster: lost a session's lease; it stops here", "session", h.id, "err", err)
	cs.left(h, errors.Is(err, cluster.ErrNodeClosed)) // cluster_leave.go
}

// fileChanged notes that the session continues in another file; it runs
// on the emitting goroutine and never blocks.
func (hc *hosted) fileChanged() {
	hc.file.Store(true)
	hc.onEvent()
}

// onEvent wakes the session's publisher; it runs on the emitting goroutine
// and never blocks.
func (hc *hosted) onEvent() {
	select {
	case hc.kick <- struct{}{}:
	default:
	}
}

// unhost stops publishing a session that is being unloaded (after the
// last events are out) and gives its lease back, so the next command for
// it, from any node, finds it free at once. A node that crashed (its
// cluster node closed) gives nothing back: its leases expire.
func (cs *clusterState) unhost(h *Hosted, deleted bool) {
	hc := h.cl
	if hc == nil {
		return
	}
	close(hc.stop)
	<-hc.done
	if hc.lease.Err() == nil {
		ctx, cancel := context.WithTimeout(context.Background(), clusterReadTimeout)
		defer cancel()
		if deleted {
			if err := cs.record(ctx, h, hc.lease, true); err != nil {
				cs.s.log.Warn("cluster: recording a deleted session", "session", h.id, "err", err)
			}
		} else if seq := h.sess.Seq(); hc.published.Load() == seq {
			// Every event is in the stream: the next owner numbers right
			// after the last one instead of after this owner's
			// reservation (seqs stay contiguous across a handover).
			if _, err := hc.lease.UpdateSession(ctx, func(r *cluster.SessionRecord) error {
				r.LastSeq = seq
				return nil
			}); err != nil {
				cs.s.log.Warn("cluster: recording a session's last seq", "session", h.id, "err", err)
			}
		}
		if err := hc.lease.Release(ctx); err != nil {
			cs.s.log.Warn("cluster: releasing a session", "session", h.id, "err", err)
		}
	}
}
