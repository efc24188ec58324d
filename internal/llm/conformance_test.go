package llm_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/anthropic"
	"github.com/agentd-dev/agentd/internal/llm/llmtest"
	"github.com/agentd-dev/agentd/internal/llm/openaichat"
	"github.com/agentd-dev/agentd/internal/llm/openairesponses"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// conformanceProvider is one wire API under the shared conformance table.
type conformanceProvider struct {
	name     string
	provider llm.Provider
	model    func(srv *wiremock.Server) *llm.Model
	// cacheWrite: the API reports cache-creation tokens.
	cacheWrite bool
}

func conformanceProviders() []conformanceProvider {
	cost := llm.ModelCost{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75}
	return []conformanceProvider{
		{name: "anthropic-messages", provider: anthropic.New(nil), cacheWrite: true, model: func(srv *wiremock.Server) *llm.Model {
			return &llm.Model{ID: "claude-test", Name: "Claude Test", API: llm.APIAnthropicMessages, Provider: "anthropic",
				BaseURL: srv.AnthropicURL(), Reasoning: true, Input: []string{"text", "image"}, Cost: cost, ContextWindow: 200000, MaxTokens: 64000}
		}},
		{name: "openai-completions", provider: openaichat.New(nil), model: func(srv *wiremock.Server) *llm.Model {
			return &llm.Model{ID: "gpt-test", Name: "GPT Test", API: llm.APIOpenAICompletions, Provider: "openai",
				BaseURL: srv.OpenAIURL(), Reasoning: true, Input: []string{"text", "image"}, Cost: cost, ContextWindow: 400000, MaxTokens: 128000}
		}},
		{name: "openai-responses", provider: openairesponses.New(nil), model: func(srv *wiremock.Server) *llm.Model {
			return &llm.Model{ID: "gpt-test", Name: "GPT Test", API: llm.APIOpenAIResponses, Provider: "openai",
				BaseURL: srv.OpenAIURL(), Reasoning: true, Input: []string{"text", "image"}, Cost: cost, ContextWindow: 400000, MaxTokens: 128000}
		}},
	}
}

// run streams one scripted answer and returns the event types, the final
// message and the error.
type runResult struct {
	types   []string
	events  []llm.Event
	partial []string // partial text at each text_delta
	msg     *llm.Message
	err     *llm.Error
}

type runOpts struct {
	opts    llm.StreamOptions
	cancel  func(ev llm.Event) bool // cancel the context after this event
	compat  *llm.Compat
	request *llm.Context
}

func runScript(t *testing.T, p conformanceProvider, sc wiremock.Script, ro runOpts) (runResult, *wiremock.Server) {
	t.Helper()
	srv := llmtest.NewServer(t)
	srv.Enqueue(sc)
	m := p.model(srv)
	m.Compat = ro.compat
	c := ro.request
	if c == nil {
		c = &llm.Context{SystemPrompt: "You are terse.", Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Content{llm.Text("hi")}, Timestamp: 1}}}
	}
	if ro.opts.APIKey == "" {
		ro.opts.APIKey = "test-key"
	}
	// A hang guard only: every case ends long before it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := p.provider.Stream(ctx, m, c, &ro.opts)
	defer s.Close()
	var r runResult
	for s.Next() {
		ev := s.Event()
		r.types = append(r.types, string(ev.Type))
		r.events = append(r.events, ev)
		if ev.Type == llm.EventTextDelta {
			r.partial = append(r.partial, s.Partial().TextContent())
		}
		if ro.cancel != nil && ro.cancel(ev) {
			cancel()
		}
	}
	if ctx.Err() == context.DeadlineExceeded {
		t.Fatal("stream did not end")
	}
	r.msg = s.Result().Clone()
	r.err = s.Err()
	return r, srv
}

func toolCall(id, name string, args ...string) wiremock.ToolCall {
	return wiremock.ToolCall{ID: id, Name: name, Args: args}
}

// checkSequence verifies the event grammar: start, then well-nested
// block events, then exactly one done or error.
func checkSequence(t *testing.T, r runResult) {
	t.Helper()
	llmtest.CheckGrammar(t, r.events)
}

func count(types []string, want string) int {
	n := 0
	for _, t := range types {
		if t == want {
			n++
		}
	}
	return n
}

func TestConformance(t *testing.T) {
	for _, env := range []string{"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"} {
		t.Setenv(env, "")
	}
	for _, p := range conformanceProviders() {
		t.Run(p.name, func(t *testing.T) {
			t.Run("plain text", func(t *testing.T) {
				r, _ := runScript(t, p, wiremock.Script{Text: []string{"Hel", "lo", " world"}, Usage: &wiremock.Usage{Input: 10, Output: 3}}, runOpts{})
				checkSequence(t, r)
				if r.err != nil || r.msg.StopReason != llm.StopStop || r.msg.TextContent() != "Hello world" {
					t.Fatalf("got %+v err %v", r.msg, r.err)
				}
				if count(r.types, "text_delta") != 3 || strings.Join(r.partial, "|") != "Hel|Hello|Hello world" {
					t.Fatalf("deltas %v partials %q", r.types, r.partial)
				}
				if r.msg.API != llm.API(p.name) || r.msg.Model == "" || r.msg.ResponseID == "" || r.msg.Timestamp == 0 {
					t.Fatalf("message identity %+v", r.msg)
				}
			})
			t.Run("thinking", func(t *testing.T) {
				r, srv := runScript(t, p, wiremock.Script{Thinking: []string{"Let me", " think."}, ThinkingSignature: "sig-1", Text: []string{"42"}},
					runOpts{opts: llm.StreamOptions{Thinking: llm.ThinkingHigh}})
				checkSequence(t, r)
				if len(r.msg.Content) != 2 || r.msg.Content[0].Type != llm.ContentThinking || r.msg.Content[0].Thinking != "Let me think." || r.msg.Content[1].Text != "42" {
					t.Fatalf("content %+v", r.msg.Content)
				}
				if count(r.types, "thinking_delta") != 2 || count(r.types, "thinking_end") != 1 {
					t.Fatalf("events %v", r.types)
				}
				body := string(srv.LastRequest(t).Body)
				if !strings.Contains(body, "thinking") && !strings.Contains(body, "reasoning") {
					t.Fatalf("thinking level not sent: %s", body)
				}
			})
			t.Run("one tool call", func(t *testing.T) {
				r, _ := runScript(t, p, wiremock.Script{Text: []string{"Running it."}, ToolCalls: []wiremock.ToolCall{toolCall("call_1", "bash", `{"comm`, `and": "ls -`, `la"}`)}}, runOpts{})
				checkSequence(t, r)
				if r.msg.StopReason != llm.StopToolUse {
					t.Fatalf("stop %s", r.msg.StopReason)
				}
				calls := r.msg.ToolCalls()
				if len(calls) != 1 || calls[0].Name != "bash" || calls[0].ID == "" || !jsonEqual(calls[0].Arguments, `{"command":"ls -la"}`) {
					t.Fatalf("calls %+v", calls)
				}
				if count(r.types, "toolcall_delta") < 3 {
					t.Fatalf("arguments not streamed: %v", r.types)
				}
				for _, ev := range r.events {
					if ev.Type == llm.EventToolCallEnd && !jsonEqual(ev.ToolCall.Arguments, `{"command":"ls -la"}`) {
						t.Fatalf("toolcall_end args %s", ev.ToolCall.Arguments)
					}
				}
			})
			t.Run("several tool calls", func(t *testing.T) {
				r, _ := runScript(t, p, wiremock.Script{ToolCalls: []wiremock.ToolCall{
					toolCall("call_a", "read", `{"path":`, `"a.txt"}`),
					toolCall("call_b", "read", `{"path":"b.txt"}`),
					toolCall("call_c", "bash", `{"command":`, `"echo 1"`, `}`),
				}}, runOpts{})
				checkSequence(t, r)
				calls := r.msg.ToolCalls()
				if len(calls) != 3 || r.msg.StopReason != llm.StopToolUse {
					t.Fatalf("calls %+v stop %s", calls, r.msg.StopReason)
				}
				want := []string{`{"path":"a.txt"}`, `{"path":"b.txt"}`, `{"command":"echo 1"}`}
				ids := map[string]bool{}
				for i, c := range calls {
					if !jsonEqual(c.Arguments, want[i]) {
						t.Errorf("call %d args %s, want %s", i, c.Arguments, want[i])
					}
					ids[c.ID] = true
				}
				if len(ids) != 3 || count(r.types, "toolcall_end") != 3 {
					t.Fatalf("ids %v events %v", ids, r.types)
				}
			})
			t.Run("usage and cost", func(t *testing.T) {
				u := &wiremock.Usage{Input: 1000, Output: 500, CacheRead: 2000}
				if p.cacheWrite {
					u.CacheWrite = 400
				}
				r, _ := runScript(t, p, wiremock.Script{Text: []string{"ok"}, Usage: u}, runOpts{})
				got := r.msg.Usage
				if got.Input != u.Input || got.Output != u.Output || got.CacheRead != u.CacheRead || got.CacheWrite != u.CacheWrite {
					t.Fatalf("usage %+v, want %+v", got, u)
				}
				want := (1000*3 + 500*15 + 2000*0.3 + float64(u.CacheWrite)*3.75) / 1e6
				if d := got.Cost.Total - want; d > 1e-12 || d < -1e-12 || got.TotalTokens != u.Input+u.Output+u.CacheRead+u.CacheWrite {
					t.Fatalf("cost %+v, want total %v", got, want)
				}
			})
			t.Run("abort mid-stream", func(t *testing.T) {
				r, _ := runScript(t, p, wiremock.Script{Text: []string{"one ", "two ", "three"}, Delay: 10 * time.Second},
					runOpts{cancel: func(ev llm.Event) bool { return ev.Type == llm.EventTextDelta }})
				checkSequence(t, r)
				if r.msg.StopReason != llm.StopAborted || r.err == nil || r.err.Kind != llm.ErrAborted || r.msg.TextContent() != "one " {
					t.Fatalf("got stop %s err %v text %q", r.msg.StopReason, r.err, r.msg.TextContent())
				}
				if r.msg.ErrorMessage != "Request was aborted" {
					t.Fatalf("error message %q", r.msg.ErrorMessage)
				}
			})
			t.Run("http errors", func(t *testing.T) {
				tests := []struct {
					status    int
					errType   string
					msg       string
					kind      llm.ErrorKind
					retryable bool
				}{
					{400, "invalid_request_error", "max_tokens is too large", llm.ErrBadRequest, false},
					{401, "authentication_error", "invalid x-api-key", llm.ErrAuth, false},
					{403, "permission_error", "your key lacks access", llm.ErrPermission, false},
					{404, "not_found_error", "model: claude-nope", llm.ErrNotFound, false},
					{413, "request_too_large", "Request exceeds the maximum allowed number of bytes", llm.ErrContextOverflow, false},
					{413, "", "payload too big", llm.ErrTooLarge, false},
					{429, "rate_limit_error", "Rate limit reached", llm.ErrRateLimit, true},
					{500, "api_error", "Internal server error", llm.ErrServer, true},
					{503, "api_error", "Service unavailable", llm.ErrServer, true},
					{529, "overloaded_error", "Overloaded", llm.ErrOverloaded, true},
				}
				for _, tt := range tests {
					r, _ := runScript(t, p, wiremock.Script{Status: tt.status, ErrorType: tt.errType, ErrorMessage: tt.msg}, runOpts{})
					checkSequence(t, r)
					want := strconv.Itoa(tt.status) + " " + tt.msg
					if r.msg.StopReason != llm.StopError || r.msg.ErrorMessage != want {
						t.Errorf("%d: stop %s message %q, want %q", tt.status, r.msg.StopReason, r.msg.ErrorMessage, want)
						continue
					}
					if r.err.Kind != tt.kind || r.err.Retryable() != tt.retryable || r.err.Status != tt.status {
						t.Errorf("%d %s: kind %s retryable %v status %d", tt.status, tt.errType, r.err.Kind, r.err.Retryable(), r.err.Status)
					}
				}
			})
			t.Run("retry-after", func(t *testing.T) {
				r, _ := runScript(t, p, wiremock.Script{Status: 429, ErrorType: "rate_limit_error", ErrorMessage: "slow down", RetryAfter: "7"}, runOpts{})
				if r.err == nil || r.err.RetryAfter != 7*time.Second {
					t.Fatalf("retry-after: %+v", r.err)
				}
				r, _ = runScript(t, p, wiremock.Script{Status: 529, ErrorType: "overloaded_error", ErrorMessage: "Overloaded", RetryAfterMs: "1500"}, runOpts{})
				if r.err == nil || r.err.RetryAfter != 1500*time.Millisecond {
					t.Fatalf("retry-after-ms: %+v", r.err)
				}
			})
			t.Run("context overflow", func(t *testing.T) {
				r, _ := runScript(t, p, wiremock.Script{Status: 400, ErrorType: "invalid_request_error", ErrorMessage: "prompt is too long: 250000 tokens > 200000 maximum"}, runOpts{})
				if r.err == nil || !r.err.ContextOverflow() {
					t.Fatalf("overflow not recognised: %+v", r.err)
				}
			})
			t.Run("cut mid-stream", func(t *testing.T) {
				r, _ := runScript(t, p, wiremock.Script{Text: []string{"a", "b", "c", "d", "e", "f"}, CutAfter: 5}, runOpts{})
				checkSequence(t, r)
				if r.msg.StopReason != llm.StopError || r.err.Kind != llm.ErrStream || !r.err.Retryable() || r.msg.TextContent() == "" {
					t.Fatalf("stop %s err %+v text %q", r.msg.StopReason, r.err, r.msg.TextContent())
				}
			})
			t.Run("malformed chunk", func(t *testing.T) {
				r, _ := runScript(t, p, wiremock.Script{Text: []string{"a", "b", "c", "d", "e", "f"}, MalformedAfter: 5}, runOpts{})
				checkSequence(t, r)
				if r.msg.StopReason != llm.StopError || r.err.Kind != llm.ErrStream || !strings.Contains(r.msg.ErrorMessage, "malformed") {
					t.Fatalf("stop %s err %+v", r.msg.StopReason, r.err)
				}
			})
			t.Run("idle stream", func(t *testing.T) {
				r, _ := runScript(t, p, wiremock.Script{Text: []string{"a", "b", "c", "d", "e", "f"}, HangAfter: 5},
					runOpts{opts: llm.StreamOptions{IdleTimeout: 200 * time.Millisecond}})
				checkSequence(t, r)
				if r.msg.StopReason != llm.StopError || r.err.Kind != llm.ErrIdleTimeout || !r.err.Retryable() {
					t.Fatalf("stop %s err %+v", r.msg.StopReason, r.err)
				}
			})
			t.Run("error inside the stream", func(t *testing.T) {
				r, _ := runScript(t, p, wiremock.Script{Text: []string{"partial"}, StreamError: &wiremock.StreamError{Type: "overloaded_error", Message: "Overloaded"}}, runOpts{})
				checkSequence(t, r)
				if r.msg.StopReason != llm.StopError || !strings.Contains(r.msg.ErrorMessage, "Overloaded") || !r.err.Retryable() {
					t.Fatalf("stop %s message %q err %+v", r.msg.StopReason, r.msg.ErrorMessage, r.err)
				}
			})
			t.Run("connection refused", func(t *testing.T) {
				srv := llmtest.NewServer(t)
				m := p.model(srv)
				srv.Close()
				s := p.provider.Stream(context.Background(), m, &llm.Context{Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Content{llm.Text("hi")}}}}, &llm.StreamOptions{APIKey: "k"})
				msg, err := llm.Collect(s)
				e, ok := llm.AsError(err)
				if !ok || e.Kind != llm.ErrNetwork || msg.StopReason != llm.StopError {
					t.Fatalf("got %v %+v", err, msg)
				}
			})
		})
	}
}

// TestOpenAICompatibleWithoutUsage covers servers (older vLLM, llama.cpp,
// some proxies) that ignore stream_options and never send usage.
func TestOpenAICompatibleWithoutUsage(t *testing.T) {
	no := false
	p := conformanceProviders()[1]
	r, srv := runScript(t, p, wiremock.Script{Text: []string{"fine"}, NoUsageInStream: true, Usage: &wiremock.Usage{Input: 5, Output: 1}},
		runOpts{compat: &llm.Compat{SupportsUsageInStreaming: &no, MaxTokensField: "max_tokens"}, opts: llm.StreamOptions{APIKey: "-"}})
	checkSequence(t, r)
	if r.err != nil || r.msg.StopReason != llm.StopStop || r.msg.TextContent() != "fine" || r.msg.Usage.Input != 0 {
		t.Fatalf("got %+v err %v", r.msg, r.err)
	}
	req := srv.LastRequest(t).JSON
	if _, ok := req["stream_options"]; ok {
		t.Errorf("stream_options sent to a server that does not support it: %v", req)
	}
	if _, ok := req["max_tokens"]; !ok {
		t.Errorf("max_tokens field not used: %v", req)
	}
	if _, ok := req["max_completion_tokens"]; ok {
		t.Errorf("max_completion_tokens sent: %v", req)
	}
}

func jsonEqual(a json.RawMessage, b string) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}
