package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A write is sent again only while it fails for want of a stream leader
// (nothing was stored); any other failure, and success, end it at once.
func TestWhileLeaderless(t *testing.T) {
	other := errors.New("disk full")
	tests := []struct {
		name  string
		errs  []error // what the write returns, try by try
		tries int
		want  error
	}{
		{"success", []error{nil}, 1, nil},
		{"no stream response, then success", []error{jetstream.ErrNoStreamResponse, jetstream.ErrNoStreamResponse, nil}, 3, nil},
		{"no responders, wrapped", []error{fmt.Errorf("put: %w", nats.ErrNoResponders), nil}, 2, nil},
		{"another error", []error{other}, 1, other},
		{"a revision mismatch", []error{jetstream.ErrKeyExists}, 1, jetstream.ErrKeyExists},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tries := 0
			v, err := whileLeaderless(context.Background(), func() (int, error) {
				err := tc.errs[tries]
				tries++
				return tries, err
			})
			if !errors.Is(err, tc.want) || tries != tc.tries || v != tries {
				t.Fatalf("err %v after %d tries (value %d), want %v after %d", err, tries, v, tc.want, tc.tries)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tries := 0
	if _, err := whileLeaderless(ctx, func() (int, error) { tries++; return 0, jetstream.ErrNoStreamResponse }); !leaderless(err) || tries != 1 {
		t.Fatalf("with ctx done: %v after %d tries, want the leaderless error after 1", err, tries)
	}
}

// TestReadWhileLeaderless: a read that goes unanswered (a request sent
// during a leader election is dropped) is sent again with a longer
// deadline of its own, within the caller's time; other errors and the
// caller's end stop it.
func TestReadWhileLeaderless(t *testing.T) {
	other := errors.New("bucket gone")
	tests := []struct {
		name    string
		dropped int   // tries that go unanswered until their deadline
		last    error // what the try after them returns
		callFor time.Duration
		tries   int
		want    error
		gave    []time.Duration // each try's own deadline, when checked
	}{
		{"answered at once", 0, nil, time.Minute, 1, nil, []time.Duration{time.Second}},
		{"two dropped, then answered", 2, nil, time.Minute, 3, nil, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}},
		{"another error", 0, other, time.Minute, 1, other, nil},
		{"the caller's time ends", 10, nil, 2500 * time.Millisecond, 2, context.DeadlineExceeded, []time.Duration{time.Second, 1500 * time.Millisecond}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), tc.callFor)
				defer cancel()
				tries := 0
				var gave []time.Duration
				_, err := readWhileLeaderless(ctx, func(actx context.Context) (int, error) {
					tries++
					dl, _ := actx.Deadline()
					gave = append(gave, time.Until(dl))
					if tries <= tc.dropped {
						<-actx.Done()
						return 0, actx.Err()
					}
					return tries, tc.last
				})
				if !errors.Is(err, tc.want) || tries != tc.tries {
					t.Fatalf("err %v after %d tries, want %v after %d", err, tries, tc.want, tc.tries)
				}
				if tc.gave != nil && !slices.Equal(gave, tc.gave) {
					t.Fatalf("the tries' own deadlines %v, want %v", gave, tc.gave)
				}
			})
		})
	}
	// A try that finds no leader is sent again at once.
	tries := 0
	_, err := readWhileLeaderless(context.Background(), func(context.Context) (int, error) {
		tries++
		if tries == 1 {
			return 0, jetstream.ErrNoStreamResponse
		}
		return 1, nil
	})
	if err != nil || tries != 2 {
		t.Fatalf("after no leader: %v after %d tries", err, tries)
	}
}
