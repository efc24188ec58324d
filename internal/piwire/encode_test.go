package piwire_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/piwire"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/tool"
)

// chattyTool streams partial output, queues follow-ups while it runs and
// ends with bash-like details.
type chattyTool struct{ s *session.Session }

func (t *chattyTool) Spec() llm.Tool {
	return llm.Tool{Name: "chatty", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (t *chattyTool) Execute(ctx context.Context, call tool.Call, update func(tool.Result)) tool.Result {
	for i := 0; i < 3; i++ {
		text := strings.Repeat("out <&> ", 100*(i+1))
		tr := tool.Truncation{Content: text, Truncated: true, TruncatedBy: "bytes"}
		update(tool.Result{Content: []llm.Content{llm.Text(text)}, Details: tool.BashDetails{Truncation: &tr}})
	}
	for _, q := range []string{strings.Repeat("é", 400), "short"} {
		if err := t.s.FollowUp(session.UserMessage(q, nil)); err != nil {
			return tool.Errorf("%v", err)
		}
	}
	code := 1
	tr := tool.Truncation{Content: "<tail>", Truncated: true, TruncatedBy: "lines"}
	return tool.Result{Content: []llm.Content{llm.Text("<tail>")}, Details: tool.BashDetails{Truncation: &tr, FullOutputPath: "/tmp/a&b", ExitCode: &code}}
}

// A replay encodes to pi's events: byte for byte what live clients got
// (with delta message_update), except that a tool_execution_update has an
// empty partialResult and a queue_update carries previews of the texts.
func TestReplayedEventsArePiEvents(t *testing.T) {
	p := faux.New(faux.Options{})
	p.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "t1", Name: "chatty"}}}, faux.Response{Text: "one"}, faux.Response{Text: "two"}, faux.Response{Text: "three"})
	ct := &chattyTool{}
	s, err := session.New(session.Config{Cwd: t.TempDir(), Model: faux.Model(), Stream: p.Stream, Tools: []tool.Tool{ct}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ct.s = s
	live := map[uint64][]byte{}
	s.Subscribe(func(ev session.Event) { live[ev.Seq] = piwire.AppendEvent(nil, ev, true) })
	if err := s.Prompt(session.UserMessage("go", nil), session.BehaviorNone); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	logged, ok := s.EventsSince(0)
	if !ok || len(logged) != len(live) {
		t.Fatalf("%d logged events, %d live", len(logged), len(live))
	}
	updates, queues := 0, 0
	for _, ev := range logged {
		got, want := piwire.AppendEvent(nil, ev, true), live[ev.Seq]
		if got != nil && !json.Valid(got) {
			t.Fatalf("seq %d: not JSON: %s", ev.Seq, got)
		}
		switch ev.Type {
		case "tool_execution_update":
			updates++
			if string(got) != `{"type":"tool_execution_update","toolCallId":"t1","toolName":"chatty","args":{},"partialResult":{"content":[]}}` {
				t.Fatalf("replayed %s", got)
			}
		case "queue_update":
			queues++
			var r, l struct{ Steering, FollowUp []string }
			if err := json.Unmarshal(got, &r); err != nil {
				t.Fatal(err)
			}
			_ = json.Unmarshal(want, &l)
			if len(r.FollowUp) != len(l.FollowUp) || len(r.Steering) != 0 || r.Steering == nil {
				t.Fatalf("replayed %s\nlive %.200s", got, want)
			}
			for i, s := range r.FollowUp {
				if len(s) > session.QueuePreviewBytes+len("…") || !strings.HasPrefix(l.FollowUp[i], strings.TrimSuffix(s, "…")) {
					t.Fatalf("replayed text %q is not a preview of %q", s, l.FollowUp[i])
				}
			}
		default:
			if string(got) != string(want) {
				t.Fatalf("seq %d %s: replayed\n%s\nlive\n%s", ev.Seq, ev.Type, got, want)
			}
		}
	}
	if updates != 3 || queues != 4 {
		t.Fatalf("%d tool updates and %d queue updates replayed", updates, queues)
	}
}
