package session_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/agent"
	"github.com/agentd-dev/agentd/llm/llmtest"
	"github.com/agentd-dev/agentd/session"
)

// busy starts a run whose model does not answer for a minute, so that
// what is queued stays queued.
func busy(h *harness) {
	h.t.Helper()
	h.srv.Enqueue(llmtest.Script{Text: []string{"late"}, FirstDelay: time.Minute})
	h.prompt("start")
	h.waitEvent(is("agent_start"))
}

// The queues refuse what would not fit, with a reason the client can
// show, and the defaults hold without any configuration.
func TestQueueLimitsByDefault(t *testing.T) {
	tests := []struct {
		name   string
		sizes  []int // bytes of text of each queued message
		steer  bool
		refuse int    // index of the first refused message, -1 for none
		want   string // in the refusal
	}{
		{"count", repeat(65, 10), false, 64, "Queue full: at most 64 queued messages"},
		{"count across both queues", repeat(65, 10), true, 64, "Queue full: at most 64 queued messages"},
		{"one too large", []int{16<<20 + 1}, false, 0, "Queued message too large"},
		{"total bytes", repeat(5, 4<<20), false, 4, "Queue full"},
		{"within limits", repeat(64, 1000), false, -1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(c *session.Config) { c.SessionsDir = "" })
			busy(h)
			for i, n := range tt.sizes {
				m := session.UserMessage(strings.Repeat("x", n), nil)
				var err error
				if tt.steer && i%2 == 0 {
					err = h.s.Steer(m)
				} else {
					err = h.s.FollowUp(m)
				}
				switch {
				case i < tt.refuse || tt.refuse < 0:
					if err != nil {
						t.Fatalf("message %d refused: %v", i, err)
					}
				case i == tt.refuse:
					if err == nil || !strings.Contains(err.Error(), tt.want) {
						t.Fatalf("message %d: error %v, want %q", i, err, tt.want)
					}
					if p := h.s.Agent().PendingCount(); p != i {
						t.Fatalf("%d queued after a refusal, want %d", p, i)
					}
					return
				}
			}
		})
	}
}

func repeat(n, size int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = size
	}
	return out
}

// Live listeners get pi's whole queue in every queue_update; the log
// keeps each queued text only as a short preview, so that n queued
// messages cost the log O(n) small strings per update instead of a copy
// of the whole queue.
func TestLoggedQueueUpdateIsSmall(t *testing.T) {
	h := newHarness(t, func(c *session.Config) { c.SessionsDir = "" })
	busy(h)
	const n, size = 32, 100 << 10
	for i := 0; i < n; i++ {
		if err := h.s.FollowUp(session.UserMessage(fmt.Sprintf("%02d", i)+strings.Repeat("y", size), nil)); err != nil {
			t.Fatal(err)
		}
	}
	live := h.waitEvent(func(ev session.Event) bool {
		return ev.Type == "queue_update" && len(ev.Agent.FollowUp) == n
	})
	for _, s := range live.Agent.FollowUp {
		if len(s) != size+2 {
			t.Fatalf("a live queue_update carries %d bytes of a %d-byte message", len(s), size+2)
		}
	}
	logged, ok := h.s.EventsSince(0)
	if !ok {
		t.Fatal("log does not reach back to the start")
	}
	updates := 0
	for _, ev := range logged {
		if ev.Type != "queue_update" {
			continue
		}
		updates++
		total := 0
		for i, s := range ev.Agent.FollowUp {
			total += len(s)
			if !strings.HasPrefix(s, fmt.Sprintf("%02d", i)) {
				t.Fatalf("logged preview %d is %.10q", i, s)
			}
		}
		if total > len(ev.Agent.FollowUp)*300 {
			t.Fatalf("a logged queue_update of %d messages keeps %d bytes", len(ev.Agent.FollowUp), total)
		}
	}
	if updates != n {
		t.Fatalf("%d queue_update events logged, want %d", updates, n)
	}
}

// The queue limits are set through session.Config.
func TestQueueLimitsFromConfig(t *testing.T) {
	h := newHarness(t, func(c *session.Config) { c.SessionsDir, c.MaxQueued, c.MaxQueuedBytes = "", 1, 100 })
	busy(h)
	if err := h.s.Steer(session.UserMessage(strings.Repeat("s", 101), nil)); err == nil || !strings.Contains(err.Error(), "at most 100 bytes") {
		t.Fatalf("too large: %v", err)
	}
	if err := h.s.Prompt(session.UserMessage("first", nil), session.BehaviorFollowUp); err != nil {
		t.Fatal(err)
	}
	err := h.s.PromptThen(session.UserMessage("second", nil), session.BehaviorSteer, func() { t.Error("a refused prompt was accepted") })
	if !errors.Is(err, agent.ErrQueueFull) || !strings.Contains(err.Error(), "at most 1 queued message") {
		t.Fatalf("second: %v", err)
	}
}
