package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Reconnection to NATS, and what a node does when it is back.

// Bounds of the pause between two tries to reach NATS again.
const (
	reconnectMin = 100 * time.Millisecond
	reconnectMax = 2 * time.Second
)

// reconnectDelay is the pause before try attempts+1 to reach NATS again
// (nats.CustomReconnectDelay): doubling from reconnectMin to
// reconnectMax, plus up to half as much again at random.
func reconnectDelay(attempts int) time.Duration {
	d := reconnectMax
	if attempts < 6 {
		d = min(reconnectMax, reconnectMin<<max(attempts-1, 0))
	}
	return d + rand.N(d/2+1)
}

// signal is an event that fires many times: wait returns a channel that
// is closed at the next fire, so any number of goroutines can select on
// it without registering.
type signal struct {
	mu sync.Mutex // a leaf: guards ch
	ch chan struct{}
}

func newSignal() *signal { return &signal{ch: make(chan struct{})} }

// wait is closed when the signal next fires.
func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

func (s *signal) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.ch)
	s.ch = make(chan struct{})
}

// publishWait bounds one try of a write to a stream: a request sent just
// before NATS went away is never answered, and the write is tried again
// (under the same message id, so it is stored once) rather than waiting
// for all of its caller's time.
const publishWait = 3 * time.Second

// publishAttempt is one try of a fenced or deduplicated publish.
func publishAttempt(ctx context.Context, js jetstream.JetStream, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	actx, cancel := context.WithTimeout(ctx, publishWait)
	defer cancel()
	ack, err := js.PublishMsg(actx, m, opts...)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within %v: %w", publishWait, err)
	}
	return ack, err
}

// pauseRetry waits before try attempt+1 of a write that failed for want
// of NATS: a little longer each time, and no longer than ctx, the lease,
// or NATS coming back. It fails when the lease ended or ran out of time.
func (l *Lease) pauseRetry(ctx context.Context, attempt int) error {
	l.mu.Lock()
	deadline := l.deadline
	l.mu.Unlock()
	if time.Now().After(deadline) {
		return l.lose("it was not renewed in time", "", 0)
	}
	d := min(reconnectMax, 50*time.Millisecond<<min(attempt, 6))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-l.ctx.Done():
		return l.Err()
	case <-l.node.reconn.wait():
	case <-t.C:
	}
	return nil
}
