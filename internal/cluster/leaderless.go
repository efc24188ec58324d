package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// leaderWait bounds how long a write waits for a stream that has no
// leader. When a server of a NATS cluster dies (kill -9 of a node of
// --cluster-routes), what it led has no leader until the others elect
// one, up to about 10 s in NATS' Raft: a write then is answered at once
// that nobody serves the stream, and was not stored.
const leaderWait = 15 * time.Second

// leaderless reports whether a write failed because no server serves the
// stream now: nothing was stored, so it is safe to send again.
func leaderless(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// whileLeaderless runs write, and again while it fails for want of a
// stream leader, for up to leaderWait or until ctx ends: a session made
// or updated during an election waits for it instead of failing.
func whileLeaderless[T any](ctx context.Context, write func() (T, error)) (T, error) {
	deadline := time.Now().Add(leaderWait)
	for attempt := 0; ; attempt++ {
		v, err := write()
		if err == nil || !leaderless(err) || time.Now().After(deadline) {
			return v, err
		}
		t := time.NewTimer(min(time.Second, 50*time.Millisecond<<min(attempt, 5)))
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
	}
}

// firstAttempt bounds the first try of a read that a stream leader must
// answer (readWhileLeaderless); each later try may take twice as long.
const firstAttempt = time.Second

// readWhileLeaderless runs read with a deadline of its own, and again
// with a longer one while a try went unanswered or found no leader, until
// ctx ends. A request that only a JetStream leader answers (creating the
// consumer behind a key listing) and that is sent during an election is
// dropped, not refused: without its own deadline the read would wait
// out the caller's whole time although a leader exists a moment later.
func readWhileLeaderless[T any](ctx context.Context, read func(context.Context) (T, error)) (T, error) {
	for d := firstAttempt; ; d *= 2 {
		actx, cancel := context.WithTimeout(ctx, d)
		v, err := read(actx)
		expired := actx.Err() != nil
		cancel()
		if err == nil || ctx.Err() != nil || !(leaderless(err) || expired && errors.Is(err, context.DeadlineExceeded)) {
			return v, err
		}
	}
}
