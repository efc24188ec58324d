package session_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/session"
)

// The engine's refusals reach faces as client-visible errors with a code
// a face can map (an HTTP status, say), not as bare strings.
func TestEngineErrorsHaveCodes(t *testing.T) {
	h := newHarness(t, func(c *session.Config) { c.MaxQueued = 1; c.MaxQueuedBytes = 1000 })
	tests := []struct {
		name string
		err  error
		code fault.Code
	}{
		{"busy", session.ErrBusy, fault.Busy},
		{"bash running", session.ErrBashRunning, fault.Busy},
		{"closed", session.ErrClosed, fault.NotFound},
		{"fork of a non-user entry", func() error { _, err := h.s.Fork("no-such-entry"); return err }(), fault.Invalid},
		{"queued message too large", h.s.Steer(session.UserMessage(strings.Repeat("x", 2000), nil)), fault.TooLarge},
	}
	if err := h.s.Steer(session.UserMessage("one", nil)); err != nil {
		t.Fatal(err)
	}
	tests = append(tests, struct {
		name string
		err  error
		code fault.Code
	}{"queue full", h.s.FollowUp(session.UserMessage("two", nil)), fault.Limit})
	for _, tt := range tests {
		if got := fault.CodeOf(tt.err); got != tt.code {
			t.Errorf("%s: code %q (%v), want %q", tt.name, got, tt.err, tt.code)
		}
		if fe := fault.As(tt.err); fe == nil || fe.Message == "" || fe.Message == "Internal error" {
			t.Errorf("%s: no client message in %v", tt.name, tt.err)
		}
	}
	var le *agent.LimitError
	if err := h.s.FollowUp(session.UserMessage("three", nil)); !errors.As(err, &le) || !errors.Is(err, agent.ErrQueueFull) {
		t.Errorf("the limit error keeps its type and sentinel: %v", err)
	}
}
