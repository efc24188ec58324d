package agent_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/agent"
	"github.com/agentd-dev/agentd/llm"
	"github.com/agentd-dev/agentd/llm/faux"
)

func TestQueueLimits(t *testing.T) {
	tests := []struct {
		name   string
		cfg    func(*agent.Config)
		sizes  []int
		refuse int // index of the first refused message, -1 for none
		want   error
		text   string
	}{
		{"count", func(c *agent.Config) { c.MaxQueued = 2 }, []int{1, 1, 1}, 2, agent.ErrQueueFull, "Queue full: at most 2 queued messages"},
		{"one too large", func(c *agent.Config) { c.MaxQueuedBytes = 10 }, []int{11}, 0, agent.ErrQueuedMessageTooLarge, "Queued message too large: 11 bytes, at most 10 bytes"},
		{"no room left", func(c *agent.Config) { c.MaxQueuedBytes = 10 }, []int{6, 4, 1}, 2, agent.ErrQueueFull, "10 bytes are queued and this one is 1 byte"},
		{"no limits", func(c *agent.Config) { c.MaxQueued, c.MaxQueuedBytes = -1, -1 }, append(repeat(70, 10), 17<<20), -1, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, rec := newAgent(faux.New(faux.Options{}))
			a.Update(tt.cfg)
			for i, n := range tt.sizes {
				queue := a.FollowUp
				if i%2 == 1 {
					queue = a.Steer
				}
				err := queue(user(strings.Repeat("q", n)))
				if i != tt.refuse {
					if err != nil {
						t.Fatalf("message %d refused: %v", i, err)
					}
					continue
				}
				var le *agent.LimitError
				if !errors.Is(err, tt.want) || !errors.As(err, &le) || !strings.Contains(err.Error(), tt.text) {
					t.Fatalf("message %d: %v, want %v saying %q", i, err, tt.want, tt.text)
				}
				if a.PendingCount() != i {
					t.Fatalf("%d queued", a.PendingCount())
				}
				updates := 0
				for _, ev := range rec.events {
					if ev.Type == agent.EventQueueUpdate {
						updates++
					}
				}
				if updates != i {
					t.Fatalf("%d queue_update events for %d queued messages", updates, i)
				}
				return
			}
		})
	}
}

func repeat(n, v int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestMessageSize(t *testing.T) {
	m := &llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text("hello"), llm.Image("AAAA", "image/png")}}
	if n := agent.MessageSize(m); n != 9 {
		t.Fatalf("size %d, want 9", n)
	}
}
