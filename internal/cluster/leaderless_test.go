package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"

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
