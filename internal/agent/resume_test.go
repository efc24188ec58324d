package agent_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/tool"
)

func assistantCalls(stop llm.StopReason, calls ...llm.Content) *llm.Message {
	return &llm.Message{Role: llm.RoleAssistant, Content: calls, StopReason: stop}
}

func result(id string) *llm.Message {
	return &llm.Message{Role: llm.RoleToolResult, ToolCallID: id, ToolName: "sleep", Content: []llm.Content{llm.Text("said")}}
}

func call(id string) llm.Content {
	return llm.ToolCall(id, "sleep", []byte(`{"ms":1,"say":"`+id+`"}`))
}

// TestPendingToolCalls: which calls of the last assistant message still
// have to run, in every shape a conversation can end in.
func TestPendingToolCalls(t *testing.T) {
	tests := []struct {
		name    string
		msgs    []*llm.Message
		pending string // ids, "" for none
		respond bool   // CanRespond
	}{
		{"empty", nil, "", false},
		{"user", []*llm.Message{user("q")}, "", true},
		{"answer", []*llm.Message{user("q"), {Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("a")}, StopReason: llm.StopStop}}, "", false},
		{"calls without results", []*llm.Message{user("q"), assistantCalls(llm.StopToolUse, call("a"), call("b"))}, "a,b", true},
		{"one result of two", []*llm.Message{user("q"), assistantCalls(llm.StopToolUse, call("a"), call("b")), result("a")}, "b", true},
		{"all results", []*llm.Message{user("q"), assistantCalls(llm.StopToolUse, call("a")), result("a")}, "", true},
		{"aborted calls never run", []*llm.Message{user("q"), assistantCalls(llm.StopAborted, call("a"))}, "", true},
		{"failed calls never run", []*llm.Message{user("q"), assistantCalls(llm.StopError, call("a"))}, "", true},
		{"moved on", []*llm.Message{user("q"), assistantCalls(llm.StopToolUse, call("a")), user("other")}, "", true},
		{"aborted after an answer", []*llm.Message{user("q"), {Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("a")}, StopReason: llm.StopStop}, assistantCalls(llm.StopAborted)}, "", false},
		{"aborted after calls", []*llm.Message{user("q"), assistantCalls(llm.StopToolUse, call("a")), assistantCalls(llm.StopAborted)}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, calls := agent.PendingToolCalls(tt.msgs)
			var ids []string
			for _, c := range calls {
				ids = append(ids, c.ID)
			}
			if got := strings.Join(ids, ","); got != tt.pending {
				t.Errorf("pending %q, want %q", got, tt.pending)
			}
			if got := agent.CanRespond(tt.msgs); got != tt.respond {
				t.Errorf("CanRespond %v, want %v", got, tt.respond)
			}
		})
	}
}

// TestResumeRunsPendingCallsThenAsksTheModel: a conversation that ends
// with tool calls that never ran (a restart) resumes by running them,
// through BeforeToolCall, and then asking the model, as one run.
func TestResumeRunsPendingCallsThenAsksTheModel(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := faux.New(faux.Options{})
	p.Push(faux.Response{Text: "both done"})
	a, rec := newAgent(p, &sleepTool{name: "sleep"})
	var asked []string
	a.Update(func(c *agent.Config) {
		c.BeforeToolCall = func(_ context.Context, call tool.Call) agent.ToolDecision {
			asked = append(asked, call.ID)
			return agent.ToolDecision{Run: true}
		}
	})
	_ = a.SetMessages([]*llm.Message{user("go"), assistantCalls(llm.StopToolUse, call("a"), call("b")), result("a")})
	added, err := a.Resume(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(asked, ",") != "b" {
		t.Fatalf("asked about %v, want only b", asked)
	}
	want := "agent_start turn_start tool_execution_start:b tool_execution_end:b message_start:toolResult message_end:toolResult turn_end turn_start message_start:assistant message_end:assistant turn_end agent_end"
	if got := strings.Join(rec.types(), " "); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	if len(added) != 2 || added[0].ToolCallID != "b" || added[0].TextContent() != "said b" || added[1].TextContent() != "both done" {
		t.Fatalf("added %v", added)
	}
	// The model saw both results after the calls.
	req := p.Requests()[0]
	var roles []string
	for _, m := range req.Messages {
		roles = append(roles, string(m.Role))
	}
	if strings.Join(roles, " ") != "user assistant toolResult toolResult" {
		t.Fatalf("request %v", roles)
	}
	// Nothing left to respond to.
	if _, err := a.Resume(context.Background()); err != agent.ErrNothingToContinue {
		t.Fatalf("resume after the answer: %v", err)
	}
}

// TestResumeAfterAbortedAnswer: a step after an interrupted answer asks
// the model again; the aborted message stays in the conversation.
func TestResumeAfterAbortedAnswer(t *testing.T) {
	p := faux.New(faux.Options{})
	p.Push(faux.Response{Text: "again"})
	a, _ := newAgent(p)
	aborted := &llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("par")}, StopReason: llm.StopAborted}
	_ = a.SetMessages([]*llm.Message{user("q"), aborted})
	added, err := a.Resume(context.Background())
	if err != nil || len(added) != 1 || added[0].TextContent() != "again" {
		t.Fatalf("%v %v", added, err)
	}
	if ms := a.Messages(); len(ms) != 3 || ms[1] != aborted {
		t.Fatalf("conversation %v", ms)
	}
}

// TestToolDurationAndAbortBeforeAsking: tool_execution_end says how long
// the tool ran; an abort while one call waits in BeforeToolCall keeps the
// later calls from being asked about or run, with a result that says why.
// It runs in a synctest bubble, where the 30ms the tool sleeps are the
// bubble's clock and the duration reported is exact.
func TestToolDurationAndAbortBeforeAsking(t *testing.T) {
	defer goleak.VerifyNone(t)
	synctest.Test(t, testToolDurationAndAbortBeforeAsking)
}

func testToolDurationAndAbortBeforeAsking(t *testing.T) {
	p := faux.New(faux.Options{})
	p.Push(faux.Response{ToolCalls: []faux.ToolCall{
		{ID: "a", Name: "sleep", Args: `{"ms":30,"say":"x"}`},
		{ID: "b", Name: "sleep", Args: `{"ms":1}`},
		{ID: "c", Name: "sleep", Args: `{"ms":1}`},
	}})
	st := &sleepTool{name: "sleep"}
	a, rec := newAgent(p, st)
	a.Update(func(c *agent.Config) { c.Sequential = true })
	waiting := make(chan struct{})
	var asked []string
	a.Update(func(c *agent.Config) {
		c.BeforeToolCall = func(ctx context.Context, call tool.Call) agent.ToolDecision {
			asked = append(asked, call.ID)
			if call.ID != "b" {
				return agent.ToolDecision{Run: true}
			}
			close(waiting)
			<-ctx.Done()
			r := tool.Errorf("cancelled while waiting")
			return agent.ToolDecision{Result: &r}
		}
	})
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan []*llm.Message)
	go func() { added, _ := a.Prompt(ctx, user("go")); done <- added }()
	<-waiting
	cancel(errors.New("the user interrupted"))
	added := <-done
	if strings.Join(asked, ",") != "a,b" {
		t.Fatalf("asked %v: c must not be asked after the abort", asked)
	}
	var c *llm.Message
	for _, m := range added {
		if m.ToolCallID == "c" {
			c = m
		}
	}
	if c == nil || !c.IsError || c.TextContent() != "Tool call not run: the user interrupted" {
		t.Fatalf("result of c %+v", c)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, ev := range rec.events {
		if ev.Type != agent.EventToolExecutionEnd {
			continue
		}
		switch ev.ToolCallID {
		case "a":
			if ev.Duration < 30*time.Millisecond {
				t.Errorf("a ran for %v, reported less than its 30 ms", ev.Duration)
			}
		default:
			if ev.Duration != 0 {
				t.Errorf("%s did not run but reports %v", ev.ToolCallID, ev.Duration)
			}
		}
	}
}
