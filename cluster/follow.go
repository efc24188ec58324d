package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// Follow is a live reading of one session's events from the stream: what
// a node that does not own the session feeds its subscribers from. It
// delivers every event with a seq above the cursor it started from, those
// already in the stream first and then each one as it is published, in seq
// order and never a seq twice, whichever node publishes them (the owner,
// or the node that took the session over). Stop ends it.
type Follow struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	err error
}

// Follow starts following session sessionID after afterSeq. deliver is
// called on the follow's own goroutine, one event at a time; it must not
// call Stop. ctx bounds the setup; the follow runs until Stop, until the
// node closes, or until the stream cannot be read (Err says why).
func (n *Node) Follow(ctx context.Context, sessionID string, afterSeq uint64, deliver func(Event)) (*Follow, error) {
	if err := CheckSessionID(sessionID); err != nil {
		return nil, err
	}
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
	fctx, cancel := context.WithCancel(context.Background())
	f := &Follow{cancel: cancel, done: make(chan struct{})}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-fctx.Done()
		it.Stop()
	}()
	go f.run(it, stopped, sessionID, afterSeq, deliver, n)
	return f, nil
}

// run reads the iterator until it stops; stopped is closed by the
// goroutine that stops the iterator, which run waits for before it says
// it is done, so a stopped follow leaves no goroutine behind.
func (f *Follow) run(it jetstream.MessagesContext, stopped <-chan struct{}, sessionID string, maxSeq uint64, deliver func(Event), n *Node) {
	defer close(f.done)
	defer func() { <-stopped }()
	defer f.cancel()
	for {
		m, err := it.Next()
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				f.fail(fmt.Errorf("cluster: following session %s after seq %d: %w", sessionID, maxSeq, err))
			}
			return
		}
		md, err := m.Metadata()
		if err != nil {
			f.fail(fmt.Errorf("cluster: following session %s: %w", sessionID, err))
			return
		}
		ev, err := parseEvent(m.Subject(), m.Headers(), md.Sequence.Stream, m.Data())
		if err != nil {
			n.log.Warn("cluster: skipping an unreadable event", "session", sessionID, "err", err)
			continue
		}
		if ev.Seq <= maxSeq {
			continue
		}
		maxSeq = ev.Seq
		deliver(ev)
	}
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
	f.cancel()
	<-f.done
}
