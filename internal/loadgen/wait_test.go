package loadgen

import (
	"context"
	"errors"
	"testing"
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
