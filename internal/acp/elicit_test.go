package acp

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// ask_user's input, editor and form questions go to a client that takes
// form elicitation as elicitation/create; its answer is the tool's
// result. A client that declines, or does not take elicitation, leaves
// the question dismissed.
func TestQuestionsBecomeElicitations(t *testing.T) {
	form := `{"question":"About you","kind":"form","fields":[{"name":"name","type":"string","required":true},{"name":"age","type":"integer"},{"name":"colour","type":"select","options":["red","green"]}]}`
	tests := []struct {
		name   string
		caps   map[string]any
		args   string
		answer map[string]any
		schema string // the requested schema's properties and required, as JSON
		want   string // in the tool's result
	}{
		{name: "input", caps: map[string]any{"form": map[string]any{}}, args: `{"question":"Name?","kind":"input","placeholder":"your name"}`,
			answer: map[string]any{"action": "accept", "content": map[string]any{"value": "Ada"}},
			schema: `map[value:map[description:your name title:Answer type:string]] [value]`, want: "ada"},
		{name: "editor", caps: map[string]any{"form": map[string]any{}}, args: `{"question":"Edit","kind":"editor","prefill":"draft"}`,
			answer: map[string]any{"action": "accept", "content": map[string]any{"value": "final text"}},
			schema: `map[value:map[default:draft title:Text type:string]] [value]`, want: "final text"},
		{name: "form", caps: map[string]any{"form": map[string]any{}}, args: form,
			answer: map[string]any{"action": "accept", "content": map[string]any{"name": "Ada", "age": 36, "colour": "green"}},
			schema: `map[age:map[type:integer] colour:map[enum:[red green] type:string] name:map[type:string]] [name]`, want: "36"},
		{name: "declined", caps: map[string]any{"form": map[string]any{}}, args: `{"question":"Name?","kind":"input"}`,
			answer: map[string]any{"action": "decline"}, schema: `map[value:map[title:Answer type:string]] [value]`, want: "dismissed"},
		{name: "url only", caps: map[string]any{"url": map[string]any{}}, args: `{"question":"Name?","kind":"input"}`, want: "dismissed"},
		{name: "form null", caps: map[string]any{"form": nil}, args: `{"question":"Name?","kind":"input"}`, want: "dismissed"},
		{name: "no elicitation", args: `{"question":"Name?","kind":"input"}`, want: "dismissed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startAgent(t, nil)
			var asked []map[string]any
			c.serve = map[string]func(map[string]any) any{"elicitation/create": func(p map[string]any) any {
				asked = append(asked, p)
				return tt.answer
			}}
			caps := map[string]any{}
			if tt.caps != nil {
				caps["elicitation"] = tt.caps
			}
			c.call("initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": caps})
			sid := result(t, c.call("session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}}))["sessionId"].(string)
			result(t, c.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "/tool ask_user " + tt.args}}}))
			var end map[string]any
			var callID string
			for _, u := range c.takeUpdates() {
				if u["sessionUpdate"] == "tool_call" {
					callID, _ = u["toolCallId"].(string)
				}
				if u["sessionUpdate"] == "tool_call_update" && u["status"] != "in_progress" {
					end = u
				}
			}
			if end == nil || !strings.Contains(strings.ToLower(fmt.Sprint(end["content"])), tt.want) {
				t.Fatalf("the tool's result %v, want %q in it", end, tt.want)
			}
			if tt.answer == nil {
				if len(asked) != 0 {
					t.Fatalf("elicited without the form capability: %v", asked)
				}
				return
			}
			if len(asked) != 1 {
				t.Fatalf("asked %d times", len(asked))
			}
			p := asked[0]
			s := p["requestedSchema"].(map[string]any)
			if got := fmt.Sprint(s["properties"], " ", s["required"]); p["mode"] != "form" || p["sessionId"] != sid || p["toolCallId"] != callID || s["type"] != "object" || got != tt.schema {
				t.Errorf("elicitation/create %v\nschema %s, want %s", p, got, tt.schema)
			}
			if !reflect.DeepEqual(p["message"], "About you") && tt.name == "form" {
				t.Errorf("message %v", p["message"])
			}
		})
	}
}
