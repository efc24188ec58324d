package openaichat

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/llmtest"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func ptr[T any](v T) *T { return &v }

// field reads a dotted path from a decoded JSON body; ok is false when it
// is absent.
func field(body map[string]any, path string) (any, bool) {
	var cur any = body
	for _, k := range strings.Split(path, ".") {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[k]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i := 0
			for _, ch := range k {
				i = i*10 + int(ch-'0')
			}
			if i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// TestRequestBody checks the body and headers sent for each setting.
// want maps a dotted path to its JSON value; a nil value means absent.
func TestRequestBody(t *testing.T) {
	weather := llm.Tool{Name: "get_weather", Description: "Weather for a city.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]}`)}
	tests := []struct {
		name    string
		model   func(m *llm.Model)
		opts    llm.StreamOptions
		tools   []llm.Tool
		want    map[string]any
		headers map[string]string // "" means absent
	}{
		{
			name: "defaults for an OpenAI chat model",
			want: map[string]any{
				"model": "gpt-4o-mini", "stream": true, "stream_options.include_usage": true,
				"max_completion_tokens": 16384.0, "max_tokens": nil, "store": false,
				"messages.0.role": "system", "messages.0.content": "You are terse.",
				"messages.1.role": "user", "messages.1.content": "hi",
				"reasoning_effort": nil, "temperature": nil, "tools": nil, "prompt_cache_key": nil,
			},
			headers: map[string]string{"Authorization": "Bearer sk-test", "Content-Type": "application/json"},
		},
		{
			name: "max tokens, temperature and session",
			opts: llm.StreamOptions{APIKey: "sk-test", MaxTokens: 1000, Temperature: ptr(0.2), SessionID: "sess-1"},
			want: map[string]any{"max_completion_tokens": 1000.0, "temperature": 0.2, "prompt_cache_key": "sess-1"},
		},
		{
			name:  "the default cap is at most 32000",
			model: func(m *llm.Model) { m.MaxTokens = 128000 },
			want:  map[string]any{"max_completion_tokens": 32000.0},
		},
		{
			name:  "max_tokens field",
			model: func(m *llm.Model) { m.Compat = &llm.Compat{MaxTokensField: "max_tokens"} },
			want:  map[string]any{"max_tokens": 16384.0, "max_completion_tokens": nil},
		},
		{
			name:  "reasoning model with thinking",
			model: func(m *llm.Model) { m.Reasoning = true },
			opts:  llm.StreamOptions{APIKey: "sk-test", Thinking: llm.ThinkingLow},
			want:  map[string]any{"reasoning_effort": "low", "messages.0.role": "developer"},
		},
		{
			name:  "xhigh is clamped without SupportsXHigh",
			model: func(m *llm.Model) { m.Reasoning = true },
			opts:  llm.StreamOptions{APIKey: "sk-test", Thinking: llm.ThinkingXHigh},
			want:  map[string]any{"reasoning_effort": "high"},
		},
		{
			name:  "xhigh where supported",
			model: func(m *llm.Model) { m.Reasoning, m.Compat = true, &llm.Compat{SupportsXHigh: ptr(true)} },
			opts:  llm.StreamOptions{APIKey: "sk-test", Thinking: llm.ThinkingXHigh},
			want:  map[string]any{"reasoning_effort": "xhigh"},
		},
		{
			name:  "thinking off sends no effort",
			model: func(m *llm.Model) { m.Reasoning = true },
			opts:  llm.StreamOptions{APIKey: "sk-test", Thinking: llm.ThinkingOff},
			want:  map[string]any{"reasoning_effort": nil},
		},
		{
			name: "no effort for a server without reasoning_effort",
			model: func(m *llm.Model) {
				m.Reasoning, m.Compat = true, &llm.Compat{SupportsReasoningEffort: ptr(false), SupportsDeveloperRole: ptr(false)}
			},
			opts: llm.StreamOptions{APIKey: "sk-test", Thinking: llm.ThinkingHigh},
			want: map[string]any{"reasoning_effort": nil, "messages.0.role": "system"},
		},
		{
			name: "no effort for a model that does not reason",
			opts: llm.StreamOptions{APIKey: "sk-test", Thinking: llm.ThinkingHigh},
			want: map[string]any{"reasoning_effort": nil, "messages.0.role": "system"},
		},
		{
			name:  "tools",
			tools: []llm.Tool{weather, {Name: "now"}},
			want: map[string]any{
				"tools.0.type": "function", "tools.0.function.name": "get_weather", "tools.0.function.description": "Weather for a city.",
				"tools.0.function.strict": false, "tools.0.function.parameters.required.0": "city",
				"tools.1.function.parameters.type": "object", "tools.1.function.description": nil,
			},
		},
		{
			name:  "no strict field where the server does not know it",
			model: func(m *llm.Model) { m.Compat = &llm.Compat{SupportsStrictMode: ptr(false)} },
			tools: []llm.Tool{weather},
			want:  map[string]any{"tools.0.function.strict": nil, "tools.0.function.name": "get_weather"},
		},
		{
			name: "a local server",
			model: func(m *llm.Model) {
				m.Provider, m.ID = "ollama", "qwen3:8b"
				m.Compat = &llm.Compat{SupportsUsageInStreaming: ptr(false), MaxTokensField: "max_tokens"}
			},
			opts:    llm.StreamOptions{SessionID: "sess-1"},
			want:    map[string]any{"model": "qwen3:8b", "store": nil, "stream_options": nil, "prompt_cache_key": nil, "max_tokens": 16384.0},
			headers: map[string]string{"Authorization": ""},
		},
		{
			name:  "store where a compatible server says it takes it",
			model: func(m *llm.Model) { m.Provider, m.Compat = "vllm", &llm.Compat{SupportsStore: ptr(true)} },
			want:  map[string]any{"store": false},
		},
		{
			name:  "no store for OpenAI when the model says so",
			model: func(m *llm.Model) { m.Compat = &llm.Compat{SupportsStore: ptr(false)} },
			want:  map[string]any{"store": nil},
		},
		{
			name: "headers: the model's, then the request's",
			model: func(m *llm.Model) {
				m.Headers = map[string]string{"X-Title": "agentd", "HTTP-Referer": "https://example.test"}
			},
			opts:    llm.StreamOptions{APIKey: "sk-or-1", Headers: map[string]string{"X-Title": "override", "X-Trace": "t1"}},
			headers: map[string]string{"X-Title": "override", "HTTP-Referer": "https://example.test", "X-Trace": "t1", "Authorization": "Bearer sk-or-1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewServer(t)
			srv.Enqueue(wiremock.Script{Text: []string{"ok"}})
			m := chatModel(srv)
			if tt.model != nil {
				tt.model(m)
			}
			o := tt.opts
			if tt.name != "a local server" && o.APIKey == "" {
				o.APIKey = "sk-test"
			}
			c := hello()
			c.Tools = tt.tools
			r := run(t, m, c, &o, nil)
			if r.err != nil {
				t.Fatal(r.err)
			}
			req := srv.LastRequest(t)
			if req.Path != wiremock.PathChatCompletions || req.Method != "POST" {
				t.Fatalf("sent %s %s", req.Method, req.Path)
			}
			for path, want := range tt.want {
				got, ok := field(req.JSON, path)
				switch {
				case want == nil && ok:
					t.Errorf("%s = %v, want it absent", path, got)
				case want != nil && !cmp.Equal(got, want):
					t.Errorf("%s = %#v, want %#v", path, got, want)
				}
			}
			for k, want := range tt.headers {
				if got := req.Header.Get(k); got != want {
					t.Errorf("header %s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

// TestToolSchemaVerbatim checks the schema is sent as given: key order
// matters to models.
func TestToolSchemaVerbatim(t *testing.T) {
	srv := llmtest.NewServer(t)
	srv.Enqueue(wiremock.Script{Text: []string{"ok"}})
	schema := `{"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}},"required":["zeta"]}`
	c := hello()
	c.Tools = []llm.Tool{{Name: "t", Description: "d", Parameters: json.RawMessage(schema)}}
	if r := run(t, chatModel(srv), c, nil, nil); r.err != nil {
		t.Fatal(r.err)
	}
	if body := srv.LastRequest(t).Body; !bytes.Contains(body, []byte(`"parameters":`+schema)) {
		t.Fatalf("schema not sent verbatim: %s", body)
	}
}

func TestInvalidToolSchema(t *testing.T) {
	srv := llmtest.NewServer(t)
	c := hello()
	c.Tools = []llm.Tool{{Name: "broken", Parameters: json.RawMessage(`{"type":`)}}
	r := run(t, chatModel(srv), c, nil, nil)
	if r.err == nil || r.err.Kind != llm.ErrBadRequest || !strings.Contains(r.msg.ErrorMessage, `tool "broken"`) || len(srv.Requests()) != 0 {
		t.Fatalf("err %+v", r.err)
	}
}

// TestNoEnvironment proves the SDK's environment variables reach nothing:
// each is set to a value that would be visible in the request.
func TestNoEnvironment(t *testing.T) {
	env := map[string]string{
		"OPENAI_API_KEY": "sk-from-env", "OPENAI_ADMIN_KEY": "sk-admin-from-env", "OPENAI_BASE_URL": "http://127.0.0.1:9/env",
		"OPENAI_ORG_ID": "org-env", "OPENAI_PROJECT_ID": "proj-env", "OPENAI_CUSTOM_HEADERS": "X-From-Env: leaked",
		"OPENAI_WEBHOOK_SECRET": "whsec-env",
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	for _, key := range []string{"", "sk-explicit"} {
		srv := llmtest.NewServer(t)
		srv.Enqueue(wiremock.Script{Text: []string{"ok"}})
		if r := run(t, chatModel(srv), nil, &llm.StreamOptions{APIKey: key}, nil); r.err != nil {
			t.Fatalf("key %q: %v (the base URL must be the model's)", key, r.err)
		}
		h := srv.LastRequest(t).Header
		wantAuth := ""
		if key != "" {
			wantAuth = "Bearer " + key
		}
		if got := h.Get("Authorization"); got != wantAuth {
			t.Errorf("key %q: Authorization %q, want %q", key, got, wantAuth)
		}
		for _, name := range []string{"OpenAI-Organization", "OpenAI-Project", "X-From-Env"} {
			if v := h.Get(name); v != "" {
				t.Errorf("key %q: %s: %q leaked from the environment", key, name, v)
			}
		}
	}
}

// TestMessages renders conversations into request messages and compares
// them with testdata/messages/<name>.json (-update rewrites them).
func TestMessages(t *testing.T) {
	const (
		anthropic = "anthropic"
		ownModel  = "gpt-oss-120b"
	)
	m := &llm.Model{ID: ownModel, API: llm.APIOpenAICompletions, Provider: "llamacpp", BaseURL: "http://127.0.0.1:8080/v1",
		Reasoning: true, Input: []string{"text", "image"}, Compat: &llm.Compat{SupportsDeveloperRole: ptr(false)}}
	textOnly := *m
	textOnly.Input = []string{"text"}
	user := func(c ...llm.Content) llm.Message { return llm.Message{Role: llm.RoleUser, Content: c} }
	own := func(stop llm.StopReason, c ...llm.Content) llm.Message {
		return llm.Message{Role: llm.RoleAssistant, API: m.API, Provider: m.Provider, Model: m.ID, StopReason: stop, Content: c}
	}
	claude := func(stop llm.StopReason, c ...llm.Content) llm.Message {
		return llm.Message{Role: llm.RoleAssistant, API: llm.APIAnthropicMessages, Provider: anthropic, Model: "claude-sonnet-4-6", StopReason: stop, Content: c}
	}
	result := func(id, text string, isError bool, extra ...llm.Content) llm.Message {
		return llm.Message{Role: llm.RoleToolResult, ToolCallID: id, ToolName: "bash", IsError: isError, Content: append([]llm.Content{llm.Text(text)}, extra...)}
	}
	thinking := func(text, sig string) llm.Content {
		return llm.Content{Type: llm.ContentThinking, Thinking: text, ThinkingSignature: sig}
	}
	call := func(id string) llm.Content { return llm.ToolCall(id, "bash", json.RawMessage(`{"command":"ls"}`)) }
	img := llm.Image("iVBORw0KGgo=", "image/png")

	tests := []struct {
		name  string
		model *llm.Model
		msgs  []llm.Message
	}{
		{"cross-provider history", m, []llm.Message{
			user(llm.Text("list files")),
			claude(llm.StopToolUse, thinking("I should run ls.", "EqQBCkYIBxgCKkC..."), llm.Text("Listing."), call("toolu_01A09q90qw90lq917835lq9")),
			result("toolu_01A09q90qw90lq917835lq9", "a.txt\nb.txt", false),
			claude(llm.StopStop, llm.Content{Type: llm.ContentThinking, ThinkingSignature: "opaque", Redacted: true}, llm.Text("Two files.")),
			user(llm.Text("thanks")),
		}},
		{"same-model reasoning", m, []llm.Message{
			user(llm.Text("list files")),
			own(llm.StopToolUse, thinking("Need ls.", "reasoning_content"), thinking("Then answer.", "reasoning_content"), call("call_1")),
			result("call_1", "a.txt", false),
			own(llm.StopStop, thinking("unknown field", "sig-from-elsewhere"), llm.Text("One file.")),
		}},
		{"failed turns are left out", m, []llm.Message{
			user(llm.Text("go")),
			own(llm.StopError, llm.Text("half"), call("call_err")),
			result("call_err", "ran anyway", false),
			own(llm.StopAborted, call("call_ab")),
			user(llm.Text("try again")),
			own(llm.StopStop, llm.Text("done")),
		}},
		{"unanswered tool calls", m, []llm.Message{
			user(llm.Text("two things")),
			own(llm.StopToolUse, call("call_a"), call("call_b")),
			result("call_b", "b done", false),
			result("call_b", "duplicate", false),
			user(llm.Text("stop")),
			own(llm.StopToolUse, call("call_c")),
		}},
		{"tool call ids from the Responses API", m, []llm.Message{
			user(llm.Text("go")),
			llm.Message{Role: llm.RoleAssistant, API: llm.APIOpenAIResponses, Provider: "openai", Model: "gpt-5", StopReason: llm.StopToolUse,
				Content: []llm.Content{call("call_Xy7|fc_68a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1+/=")}},
			result("call_Xy7|fc_68a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1+/=", "ok", false),
			result("call_with spaces and a very long tail that goes past forty bytes", "orphan", false),
		}},
		{"images and errors", m, []llm.Message{
			user(llm.Text("what is this?"), img),
			own(llm.StopToolUse, call("call_shot")),
			result("call_shot", "", true, img),
			own(llm.StopToolUse, call("call_fail")),
			result("call_fail", "exit status 1", true),
			own(llm.StopToolUse, call("call_fail2")),
			result("call_fail2", "Error: already says so", true),
		}},
		{"images to a text-only model", &textOnly, []llm.Message{
			user(img),
			user(llm.Text("and this"), img),
			own(llm.StopToolUse, call("call_shot")),
			result("call_shot", "", false, img),
		}},
		{"empty messages", m, []llm.Message{
			user(llm.Text("hi")),
			own(llm.StopStop, llm.Text("  ")),
			claude(llm.StopStop, thinking(" ", "sig")),
			user(),
			user(llm.Text("again")),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &llm.Context{SystemPrompt: "Be brief.", Messages: tt.msgs}
			got, err := json.MarshalIndent(convertMessages(tt.model, c, tt.model.CompatOrDefault()), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", "messages", strings.ReplaceAll(tt.name, " ", "-")+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("%s differs (-want +got):\n%s", path, diff)
			}
			checkPairing(t, got)
		})
	}
}

// checkPairing enforces the API's rule: every tool message answers a call
// of the assistant message before it, and every call is answered before
// anything else is said.
func checkPairing(t *testing.T, messages []byte) {
	t.Helper()
	var msgs []struct {
		Role       string `json:"role"`
		ToolCallID string `json:"tool_call_id"`
		ToolCalls  []struct {
			ID string `json:"id"`
		} `json:"tool_calls"`
	}
	if err := json.Unmarshal(messages, &msgs); err != nil {
		t.Fatal(err)
	}
	pending := map[string]bool{}
	for i, msg := range msgs {
		if msg.Role == "tool" {
			if !pending[msg.ToolCallID] {
				t.Errorf("message %d answers %q, which no open call has", i, msg.ToolCallID)
			}
			delete(pending, msg.ToolCallID)
			continue
		}
		if len(pending) > 0 {
			t.Errorf("message %d (%s) comes before calls %v are answered", i, msg.Role, pending)
		}
		for _, c := range msg.ToolCalls {
			if len(c.ID) > maxToolCallIDSize {
				t.Errorf("tool call id %q is too long", c.ID)
			}
			pending[c.ID] = true
		}
	}
	if len(pending) > 0 {
		t.Errorf("calls %v are never answered", pending)
	}
}

func TestNormalizeToolCallID(t *testing.T) {
	tests := []struct{ in, want string }{
		{"call_abc123", "call_abc123"},
		{"toolu_01A09q90qw90lq917835lq9", "toolu_01A09q90qw90lq917835lq9"},
		{"call_Xy7|fc_0123456789", "call_Xy7"},
		{"a b/c+d=", "a_b_c_d_"},
		{strings.Repeat("x", 64), strings.Repeat("x", 40)},
	}
	for _, tt := range tests {
		if got := normalizeToolCallID(tt.in); got != tt.want {
			t.Errorf("normalizeToolCallID(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
