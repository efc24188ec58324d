package piserver

import (
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/tool"
)

// A tool update with no result (from another node's stream, between two
// that carry the output) gets no frame; one with a result, even an empty
// one as pi itself sends first, gets its frame.
func TestToolUpdateWithoutResult(t *testing.T) {
	upd := func(r *tool.Result) session.Event {
		return session.Event{Seq: 7, Type: session.EventType(agent.EventToolExecutionUpdate),
			Agent: &agent.Event{Type: agent.EventToolExecutionUpdate, ToolCallID: "c1", ToolName: "bash", Partial: r}}
	}
	out := tool.Result{Content: []llm.Content{llm.Text("so far")}}
	for _, delta := range []bool{false, true} {
		cd := &codec{delta: delta}
		if f := cd.Encode("s1", upd(nil)); f.Data != nil || f.Merge != nil {
			t.Errorf("delta=%v: an update without a result is sent: %s", delta, f.Data)
		}
		if f := cd.Encode("s1", upd(&tool.Result{})); !strings.Contains(string(f.Data), `"partialResult":{"content":[]}`) {
			t.Errorf("delta=%v: an empty result: %s", delta, f.Data)
		}
		if f := cd.Encode("s1", upd(&out)); !strings.Contains(string(f.Data), `"text":"so far"`) {
			t.Errorf("delta=%v: an update with output: %s", delta, f.Data)
		}
	}
}
