package loadgen

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestWaitAnswer checks what a wait for a reader's answer returns, and
// that an answer counts when the reader has also ended by the time the
// wait looks (select alone would pick either closed channel at random:
// tried many times, it would pick the end in some).
func TestWaitAnswer(t *testing.T) {
	closed := func() chan struct{} {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name            string
		ctx             context.Context
		answered, ended chan struct{}
		want            error
	}{
		{"answered", context.Background(), closed(), make(chan struct{}), nil},
		{"answered, then ended", context.Background(), closed(), closed(), nil},
		{"ended unanswered", context.Background(), make(chan struct{}), closed(), errReaderEnded},
		{"context ended", cancelled, make(chan struct{}), make(chan struct{}), context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 100 {
				if err := waitAnswer(tt.ctx, tt.answered, tt.ended); !errors.Is(err, tt.want) {
					t.Fatalf("waitAnswer = %v, want %v", err, tt.want)
				}
			}
		})
	}
}

// TestPollUntil: the poll returns as soon as its condition holds, when
// its wait has passed, or when ctx ends, in the bubble's fake time.
func TestPollUntil(t *testing.T) {
	tests := []struct {
		name     string
		holdsAt  time.Duration // when the condition starts to hold; 0 at once, -1 never
		cancelAt time.Duration // when ctx ends; 0 never
		want     time.Duration // how long the poll took
	}{
		{"holds at once", 0, 0, 0},
		{"holds later", 35 * time.Millisecond, 0, 40 * time.Millisecond},
		{"never holds", -1, 0, time.Second},
		{"ctx ends", -1, 200 * time.Millisecond, 200 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if tt.cancelAt > 0 {
					time.AfterFunc(tt.cancelAt, cancel)
				}
				start := time.Now()
				pollUntil(ctx, time.Second, func() bool {
					return tt.holdsAt >= 0 && time.Since(start) >= tt.holdsAt
				})
				if got := time.Since(start); got != tt.want {
					t.Errorf("the poll took %v, want %v", got, tt.want)
				}
			})
		})
	}
}
