package convapi

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/faux"
)

// jsonKind names the JSON type of a decoded value.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "bool"
	case float64:
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// shapeOf lists path=kind for every key of v, arrays by their first
// element.
func shapeOf(prefix string, v any, out map[string]string) {
	out[prefix] = jsonKind(v)
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			shapeOf(prefix+"."+k, e, out)
		}
	case []any:
		if len(x) > 0 {
			shapeOf(prefix+"[]", x[0], out)
		}
	}
}

// The conversation GET and the connected event in the shape
// gptme-server gives them (gptme/server/api_v2.py api_conversation,
// api_v2_sessions.py's connected event), which gptme-webui reads when it
// opens /chat/<id>: every key gptme sends, with its JSON type, and no
// null but last_error. agentd's additions (seq, pending_elicitations,
// metadata) are listed so a new one is a decision.
func TestGptmeConversationShape(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	sid := fx.create("shape", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hello"}}})
	st := fx.open("/api/v2/conversations/shape/events?session_id=" + sid)
	conn := st.next("connected")
	fx.faux.Push(faux.Response{Text: "hi back"})
	fx.ok("POST", "/api/v2/conversations/shape/step", map[string]any{"session_id": sid})
	st.next("generation_complete")
	get := fx.ok("GET", "/api/v2/conversations/shape", nil)

	tests := []struct {
		name string
		v    any
		want string
	}{
		{"conversation", get.m, strings.Join([]string{
			"=object", ".branches=object", ".branches.main=array", ".branches.main[]=object",
			".branches.main[].content=string", ".branches.main[].role=string", ".branches.main[].timestamp=string",
			".id=string", ".log=array", ".log[]=object", ".log[].content=string", ".log[].role=string", ".log[].timestamp=string",
			".logdir=string", ".logfile=string", ".name=string", ".seq=number",
			".session=object", ".session.generating=bool", ".session.id=string", ".session.last_error=null",
		}, " ")},
		{"connected", conn.m, strings.Join([]string{
			"=object", ".generating=bool", ".last_error=null", ".pending_elicitations=array", ".pending_tools=array",
			".seq=number", ".session_id=string", ".type=string",
		}, " ")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shape := map[string]string{}
			shapeOf("", tt.v, shape)
			var got []string
			for k, v := range shape {
				if strings.Contains(k, ".metadata") {
					continue // agentd's detail of a message, absent on a user message
				}
				got = append(got, k+"="+v)
			}
			sort.Strings(got)
			want := strings.Fields(tt.want)
			sort.Strings(want)
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("shape\n  got  %s\n  want %s", strings.Join(got, " "), strings.Join(want, " "))
			}
		})
	}
	// The log's messages as gptme has them: role, content, timestamp;
	// the assistant's answer last.
	log := get.m["log"].([]any)
	last := log[len(log)-1].(map[string]any)
	if len(log) != 2 || last["role"] != "assistant" || last["content"] != "hi back" {
		t.Errorf("log %v", log)
	}
}
