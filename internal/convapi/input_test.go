package convapi

import (
	"net/http"
	"strings"
	"testing"
)

// Every bad input gets its clear error, and the server keeps serving.
func TestBadInput(t *testing.T) {
	fx := newFixture(t, fixtureOptions{limits: maxFrame(64 << 10)})
	sid := fx.create("ok", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}})
	other := fx.create("other", nil)
	_ = other
	long := strings.Repeat("a", 256)
	tests := []struct {
		name, method, path string
		body               any
		status             int
		msg                string
	}{
		{"malformed JSON", "PUT", "/api/v2/conversations/x1", `{"messages": [`, 400, "Malformed JSON in request body"},
		{"trailing data", "PUT", "/api/v2/conversations/x1", `{} {}`, 400, "Malformed JSON in request body"},
		{"not UTF-8", "PUT", "/api/v2/conversations/x1", "{\"prompt\": \"\xff\"}", 400, "Malformed JSON in request body"},
		{"array body", "PUT", "/api/v2/conversations/x1", `[1, 2]`, 400, "JSON body must be an object"},
		{"string body", "POST", "/api/v2/conversations/ok/step", `"go"`, 400, "JSON body must be an object"},
		{"no body for a message", "POST", "/api/v2/conversations/ok", nil, 400, "No JSON data provided"},
		{"missing content", "POST", "/api/v2/conversations/ok", map[string]any{"role": "user"}, 400, "Missing required fields (role, content)"},
		{"content not a string", "POST", "/api/v2/conversations/ok", map[string]any{"role": "user", "content": 5}, 400, "content must be a string"},
		{"bad role", "POST", "/api/v2/conversations/ok", map[string]any{"role": "tool", "content": "x"}, 400, "Invalid role: tool. Must be one of: ('system', 'user', 'assistant')"},
		{"messages not a list", "PUT", "/api/v2/conversations/x2", map[string]any{"messages": "hi"}, 400, "'messages' must be a list"},
		{"message not an object", "PUT", "/api/v2/conversations/x2", map[string]any{"messages": []any{1}}, 400, "Each message must be an object"},
		{"bad timestamp", "PUT", "/api/v2/conversations/x2", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "x", "timestamp": "yesterday"}}}, 400, "Invalid timestamp format: yesterday"},
		{"config not an object", "PUT", "/api/v2/conversations/x2", map[string]any{"config": 3}, 400, "'config' must be an object"},
		{"unknown model", "PUT", "/api/v2/conversations/x2", map[string]any{"config": map[string]any{"chat": map[string]any{"model": "nope/nope"}}}, 400, "Model not found: nope/nope (GET /api/v2/models lists the models that can be used)"},
		{"auto_confirm a string", "PUT", "/api/v2/conversations/x2", map[string]any{"auto_confirm": "true"}, 400, "Invalid 'auto_confirm' value: 'auto_confirm' must be a boolean or a non-negative integer"},
		{"auto_confirm a float", "POST", "/api/v2/conversations/ok/step", map[string]any{"session_id": sid, "auto_confirm": 1.5}, 400, "Invalid 'auto_confirm' value: 'auto_confirm' must be a boolean or a non-negative integer"},
		{"files on an assistant message", "POST", "/api/v2/conversations/ok", map[string]any{"role": "assistant", "content": "x", "files": []string{"a.png"}}, 400, "files are taken on user messages only (this one's role is assistant)"},
		{"files not strings", "POST", "/api/v2/conversations/ok", map[string]any{"role": "user", "content": "x", "files": []int{1}}, 400, "files must be a list of strings"},
		{"unknown tool", "POST", "/api/v2/conversations/ok", map[string]any{"role": "user", "content": "x", "tools": []string{"nope"}}, 400, "Tool 'nope' not found (this conversation's tools: read, bash, edit, write, grep, find, ls, slow, ask_user, todo)"},
		{"branch traversal", "POST", "/api/v2/conversations/ok", map[string]any{"role": "user", "content": "x", "branch": "../x"}, 400, "Invalid branch name"},
		{"branch too long", "POST", "/api/v2/conversations/ok", map[string]any{"role": "user", "content": "x", "branch": long}, 400, "branch name too long"},
		{"unknown branch", "POST", "/api/v2/conversations/ok", map[string]any{"role": "user", "content": "x", "branch": "dev"}, 404, "Branch not found: dev"},
		{"unknown field on step", "POST", "/api/v2/conversations/ok/step", map[string]any{"session_id": sid, "auto_confrim": true}, 400, `Unknown field "auto_confrim"; allowed fields: session_id, model, stream, branch, auto_confirm, use_acp, max_tokens, temperature, top_p`},
		{"session_id blank", "POST", "/api/v2/conversations/ok/step", map[string]any{"session_id": "  "}, 400, "session_id is required"},
		{"session_id not a string", "POST", "/api/v2/conversations/ok/interrupt", map[string]any{"session_id": 7}, 400, "session_id must be a string"},
		{"unknown session", "POST", "/api/v2/conversations/ok/step", map[string]any{"session_id": "nope"}, 404, "Session not found: nope"},
		{"another conversation's session", "POST", "/api/v2/conversations/other/interrupt", map[string]any{"session_id": sid}, 403, "Session " + sid + " does not belong to conversation other"},
		{"events of an unknown session", "GET", "/api/v2/conversations/ok/events?session_id=nope", nil, 404, "Session not found: nope"},
		{"stream not a boolean", "POST", "/api/v2/conversations/ok/step", map[string]any{"session_id": sid, "stream": "yes"}, 400, "Invalid 'stream' value: 'stream' must be a boolean"},
		{"use_acp", "POST", "/api/v2/conversations/ok/step", map[string]any{"session_id": sid, "use_acp": true}, 400, "use_acp is not supported: agentd runs its own agent"},
		{"confirm without tool_id", "POST", "/api/v2/conversations/ok/tool/confirm", map[string]any{"action": "confirm"}, 400, "tool_id is required"},
		{"confirm without action", "POST", "/api/v2/conversations/ok/tool/confirm", map[string]any{"tool_id": "t"}, 400, "action is required"},
		{"unknown action", "POST", "/api/v2/conversations/ok/tool/confirm", map[string]any{"tool_id": "t", "action": "maybe"}, 400, "Unknown action: maybe (want confirm, edit, skip, auto, reject or always)"},
		{"edit without content", "POST", "/api/v2/conversations/ok/tool/confirm", map[string]any{"tool_id": "t", "action": "edit"}, 400, "content must be a non-empty string for edit action"},
		{"auto with count 0", "POST", "/api/v2/conversations/ok/tool/confirm", map[string]any{"tool_id": "t", "action": "auto", "count": 0}, 400, "count must be a positive integer"},
		{"auto with count true", "POST", "/api/v2/conversations/ok/tool/confirm", map[string]any{"tool_id": "t", "action": "auto", "count": true}, 400, "count must be a positive integer"},
		{"unknown tool id", "POST", "/api/v2/conversations/ok/tool/confirm", map[string]any{"tool_id": "tool-nope", "action": "confirm"}, 404, "Tool not found in any session for conversation: tool-nope"},
		{"unknown tool id in a session", "POST", "/api/v2/conversations/ok/tool/confirm", map[string]any{"session_id": sid, "tool_id": "tool-nope", "action": "confirm"}, 404, "Tool not found: tool-nope"},
		{"unknown field on confirm", "POST", "/api/v2/conversations/ok/tool/confirm", map[string]any{"tool_id": "t", "action": "confirm", "why": 1}, 400, `Unknown field "why"; allowed fields: session_id, tool_id, id, action, content, count, feedback, all_tools`},
		{"elicit without id", "POST", "/api/v2/conversations/ok/elicit/respond", map[string]any{"action": "accept"}, 400, "elicit_id and action are required"},
		{"elicit unknown action", "POST", "/api/v2/conversations/ok/elicit/respond", map[string]any{"elicit_id": "e", "action": "yes"}, 400, "Unknown action: yes. Must be accept, decline, or cancel"},
		{"elicit unknown id", "POST", "/api/v2/conversations/ok/elicit/respond", map[string]any{"elicit_id": "e", "action": "cancel"}, 404, "Elicitation not found: e"},
		{"edit out of range", "PATCH", "/api/v2/conversations/ok/messages/9", map[string]any{"content": "x"}, 404, "Message index 9 out of range (0-0)"},
		{"edit without content", "PATCH", "/api/v2/conversations/ok/messages/0", map[string]any{}, 400, "content or files is required"},
		{"delete out of range", "DELETE", "/api/v2/conversations/ok/messages/3", nil, 404, "Message index 3 out of range (0-0)"},
		{"fork without after_message", "POST", "/api/v2/conversations/ok/fork", nil, 400, "after_message query parameter is required"},
		{"fork after a word", "POST", "/api/v2/conversations/ok/fork?after_message=two", nil, 400, "after_message must be an integer"},
		{"fork out of range", "POST", "/api/v2/conversations/ok/fork?after_message=4", nil, 400, "Message index 4 out of range (0-0)"},
		{"config chat not an object", "PATCH", "/api/v2/conversations/ok/config", map[string]any{"chat": []int{}}, 400, "'chat' must be an object"},
		{"config bad thinking", "PATCH", "/api/v2/conversations/ok/config", map[string]any{"chat": map[string]any{"thinking": "max"}}, 400, ""},
		{"list limit", "GET", "/api/v2/conversations?limit=0", nil, 400, "limit must be a positive integer"},
		{"list limit not a number", "GET", "/api/v2/conversations?limit=x", nil, 400, "limit must be an integer"},
		{"list cursor", "GET", "/api/v2/conversations?paginated=1&cursor=zz", nil, 400, "cursor must be a numeric Unix timestamp or opaque cursor token"},
		{"get limit", "GET", "/api/v2/conversations/ok?limit=-1", nil, 400, "limit must be a positive integer"},
		{"get before without limit", "GET", "/api/v2/conversations/ok?before=1", nil, 400, "before requires limit to be set"},
		{"unknown conversation", "GET", "/api/v2/conversations/nope", nil, 404, "Conversation not found: nope"},
		{"unknown conversation step", "POST", "/api/conversations/nope/step", map[string]any{}, 404, "Conversation not found: nope"},
		{"step without session_id", "POST", "/api/v2/conversations/ok/step", map[string]any{}, 400, "session_id is required"},
		{"step with a null session_id", "POST", "/api/v2/conversations/ok/step", map[string]any{"session_id": nil}, 400, "session_id is required"},
		{"interrupt without session_id", "POST", "/api/v2/conversations/ok/interrupt", map[string]any{}, 400, "session_id is required"},
		{"rerun without session_id", "POST", "/api/v2/conversations/ok/rerun", map[string]any{}, 400, "session_id is required"},
		{"prompt not a string", "PUT", "/api/v2/conversations/x2", map[string]any{"prompt": 1}, 400, "'prompt' must be a string"},
		{"unknown conversation events", "GET", "/api/v2/conversations/nope/events", nil, 404, "Conversation not found: nope"},
		{"exists", "PUT", "/api/v2/conversations/ok", map[string]any{}, 409, "Conversation already exists: ok"},
		{"unknown session delete", "DELETE", "/api/v2/sessions/nope", nil, 404, "Session not found: nope"},
		{"id with a slash", "GET", "/api/v2/conversations/a%2Fb", nil, 400, "Invalid conversation_id"},
		{"id ..", "GET", "/api/v2/conversations/..", nil, 400, "Invalid conversation_id"},
		{"id with ..", "PUT", "/api/v2/conversations/a..b", map[string]any{}, 400, "Invalid conversation_id"},
		{"id .", "POST", "/api/v2/conversations/./step", map[string]any{}, 400, "Invalid conversation_id"},
		{"id with a backslash", "GET", "/api/v2/conversations/a%5Cb/events", nil, 400, "Invalid conversation_id"},
		{"id with NUL", "GET", "/api/v2/conversations/a%00b", nil, 400, "Invalid conversation_id"},
		{"id with a space", "PUT", "/api/v2/conversations/a%20b", map[string]any{}, 400, "Invalid conversation_id: use only letters, digits, '_', '-' and '.' (at most 255 bytes)"},
		{"id too long", "GET", "/api/v2/conversations/" + long, nil, 400, "conversation_id too long"},
		{"body too large", "POST", "/api/v2/conversations/ok", `{"role":"user","content":"` + strings.Repeat("x", 70<<10) + `"}`, 413, "Request body too large: the limit is 65536 bytes"},
		{"unknown path", "GET", "/api/v2/nothing/here", nil, 404, "Not found: /api/v2/nothing/here"},
		{"unknown path below a conversation", "GET", "/api/v2/conversations/ok/workspace/a.py/preview", nil, 404, "Not found: /api/v2/conversations/ok/workspace/a.py/preview"},
		{"unknown path below a hostile id", "GET", `/api/v2/conversations/..%5C..%5Cetc%5Cpasswd/workspace`, nil, 400, "Invalid conversation_id"},
		{"unknown path below an id with a backslash", "POST", `/api/v2/conversations/test%5C..%5Csecret/workspace/upload`, nil, 400, "Invalid conversation_id"},
		{"unknown path below a long id", "GET", "/api/v2/conversations/" + long + "/workspace/a.py/download", nil, 400, "conversation_id too long"},
		{"wrong method", "PATCH", "/api/v2/conversations/ok/step", nil, 405, "Method PATCH is not allowed on /api/v2/conversations/ok/step; use POST"},
		{"bad idempotency key", "POST", "/api/v2/conversations/ok/interrupt", map[string]any{"session_id": sid}, 400, "Idempotency-Key must be a non-empty string of at most 256 characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hdr []string
			if tt.name == "bad idempotency key" {
				hdr = []string{"Idempotency-Key", strings.Repeat("k", 300)}
			}
			r := fx.do(tt.method, tt.path, tt.body, hdr...)
			if tt.msg == "" {
				if r.status != tt.status || r.str("error") == "" {
					t.Errorf("got %s, want %d with an error message", r, tt.status)
				}
				return
			}
			wantErr(t, r, tt.status, tt.msg)
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
	// Nothing of it stopped the server, or changed the conversation.
	got := fx.ok("GET", "/api/v2/conversations/ok", nil)
	if n := len(got.m["log"].([]any)); n != 1 {
		t.Errorf("the conversation has %d messages after bad requests, want 1", n)
	}
	if r := fx.do("GET", "/api/v2/conversations/x1", nil); r.status != http.StatusNotFound {
		t.Errorf("a refused create made a conversation: %s", r)
	}
}
