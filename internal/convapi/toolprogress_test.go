package convapi

import (
	"strconv"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/faux"
)

// A stream opened while a tool runs gets the call's output so far in its
// connected event, which the log's replay cannot give (the log keeps no
// partial output): fresh, resumed before the update, and resumed after
// it. Once the call has ended there is nothing to restore.
func TestConnectedCarriesRunningToolOutput(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	sid := fx.create("long", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "go"}}})
	st := fx.open("/api/v2/conversations/long/events?session_id=" + sid)
	st.next("connected")
	fx.faux.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "s1", Name: "slow", Args: `{"ms":60000,"text":"long"}`}}},
		faux.Response{Text: "after"})
	fx.ok("POST", "/api/v2/conversations/long/step", map[string]any{"session_id": sid, "auto_confirm": true})
	out := st.next("tool_output")
	if out.str("output") != "started long" {
		t.Fatalf("live tool_output: %s", out.raw)
	}
	toolID := out.str("tool_id")

	outputs := func(e event) map[string]string {
		got := map[string]string{}
		list, _ := e.m["tool_outputs"].([]any)
		for _, x := range list {
			o, _ := x.(map[string]any)
			id, _ := o["tool_id"].(string)
			got[id], _ = o["output"].(string)
		}
		return got
	}
	for _, tt := range []struct {
		name  string
		after string
	}{
		{"no cursor", ""},
		{"resumed before the update", "0"},
		{"resumed at the update", strconv.FormatUint(out.seq(), 10)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := "/api/v2/conversations/long/events"
			if tt.after != "" {
				path += "?after=" + tt.after
			}
			s2 := fx.open(path)
			defer s2.close()
			c := s2.next("connected")
			if got := outputs(c); got[toolID] != "started long" || len(got) != 1 {
				t.Fatalf("connected's tool_outputs = %v, want %s: started long\n%s", got, toolID, c.raw)
			}
			if c.m["generating"] != true {
				t.Errorf("not generating: %s", c.raw)
			}
		})
	}

	fx.ok("POST", "/api/v2/conversations/long/interrupt", map[string]any{"session_id": sid})
	st.next("interrupted")
	s3 := fx.open("/api/v2/conversations/long/events")
	defer s3.close()
	if c := s3.next("connected"); len(outputs(c)) != 0 {
		t.Errorf("an ended call's output is restored: %s", c.raw)
	}
}
