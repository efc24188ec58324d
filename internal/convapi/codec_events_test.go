package convapi

import (
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/todo"
)

// The session's retries, compactions and plan reach the event stream, so
// a client can show "retrying in 2 s", "compacting" and a progress bar;
// an assistant message carries what it cost.
func TestCodecStateEvents(t *testing.T) {
	cd := &codec{requests: &requestIDs{}}
	tests := []struct {
		name string
		ev   session.Event
		want []string
	}{
		{"retry started", session.Event{Type: session.EventAutoRetryStart, Seq: 4, Attempt: 1, MaxAttempts: 3, DelayMs: 2000, ErrorMessage: "overloaded"},
			[]string{`id: 4` + "\n" + `data: {"type":"retry_started","attempt":1,"max_attempts":3,"delay_ms":2000,"error":"overloaded"}`}},
		{"retry ended", session.Event{Type: session.EventAutoRetryEnd, Seq: 5, Attempt: 2, Success: true},
			[]string{`{"type":"retry_ended","attempt":2,"success":true}`}},
		{"compaction started", session.Event{Type: session.EventCompactionStart, Seq: 6, Reason: "threshold"},
			[]string{`{"type":"compaction_started","reason":"threshold"}`}},
		{"compaction ended", session.Event{Type: session.EventCompactionEnd, Seq: 7, Reason: "overflow", WillRetry: true},
			[]string{`{"type":"compaction_ended","reason":"overflow","will_retry":true}`}},
		{"compaction failed", session.Event{Type: session.EventCompactionEnd, Seq: 8, Reason: "manual", ErrorMessage: "no summary"},
			[]string{`{"type":"compaction_ended","reason":"manual","error":"no summary"}`, `{"type":"error","error":"no summary"}`}},
		{"plan", session.Event{Type: session.EventTodoUpdated, Seq: 9, Todo: &todo.Snapshot{Items: []todo.Item{{ID: 1, Content: "read", Status: todo.Completed}, {ID: 2, Content: "write", Status: todo.InProgress}}, Done: 1, Total: 2}},
			[]string{`{"type":"todo_updated","items":[{"id":1,"content":"read","status":"completed"},{"id":2,"content":"write","status":"in_progress"}],"done":1,"total":2}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(cd.Encode("s1", tt.ev).Data)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("frame lacks %s:\n%s", w, got)
				}
			}
			if n := strings.Count(got, "data: "); n != len(tt.want) {
				t.Errorf("%d events, want %d:\n%s", n, len(tt.want), got)
			}
		})
	}
}

func TestAssistantMessageCarriesUsage(t *testing.T) {
	m := &llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("hi")}, StopReason: llm.StopStop,
		Usage: llm.Usage{Input: 42, Output: 7, TotalTokens: 49, Cost: llm.Cost{Total: 0.000056}}}
	got := string(marshal(wireMessage(m)))
	if want := `"usage":{"input":42,"output":7,"cacheRead":0,"cacheWrite":0,"totalTokens":49,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0.000056}}`; !strings.Contains(got, want) {
		t.Errorf("message %s lacks %s", got, want)
	}
	if got := string(marshal(wireMessage(&llm.Message{Role: llm.RoleAssistant, StopReason: llm.StopStop}))); strings.Contains(got, "usage") {
		t.Errorf("a message without usage shows one: %s", got)
	}
}
