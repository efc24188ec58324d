package loadgen

import (
	"context"
	"errors"
	"time"
)

// errReaderEnded is waitAnswer's error when the reader ended unanswered.
var errReaderEnded = errors.New("the reader ended before the answer")

// waitAnswer waits for a reader's answer: nil when answered is closed,
// errReaderEnded when ended is closed first, ctx's error when it ends
// first. A reader that gets its answer and then ends can close both
// before the select looks, and select picks at random among ready
// cases: answered is looked at again, so that such an answer counts.
func waitAnswer(ctx context.Context, answered, ended <-chan struct{}) error {
	select {
	case <-answered:
		return nil
	case <-ended:
		select {
		case <-answered:
			return nil
		default:
			return errReaderEnded
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pollUntil checks done every 10 ms until it holds, ctx ends or wait has
// passed, whichever comes first: what the bench waits for (a watcher's
// last events) comes from other processes, which say nothing when it is
// there.
func pollUntil(ctx context.Context, wait time.Duration, done func() bool) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	giveUp := time.After(wait)
	for !done() {
		select {
		case <-ctx.Done():
			return
		case <-giveUp:
			return
		case <-t.C:
		}
	}
}
