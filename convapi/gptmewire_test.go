package convapi

import (
	"fmt"
	"slices"
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
