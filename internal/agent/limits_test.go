package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/tool"
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

// calls returns a response calling tool name with args.
func calls(name, args string) faux.Response {
	return faux.Response{ToolCalls: []faux.ToolCall{{Name: name, Args: args}}}
}

// stoppedBy checks that the run ended with an assistant message whose
// error is the limit err.
func stoppedBy(t *testing.T, rec *recorder, added []*llm.Message, err error, text string) {
	t.Helper()
	last := added[len(added)-1]
	if last.Role != llm.RoleAssistant || last.StopReason != llm.StopError || !strings.Contains(last.ErrorMessage, text) {
		t.Fatalf("last message %s %s %q", last.Role, last.StopReason, last.ErrorMessage)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var end *llm.Error
	for _, ev := range rec.events {
		if ev.Type == agent.EventMessageEnd && ev.Message.Role == llm.RoleAssistant {
			end = ev.Err
		}
	}
	if end == nil || end.Kind != agent.KindRunLimit || end.Retryable() || !errors.Is(end, err) {
		t.Fatalf("message_end error %#v, want kind %s wrapping %v", end, agent.KindRunLimit, err)
	}
}

func TestTurnLimit(t *testing.T) {
	ls := &sleepTool{name: "sleep"}
	t.Run("limit", func(t *testing.T) {
		p := faux.New(faux.Options{})
		for range 10 {
			p.Push(calls("sleep", `{"ms":0}`))
		}
		a, rec := newAgent(p, ls)
		a.Update(func(c *agent.Config) { c.MaxTurns = 3 })
		added, _ := a.Prompt(context.Background(), user("loop"))
		if n := len(p.Requests()); n != 3 {
			t.Fatalf("%d requests, want 3", n)
		}
		stoppedBy(t, rec, added, agent.ErrTurnLimit, "after 3 turns")
		types := strings.Join(rec.types(), " ")
		if !strings.HasSuffix(types, "message_end:toolResult turn_end turn_start message_start:assistant message_end:assistant turn_end agent_end") {
			t.Fatalf("events end %s", types)
		}
	})
	t.Run("unlimited", func(t *testing.T) {
		p := faux.New(faux.Options{})
		for range 250 {
			p.Push(calls("sleep", `{"ms":0}`))
		}
		p.Push(faux.Response{Text: "done"})
		a, _ := newAgent(p, ls)
		a.Update(func(c *agent.Config) { c.MaxTurns = -1 })
		added, _ := a.Prompt(context.Background(), user("loop"))
		if last := added[len(added)-1]; last.TextContent() != "done" || len(p.Requests()) != 251 {
			t.Fatalf("ended with %q after %d requests", last.TextContent(), len(p.Requests()))
		}
	})
	t.Run("carried across Continue, reset by Prompt", func(t *testing.T) {
		p := faux.New(faux.Options{})
		p.Push(calls("sleep", `{"ms":0}`), faux.Response{Err: &llm.Error{Kind: llm.ErrServer, Message: "boom"}},
			calls("sleep", `{"ms":0}`), calls("sleep", `{"ms":0}`),
			calls("sleep", `{"ms":0}`), calls("sleep", `{"ms":0}`), calls("sleep", `{"ms":0}`))
		a, rec := newAgent(p, ls)
		a.Update(func(c *agent.Config) { c.MaxTurns = 3 })
		added, _ := a.Prompt(context.Background(), user("loop"))
		if added[len(added)-1].ErrorMessage != "boom" {
			t.Fatalf("first run ended with %+v", added[len(added)-1])
		}
		// As a retry does: drop the failed answer and continue.
		ms := a.Messages()
		_ = a.SetMessages(ms[:len(ms)-1])
		added, _ = a.Continue(context.Background())
		if n := len(p.Requests()); n != 3 {
			t.Fatalf("%d requests, want 3 in all", n)
		}
		stoppedBy(t, rec, added, agent.ErrTurnLimit, "after 3 turns")
		if _, err := a.Prompt(context.Background(), user("again")); err != nil {
			t.Fatal(err)
		}
		if n := len(p.Requests()); n != 6 {
			t.Fatalf("a new prompt made %d requests, want 3", n-3)
		}
	})
	t.Run("queued messages stay queued", func(t *testing.T) {
		p := faux.New(faux.Options{})
		p.Push(calls("steer", `{}`))
		var a *agent.Agent
		steerer := toolFunc{"steer", func() tool.Result {
			_ = a.Steer(user("change course"))
			return tool.TextResult("ok", nil)
		}}
		a, _ = newAgent(p, steerer)
		a.Update(func(c *agent.Config) { c.MaxTurns = 1 })
		_, _ = a.Prompt(context.Background(), user("go"))
		if s, _ := a.Queued(); len(s) != 1 || s[0] != "change course" {
			t.Fatalf("steering queue after the stop: %q", s)
		}
	})
}

// toolFunc is a tool without arguments that runs f.
type toolFunc struct {
	name string
	f    func() tool.Result
}

func (t toolFunc) Spec() llm.Tool {
	return llm.Tool{Name: t.name, Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (t toolFunc) Execute(context.Context, tool.Call, func(tool.Result)) tool.Result { return t.f() }

func TestSameToolFailures(t *testing.T) {
	tests := []struct {
		name     string
		max      int
		script   []faux.Response
		requests int
		stopped  bool
	}{
		{"two", 2, []faux.Response{calls("nope", `{"a":1}`), calls("nope", `{"a":1}`), calls("nope", `{"a":1}`)}, 2, true},
		{"default is three", 0, []faux.Response{calls("nope", `{}`), calls("nope", `{}`), calls("nope", `{}`), calls("nope", `{}`)}, 3, true},
		{"another tool, same arguments", 2, []faux.Response{calls("nope", `{}`), calls("nada", `{}`), calls("nope", `{}`), {Text: "ok"}}, 4, false},
		{"off", -1, []faux.Response{calls("nope", `{}`), calls("nope", `{}`), calls("nope", `{}`), calls("nope", `{}`), {Text: "ok"}}, 5, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := faux.New(faux.Options{})
			p.Push(tt.script...)
			a, rec := newAgent(p)
			a.Update(func(c *agent.Config) { c.MaxSameToolFailures = tt.max })
			added, _ := a.Prompt(context.Background(), user("go"))
			if n := len(p.Requests()); n != tt.requests {
				t.Fatalf("%d requests, want %d", n, tt.requests)
			}
			if tt.stopped {
				stoppedBy(t, rec, added, agent.ErrRepeatedToolFailure, "failed")
				if !strings.Contains(added[len(added)-1].ErrorMessage, "nope") {
					t.Fatalf("the reason does not name the tool: %q", added[len(added)-1].ErrorMessage)
				}
			} else if last := added[len(added)-1]; last.StopReason != llm.StopStop {
				t.Fatalf("run ended %s %q", last.StopReason, last.ErrorMessage)
			}
		})
	}
}

func TestMessageSize(t *testing.T) {
	m := &llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text("hello"), llm.Image("AAAA", "image/png")}}
	if n := agent.MessageSize(m); n != 9 {
		t.Fatalf("size %d, want 9", n)
	}
}
