package server

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/tool"
)

// An event published to the cluster's stream leaves its zero fields out,
// reads back as it was, and a node reading what an older node wrote
// (every field written) reads the same event.
func TestClusterEventEncoding(t *testing.T) {
	at := time.Date(2026, 12, 2, 6, 16, 3, 859604261, time.UTC)
	delta := session.Event{Seq: 42, Time: at, Type: session.EventType(agent.EventMessageUpdate),
		Agent: &agent.Event{Type: agent.EventMessageUpdate, Update: &llm.Event{Type: llm.EventTextDelta, Delta: "hello "}}}
	// The same event as the previous version wrote it.
	const old = `{"Seq":42,"Time":"2026-12-02T06:16:03.859604261Z","Type":"message_update","Agent":{"Type":"message_update","Message":null,"Update":{"Type":"text_delta","ContentIndex":0,"Delta":"hello ","Content":"","ToolCall":null,"Reason":""},"ToolResults":null,"Messages":null,"ToolCallID":"","ToolName":"","Args":null,"Result":null,"Partial":null,"IsError":false,"Duration":0,"Steering":null,"FollowUp":null,"Err":null},"State":"","Previous":"","Outcome":"","Reason":"","Compaction":null,"Aborted":false,"WillRetry":false,"ErrorMessage":"","Attempt":0,"MaxAttempts":0,"DelayMs":0,"Success":false,"FinalError":"","Name":"","ThinkingLevel":"","Model":null,"Interaction":null,"Todo":null,"SessionID":"","SessionFile":"","Index":0,"Truncated":false,"Config":null}`
	b, err := json.Marshal(delta)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"Seq":42,"Time":"2026-12-02T06:16:03.859604261Z","Type":"message_update","Agent":{"Type":"message_update","Update":{"Type":"text_delta","Delta":"hello "}}}`
	if string(b) != want {
		t.Errorf("a delta encodes as\n%s\nwant\n%s", b, want)
	}
	var fromOld session.Event
	if err := json.Unmarshal([]byte(old), &fromOld); err != nil {
		t.Fatal(err)
	}
	// RawMessage keeps the JSON null it was given, as it always did.
	if string(fromOld.Agent.Args) == "null" {
		fromOld.Agent.Args = nil
	}
	if d := cmp.Diff(delta, fromOld); d != "" {
		t.Errorf("the previous version's bytes read differently (-want +got):\n%s", d)
	}

	empty := tool.Result{}
	out := tool.TextResult("so far", nil)
	for name, ev := range map[string]session.Event{
		"delta":              delta,
		"state":              {Seq: 43, Time: at, Type: session.EventStateChanged, State: session.StateIdle, Previous: session.StateRunning, Outcome: session.OutcomeCompleted},
		"update with output": {Seq: 44, Type: session.EventType(agent.EventToolExecutionUpdate), Agent: &agent.Event{Type: agent.EventToolExecutionUpdate, ToolCallID: "c1", ToolName: "bash", Args: json.RawMessage(`{"command":"ls"}`), Partial: &out}},
		// The log's empty result and no result at all stay apart: a
		// following node fills the second (cluster_output.go).
		"update, empty result": {Seq: 45, Type: session.EventType(agent.EventToolExecutionUpdate), Agent: &agent.Event{Type: agent.EventToolExecutionUpdate, ToolCallID: "c1", Partial: &empty}},
		"update, no result":    {Seq: 46, Type: session.EventType(agent.EventToolExecutionUpdate), Agent: &agent.Event{Type: agent.EventToolExecutionUpdate, ToolCallID: "c1"}},
		"queue":                {Seq: 47, Type: session.EventType(agent.EventQueueUpdate), Agent: &agent.Event{Type: agent.EventQueueUpdate, Steering: []string{}, FollowUp: []string{"next"}}},
		"retry":                {Seq: 48, Type: session.EventAutoRetryStart, Attempt: 1, MaxAttempts: 3, DelayMs: 2000, ErrorMessage: "overloaded"},
	} {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got session.Event
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d := cmp.Diff(ev, got); d != "" {
			t.Errorf("%s reads back differently (-want +got):\n%s\n%s", name, d, b)
		}
	}
}

// BenchmarkClusterEventCodec is what a token's delta costs to publish
// and to read back on another node.
func BenchmarkClusterEventCodec(b *testing.B) {
	ev := session.Event{Seq: 42, Time: time.Now(), Type: session.EventType(agent.EventMessageUpdate),
		Agent: &agent.Event{Type: agent.EventMessageUpdate, Update: &llm.Event{Type: llm.EventTextDelta, Delta: "hello "}}}
	b.ReportAllocs()
	var n int
	for b.Loop() {
		data, err := json.Marshal(ev)
		if err != nil {
			b.Fatal(err)
		}
		var got session.Event
		if err := json.Unmarshal(data, &got); err != nil {
			b.Fatal(err)
		}
		n = len(data)
	}
	b.ReportMetric(float64(n), "bytes/event")
}
