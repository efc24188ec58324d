package convapi

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// PUT's prompt: gptme's named prompts leave agentd's own system prompt
// alone; any other text leads the conversation as a system message the
// model reads, before the client's messages.
func TestCreatePrompt(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	tests := []struct {
		prompt any
		want   []string
	}{
		{nil, []string{"user:hi"}},
		{"full", []string{"user:hi"}},
		{"short", []string{"user:hi"}},
		{"none", []string{"user:hi"}},
		{"  ", []string{"user:hi"}},
		{"You are an assistant for testing.", []string{"system:You are an assistant for testing.", "user:hi"}},
	}
	for i, tt := range tests {
		t.Run(fmt.Sprint(tt.prompt), func(t *testing.T) {
			id := fmt.Sprintf("prompt-%d", i)
			body := userMsgs("hi")
			if tt.prompt != nil {
				body["prompt"] = tt.prompt
			}
			fx.create(id, body)
			if got := fx.logOf(id); !slices.Equal(got, tt.want) {
				t.Errorf("log %q, want %q", got, tt.want)
			}
		})
	}
}

// A message clients see as role "system" is not deleted (gptme's rule and
// text); a user message is.
func TestDeleteSystemMessage(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	fx.create("sys", map[string]any{"prompt": "Be brief.", "messages": []any{
		map[string]any{"role": "system", "content": "context"},
		map[string]any{"role": "user", "content": "hello"},
	}})
	tests := []struct {
		index  int
		status int
		msg    string
		log    []string
	}{
		{0, 400, "Cannot delete system messages", []string{"system:Be brief.", "system:context", "user:hello"}},
		{1, 400, "Cannot delete system messages", []string{"system:Be brief.", "system:context", "user:hello"}},
		{2, 200, "", []string{"system:Be brief.", "system:context"}},
	}
	for _, tt := range tests {
		r := fx.do("DELETE", fmt.Sprintf("/api/v2/conversations/sys/messages/%d", tt.index), nil)
		if tt.msg != "" {
			wantErr(t, r, tt.status, tt.msg)
		} else if r.status != tt.status {
			t.Errorf("DELETE %d: %s", tt.index, r)
		}
		if got := fx.logOf("sys"); !slices.Equal(got, tt.log) {
			t.Errorf("after DELETE %d: log %q, want %q", tt.index, got, tt.log)
		}
	}
}

// POST .../transcript: gptme's checks and texts, a conversation made when
// there is none, only turns with a role and text added, a call added once.
func TestTranscript(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	call := map[string]any{"call_sid": "CA1"}
	turn := func(role string, text any) map[string]any { return map[string]any{"role": role, "text": text} }
	bad := []struct {
		name string
		body any
		msg  string
	}{
		{"no turns", map[string]any{"call_metadata": call}, "turns (list) is required"},
		{"empty turns", map[string]any{"turns": []any{}, "call_metadata": call}, "turns (list) is required"},
		{"turns an object", map[string]any{"turns": map[string]any{"role": "user"}, "call_metadata": call}, "turns (list) is required"},
		{"a turn a string", map[string]any{"turns": []any{turn("user", "a"), "oops"}, "call_metadata": call}, "turns[1] must be an object"},
		{"text a number", map[string]any{"turns": []any{turn("user", 5)}, "call_metadata": call}, "turns[0].text must be a string"},
		{"text a list", map[string]any{"turns": []any{turn("user", []int{1})}, "call_metadata": call}, "turns[0].text must be a string"},
		{"no call_metadata", map[string]any{"turns": []any{turn("user", "a")}}, "call_metadata (object) is required"},
		{"empty call_metadata", map[string]any{"turns": []any{turn("user", "a")}, "call_metadata": map[string]any{}}, "call_metadata (object) is required"},
		{"no call_sid", map[string]any{"turns": []any{turn("user", "a")}, "call_metadata": map[string]any{"from": "x"}}, "call_metadata.call_sid is required"},
		{"blank call_sid", map[string]any{"turns": []any{turn("user", "a")}, "call_metadata": map[string]any{"call_sid": ""}}, "call_metadata.call_sid is required"},
		{"call_sid 0", map[string]any{"turns": []any{turn("user", "a")}, "call_metadata": map[string]any{"call_sid": 0}}, "call_metadata.call_sid must be a string"},
		{"call_sid false", map[string]any{"turns": []any{turn("user", "a")}, "call_metadata": map[string]any{"call_sid": false}}, "call_metadata.call_sid must be a string"},
		{"call_sid an object", map[string]any{"turns": []any{turn("user", "a")}, "call_metadata": map[string]any{"call_sid": map[string]any{}}}, "call_metadata.call_sid must be a string"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			wantErr(t, fx.do("POST", "/api/v2/conversations/tr-bad/transcript", tt.body), 400, tt.msg)
		})
	}
	if r := fx.do("GET", "/api/v2/conversations/tr-bad", nil); r.status != 404 {
		t.Errorf("a refused transcript made a conversation: %s", r)
	}

	turns := []any{turn("user", " hello "), turn("user", "   "), turn("invalid", "skipped"), turn("assistant", ""),
		turn("user", nil), turn("assistant", "hi there")}
	steps := []struct {
		conv, sid string
		status    string
		added     int
		log       []string
	}{
		{"tr", "CA1", "ok", 2, []string{"system:The messages that follow are the transcript of voice call CA1.", "user:hello", "assistant:hi there"}},
		{"tr", "CA1", "already_acked", 0, nil},
		{"tr", "CA2", "ok", 2, []string{"system:The messages that follow are the transcript of voice call CA1.", "user:hello", "assistant:hi there",
			"system:The messages that follow are the transcript of voice call CA2.", "user:hello", "assistant:hi there"}},
		{"tr", "CA1", "already_acked", 0, nil},
	}
	var last []string
	for i, st := range steps {
		r := fx.ok("POST", "/api/v2/conversations/"+st.conv+"/transcript", map[string]any{"turns": turns, "call_metadata": map[string]any{"call_sid": st.sid, "from": "+15550000"}})
		if r.str("status") != st.status || r.str("conversation_id") != st.conv || r.m["messages_added"] != float64(st.added) {
			t.Errorf("step %d: %s", i, r)
		}
		want := st.log
		if want == nil {
			want = last
		}
		if got := fx.logOf(st.conv); !slices.Equal(got, want) {
			t.Errorf("step %d: log %q, want %q", i, got, want)
		}
		last = want
	}
	// The marker is hidden from people (the model reads it).
	log := fx.ok("GET", "/api/v2/conversations/tr", nil).m["log"].([]any)
	if m := log[0].(map[string]any); m["hide"] != true {
		t.Errorf("the call's marker is shown: %v", m)
	}
}

// TestModelsAll: the model list holds what can be used now; with
// ?all=true it holds every model, and says why one cannot be used.
func TestModelsAll(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	ids := func(r reply) (out []string) {
		for _, m := range r.m["models"].([]any) {
			mm := m.(map[string]any)
			out = append(out, fmt.Sprintf("%s:%v:%v", mm["id"], mm["available"], mm["unavailable_reason"]))
		}
		return out
	}
	if got := ids(fx.ok("GET", "/api/v2/models", nil)); len(got) != 1 || !strings.HasSuffix(got[0], ":true:<nil>") {
		t.Errorf("models: %v", got)
	}
	got := ids(fx.ok("GET", "/api/v2/models?all=true", nil))
	if len(got) != 2 || got[1] != "anthropic/claude-test:false:no API key for anthropic: set ANTHROPIC_API_KEY" {
		t.Errorf("models?all=true: %v", got)
	}
	if r := fx.do("GET", "/api/v2/models?all=maybe", nil); r.status != http.StatusBadRequest || !strings.Contains(r.str("error"), "all") {
		t.Errorf("models?all=maybe: %s", r)
	}
}
