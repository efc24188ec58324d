package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Follow is a live reading of one session's events from the stream: what
// a node that does not own the session feeds its subscribers from. It
// delivers every event with a seq above the cursor it started from, those
// already in the stream first and then each one as it is published, in seq
// order and never a seq twice, whichever node publishes them (the owner,
// or the node that took the session over). Stop ends it. Events the
// owner sends live (live.go) that continue exactly where the follow is
// are delivered from there, before the stream has them.
type Follow struct {
	cancel  context.CancelFunc
	done    chan struct{}
	deliver func(Event)
	live    *nats.Subscription // the session's live subject (live.go)

	// dmu serialises delivery from the stream and from the live subject:
	// it guards the cursor (the last seq delivered), the newest owner
	// epoch seen, and stopped. It is held while deliver runs.
	dmu     sync.Mutex
	maxSeq  uint64
	epoch   uint64
	stopped bool

	mu  sync.Mutex // a leaf: guards err only
	err error
}

// Follow starts following session sessionID after afterSeq. deliver is
// called on the follow's own goroutine or on its live subscription's,
// one event at a time, never two at once; it must not call Stop. ctx
// bounds the setup; the follow runs until Stop, until the node closes,
// or until the stream cannot be read for followRetryFor (Err says why).
//
// A follow outlives a break of the node's link to NATS: each time the
// connection comes back it starts again from the last seq it delivered
// (the consumer it read may be gone with the server it lived on), and a
// read that fails is tried again the same way. Before, a follow whose
// node was cut off for half a minute stayed silent once the link healed.
func (n *Node) Follow(ctx context.Context, sessionID string, afterSeq uint64, deliver func(Event)) (*Follow, error) {
	if err := CheckSessionID(sessionID); err != nil {
		return nil, err
	}
	back := n.reconn.wait()
	f := &Follow{done: make(chan struct{}), deliver: deliver, maxSeq: afterSeq}
	if err := f.subscribeLive(ctx, n, sessionID); err != nil {
		return nil, err
	}
	it, err := n.followFrom(ctx, sessionID, afterSeq)
	if err != nil {
		f.halt()
		return nil, err
	}
	fctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go f.run(fctx, n, it, back, sessionID)
	return f, nil
}

// followRetryFor is how long a follow keeps trying to read the stream
// again after a failure before it stops with the error.
const followRetryFor = time.Minute

// followFrom opens an iterator over the session's events with a seq above
// afterSeq, from the stream position of the first such event.
func (n *Node) followFrom(ctx context.Context, sessionID string, afterSeq uint64) (jetstream.MessagesContext, error) {
	subject := evPrefix + sessionID
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, InactiveThreshold: consumerIdle}
	last, err := n.events.GetLastMsgForSubject(ctx, subject)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		// Nothing yet: every event of the session from the first one, so
		// one published while the consumer is being made is not missed.
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	case err != nil:
		return nil, fmt.Errorf("cluster: following session %s: %w", sessionID, err)
	default:
		ev, err := rawEvent(last)
		if err != nil {
			return nil, err
		}
		start := last.Sequence + 1
		if ev.Seq > afterSeq {
			if start, err = n.firstAfter(ctx, subject, afterSeq, last.Sequence); err != nil {
				return nil, fmt.Errorf("cluster: following session %s: %w", sessionID, err)
			}
		}
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
	}
	cons, err := n.js.OrderedConsumer(ctx, EventStream, cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster: following session %s: %w", sessionID, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("cluster: following session %s: %w", sessionID, err)
	}
	return it, nil
}

// run reads iterators until the follow is stopped: one at a time, each
// stopped (and waited for) before the next is opened, so a stopped
// follow leaves no goroutine behind.
func (f *Follow) run(ctx context.Context, n *Node, it jetstream.MessagesContext, back <-chan struct{}, sessionID string) {
	defer close(f.done)
	defer f.halt()
	defer f.cancel()
	for {
		err := f.read(ctx, n, it, back, sessionID)
		if ctx.Err() != nil {
			return
		}
		maxSeq := f.cursor()
		if err != nil {
			n.log.Warn("cluster: reading a session's events failed; following again", "session", sessionID, "after", maxSeq, "err", err)
		}
		// Again from the last seq delivered, until it works or the
		// stream stays unreadable for followRetryFor.
		since := time.Now()
		for attempt := 0; ; attempt++ {
			back = n.reconn.wait()
			octx, cancel := context.WithTimeout(ctx, fetchWait)
			maxSeq = f.cursor()
			it, err = n.followFrom(octx, sessionID, maxSeq)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			if n.nc.IsClosed() || time.Since(since) > followRetryFor {
				f.fail(fmt.Errorf("cluster: following session %s after seq %d: %w", sessionID, maxSeq, err))
				return
			}
			t := time.NewTimer(min(reconnectMax, 50*time.Millisecond<<min(attempt, 6)))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-back:
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// read delivers what it yields until it fails, the follow is stopped, or
// NATS comes back after a break (back closes): the iterator is stopped
// then and its error is nil.
func (f *Follow) read(ctx context.Context, n *Node, it jetstream.MessagesContext, back <-chan struct{}, sessionID string) error {
	ended := make(chan struct{})
	stopped := make(chan struct{})
	// Next is also given a context that ends with the iterator: an
	// ordered consumer stopped while it re-creates its consumer (NATS
	// just came back) can leave Next waiting on the new one for ever.
	rctx, rcancel := context.WithCancel(ctx)
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
		case <-back:
		case <-ended:
		}
		it.Stop()
		rcancel()
	}()
	defer func() { <-stopped }()
	defer close(ended)
	for {
		m, err := it.Next(jetstream.NextContext(rctx))
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) || rctx.Err() != nil {
				return nil
			}
			return err
		}
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		evs, err := parseEvents(m.Subject(), m.Headers(), md.Sequence.Stream, m.Data())
		if err != nil {
			n.log.Warn("cluster: skipping an unreadable event", "session", sessionID, "err", err)
			continue
		}
		// A batch's events one at a time; those at or below the cursor
		// (a follow resumed inside a batch, or events the live subject
		// delivered first) were delivered already. All but the last are
		// marked More.
		if !f.deliverStream(evs) {
			return nil
		}
	}
}

// deliverStream delivers the events of one stream message above the
// cursor; false once the follow is stopped.
func (f *Follow) deliverStream(evs []Event) bool {
	f.dmu.Lock()
	defer f.dmu.Unlock()
	if f.stopped {
		return false
	}
	for _, ev := range evs {
		f.epoch = max(f.epoch, ev.Epoch)
	}
	f.deliverLocked(evs)
	return true
}

// cursor is the seq of the last event delivered.
func (f *Follow) cursor() uint64 {
	f.dmu.Lock()
	defer f.dmu.Unlock()
	return f.maxSeq
}

func (f *Follow) fail(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

// Done is closed when the follow has stopped.
func (f *Follow) Done() <-chan struct{} { return f.done }

// Err says why a follow stopped by itself; nil after Stop.
func (f *Follow) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Stop ends the follow and waits until deliver is no longer called.
func (f *Follow) Stop() {
	f.halt()
	f.cancel()
	<-f.done
}
