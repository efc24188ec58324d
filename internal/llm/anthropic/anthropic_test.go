package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/anthropic"
	"github.com/agentd-dev/agentd/internal/llm/llmtest"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// blankEnv clears every variable the SDK would read by default, so a test
// that passes proves nothing came from the environment.
func blankEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_PROFILE", "ANTHROPIC_CUSTOM_HEADERS"} {
		t.Setenv(k, "")
	}
}

// testModel is a budget-thinking model with round prices.
func testModel(srv *wiremock.Server) *llm.Model {
	return &llm.Model{
		ID: "claude-test", Name: "Claude Test", API: llm.APIAnthropicMessages, Provider: "anthropic",
		BaseURL: srv.AnthropicURL(), Reasoning: true, Input: []string{"text", "image"},
		Cost:          llm.ModelCost{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75},
		ContextWindow: 200000, MaxTokens: 64000,
	}
}

func hi() *llm.Context {
	return &llm.Context{SystemPrompt: "You are terse.", Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Content{llm.Text("hi")}, Timestamp: 1}}}
}

type result struct {
	types   []string
	events  []llm.Event
	partial []string // the message's text at each text_delta
	args    []string // the partial arguments of tool call 0 at each toolcall_delta
	msg     *llm.Message
	err     *llm.Error
	elapsed time.Duration
}

type runOpts struct {
	model   func(*llm.Model)
	ctx     *llm.Context
	opts    llm.StreamOptions
	cancel  func(llm.Event) bool // cancel the context after this event
	noKey   bool
	timeout time.Duration
}

// run streams one scripted answer from a fresh mock and returns what came
// out and the mock, for request assertions.
func run(t *testing.T, sc wiremock.Script, ro runOpts) (result, *wiremock.Server) {
	t.Helper()
	blankEnv(t)
	srv := llmtest.NewServer(t)
	srv.Enqueue(sc)
	return runOn(t, srv, ro), srv
}

func runOn(t *testing.T, srv *wiremock.Server, ro runOpts) result {
	t.Helper()
	m := testModel(srv)
	if ro.model != nil {
		ro.model(m)
	}
	c := ro.ctx
	if c == nil {
		c = hi()
	}
	if ro.opts.APIKey == "" && !ro.noKey {
		ro.opts.APIKey = "sk-ant-api03-test"
	}
	timeout := ro.timeout
	if timeout == 0 {
		timeout = 30 * time.Second // a hang guard: every case ends long before
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	s := anthropic.New(nil).Stream(ctx, m, c, &ro.opts)
	defer s.Close()
	var r result
	for s.Next() {
		ev := s.Event()
		r.types = append(r.types, string(ev.Type))
		r.events = append(r.events, ev)
		switch ev.Type {
		case llm.EventTextDelta:
			r.partial = append(r.partial, s.Partial().TextContent())
		case llm.EventToolCallDelta:
			if calls := s.Partial().ToolCalls(); len(calls) == 1 {
				r.args = append(r.args, string(calls[0].Arguments))
			}
		}
		if ro.cancel != nil && ro.cancel(ev) {
			cancel()
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the stream did not end")
	}
	r.elapsed = time.Since(start)
	r.msg = s.Result().Clone()
	r.err = s.Err()
	return r
}

// checkSequence verifies the event grammar: start, well-nested block
// events, then exactly one done or error.
func checkSequence(t *testing.T, r result) {
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

func jsonEqual(t *testing.T, got any, want string) bool {
	t.Helper()
	var g, w any
	raw, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %s: %v", want, err)
	}
	return reflect.DeepEqual(g, w)
}

func TestPlainText(t *testing.T) {
	r, srv := run(t, wiremock.Script{Text: []string{"Hel", "lo", " world"}, ResponseID: "msg_01abc", Usage: &wiremock.Usage{Input: 10, Output: 3}}, runOpts{})
	checkSequence(t, r)
	want := []string{"start", "text_start", "text_delta", "text_delta", "text_delta", "text_end", "done"}
	if !reflect.DeepEqual(r.types, want) {
		t.Fatalf("events %v, want %v", r.types, want)
	}
	if r.err != nil || r.msg.StopReason != llm.StopStop || r.msg.TextContent() != "Hello world" {
		t.Fatalf("got %+v err %v", r.msg, r.err)
	}
	if got := strings.Join(r.partial, "|"); got != "Hel|Hello|Hello world" {
		t.Fatalf("partials %q", got)
	}
	if r.events[5].Content != "Hello world" {
		t.Fatalf("text_end content %q", r.events[5].Content)
	}
	if r.msg.API != llm.APIAnthropicMessages || r.msg.Provider != "anthropic" || r.msg.Model != "claude-test" || r.msg.ResponseID != "msg_01abc" || r.msg.Timestamp == 0 {
		t.Fatalf("identity %+v", r.msg)
	}
	req := srv.LastRequest(t)
	if req.Path != "/v1/messages" {
		t.Fatalf("path %s", req.Path)
	}
}

func TestThinkingBudget(t *testing.T) {
	temp := 0.2
	r, srv := run(t, wiremock.Script{Thinking: []string{"Let me", " think."}, ThinkingSignature: "sig-1", Text: []string{"42"}},
		runOpts{opts: llm.StreamOptions{Thinking: llm.ThinkingHigh, Temperature: &temp}})
	checkSequence(t, r)
	want := []string{"start", "thinking_start", "thinking_delta", "thinking_delta", "thinking_end", "text_start", "text_delta", "text_end", "done"}
	if !reflect.DeepEqual(r.types, want) {
		t.Fatalf("events %v", r.types)
	}
	th := r.msg.Content[0]
	if th.Type != llm.ContentThinking || th.Thinking != "Let me think." || th.ThinkingSignature != "sig-1" || th.Redacted || r.msg.Content[1].Text != "42" {
		t.Fatalf("content %+v", r.msg.Content)
	}
	body := srv.LastRequest(t).JSON
	// The default 32000 plus the high budget, under the model's 64000.
	if !jsonEqual(t, body["thinking"], `{"type":"enabled","budget_tokens":20480}`) || body["max_tokens"] != float64(32000+20480) {
		t.Fatalf("thinking %v max_tokens %v", body["thinking"], body["max_tokens"])
	}
	if _, ok := body["temperature"]; ok {
		t.Fatal("temperature sent with thinking on")
	}
	if _, ok := body["output_config"]; ok {
		t.Fatal("output_config sent in budget mode")
	}
}

func TestThinkingBudgetOptions(t *testing.T) {
	tests := []struct {
		name       string
		modelMax   int64
		maxTokens  int64
		level      llm.ThinkingLevel
		budgets    map[llm.ThinkingLevel]int64
		wantMax    float64
		wantBudget float64 // 0: no thinking sent
	}{
		{"default minimal", 64000, 0, llm.ThinkingMinimal, nil, 32000 + 1024, 1024},
		{"custom budget", 64000, 0, llm.ThinkingLow, map[llm.ThinkingLevel]int64{llm.ThinkingLow: 3000}, 35000, 3000},
		{"raised request cap", 64000, 8000, llm.ThinkingMedium, nil, 8000 + 10240, 10240},
		{"capped by the model", 16000, 0, llm.ThinkingHigh, nil, 16000, 16000 - 1024},
		{"small model keeps the minimum", 1500, 0, llm.ThinkingHigh, nil, 1500, 1024},
		{"model too small to think", 1024, 0, llm.ThinkingHigh, nil, 1024, 0},
		{"xhigh without support is high", 128000, 0, llm.ThinkingXHigh, nil, 32000 + 20480, 20480},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, srv := run(t, wiremock.Script{Text: []string{"ok"}}, runOpts{
				model: func(m *llm.Model) { m.MaxTokens = tt.modelMax },
				opts:  llm.StreamOptions{Thinking: tt.level, MaxTokens: tt.maxTokens, ThinkingBudgets: tt.budgets},
			})
			if r.err != nil {
				t.Fatal(r.err)
			}
			body := srv.LastRequest(t).JSON
			if body["max_tokens"] != tt.wantMax {
				t.Errorf("max_tokens %v, want %v", body["max_tokens"], tt.wantMax)
			}
			th, _ := body["thinking"].(map[string]any)
			if tt.wantBudget == 0 {
				if th != nil {
					t.Errorf("thinking sent: %v", th)
				}
				return
			}
			if th["type"] != "enabled" || th["budget_tokens"] != tt.wantBudget {
				t.Errorf("thinking %v, want budget %v", th, tt.wantBudget)
			}
		})
	}
}

func TestAdaptiveThinking(t *testing.T) {
	yes := true
	tests := []struct {
		level  llm.ThinkingLevel
		xhigh  bool
		effort string // "": thinking off
	}{
		{llm.ThinkingOff, false, ""},
		{llm.ThinkingMinimal, false, "low"},
		{llm.ThinkingLow, false, "low"},
		{llm.ThinkingMedium, false, "medium"},
		{llm.ThinkingHigh, false, "high"},
		{llm.ThinkingXHigh, false, "high"},
		{llm.ThinkingXHigh, true, "max"},
	}
	for _, tt := range tests {
		t.Run(string(tt.level)+"/xhigh="+strconv.FormatBool(tt.xhigh), func(t *testing.T) {
			temp := 0.5
			_, srv := run(t, wiremock.Script{Text: []string{"ok"}}, runOpts{
				model: func(m *llm.Model) {
					m.Compat = &llm.Compat{AdaptiveThinking: &yes}
					if tt.xhigh {
						m.Compat.SupportsXHigh = &yes
					}
				},
				opts: llm.StreamOptions{Thinking: tt.level, Temperature: &temp},
			})
			body := srv.LastRequest(t).JSON
			if body["max_tokens"] != float64(32000) {
				t.Errorf("max_tokens %v: adaptive thinking takes no budget", body["max_tokens"])
			}
			if tt.effort == "" {
				for _, k := range []string{"thinking", "output_config"} {
					if _, ok := body[k]; ok {
						t.Errorf("%s sent with thinking off: %v", k, body[k])
					}
				}
				if body["temperature"] != 0.5 {
					t.Errorf("temperature %v", body["temperature"])
				}
				return
			}
			if !jsonEqual(t, body["thinking"], `{"type":"adaptive","display":"summarized"}`) {
				t.Errorf("thinking %v", body["thinking"])
			}
			if !jsonEqual(t, body["output_config"], `{"effort":"`+tt.effort+`"}`) {
				t.Errorf("output_config %v, want effort %s", body["output_config"], tt.effort)
			}
			if _, ok := body["temperature"]; ok {
				t.Error("temperature sent with thinking on")
			}
		})
	}
}

func TestNonReasoningModelSendsNoThinking(t *testing.T) {
	_, srv := run(t, wiremock.Script{Text: []string{"ok"}}, runOpts{
		model: func(m *llm.Model) { m.Reasoning = false },
		opts:  llm.StreamOptions{Thinking: llm.ThinkingHigh},
	})
	if body := srv.LastRequest(t).JSON; body["thinking"] != nil || body["max_tokens"] != float64(32000) {
		t.Fatalf("body %v", body)
	}
}

func TestRedactedThinkingRoundTrip(t *testing.T) {
	r, _ := run(t, wiremock.Script{RedactedThinking: "EmwKAhgBEgy3va3pzix/LafPsn4a", Text: []string{"Done."}}, runOpts{opts: llm.StreamOptions{Thinking: llm.ThinkingLow}})
	checkSequence(t, r)
	th := r.msg.Content[0]
	if th.Type != llm.ContentThinking || !th.Redacted || th.ThinkingSignature != "EmwKAhgBEgy3va3pzix/LafPsn4a" || r.msg.TextContent() != "Done." {
		t.Fatalf("content %+v", r.msg.Content)
	}

	// The same model gets the payload back as redacted_thinking.
	srv := llmtest.NewServer(t)
	srv.Enqueue(wiremock.Script{Text: []string{"ok"}})
	c := hi()
	c.Messages = append(c.Messages, *r.msg, llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text("and?")}})
	runOn(t, srv, runOpts{ctx: c, opts: llm.StreamOptions{Thinking: llm.ThinkingLow}})
	msgs := srv.LastRequest(t).JSON["messages"].([]any)
	if !jsonEqual(t, msgs[1], `{"role":"assistant","content":[{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4a"},{"type":"text","text":"Done."}]}`) {
		t.Fatalf("assistant message sent as %v", msgs[1])
	}
}

func TestOneToolCall(t *testing.T) {
	r, _ := run(t, wiremock.Script{Text: []string{"Running it."}, ToolCalls: []wiremock.ToolCall{{ID: "toolu_01", Name: "bash", Args: []string{`{"comm`, `and": "ls -`, `la"}`}}}}, runOpts{})
	checkSequence(t, r)
	if r.err != nil || r.msg.StopReason != llm.StopToolUse {
		t.Fatalf("stop %s err %v", r.msg.StopReason, r.err)
	}
	calls := r.msg.ToolCalls()
	if len(calls) != 1 || calls[0].ID != "toolu_01" || calls[0].Name != "bash" || string(calls[0].Arguments) != `{"command":"ls -la"}` {
		t.Fatalf("calls %+v", calls)
	}
	// The empty partial_json the API opens with is not an event.
	if n := count(r.types, "toolcall_delta"); n != 3 {
		t.Fatalf("toolcall_delta %d: %v", n, r.types)
	}
	if want := []string{`{}`, `{"command":"ls -"}`, `{"command":"ls -la"}`}; !reflect.DeepEqual(r.args, want) {
		t.Fatalf("partial arguments %q, want %q", r.args, want)
	}
	end := r.events[len(r.events)-2]
	if end.Type != llm.EventToolCallEnd || end.ToolCall == nil || string(end.ToolCall.Arguments) != `{"command":"ls -la"}` {
		t.Fatalf("toolcall_end %+v", end)
	}
}

func TestSeveralToolCalls(t *testing.T) {
	r, _ := run(t, wiremock.Script{ToolCalls: []wiremock.ToolCall{
		{ID: "toolu_a", Name: "read", Args: []string{`{"path":`, `"a.txt"}`}},
		{ID: "toolu_b", Name: "read", Args: []string{`{"path":"b.txt"}`}},
		{ID: "toolu_c", Name: "bash", Args: []string{`{"command":`, `"echo 1"`, `}`}},
	}}, runOpts{})
	checkSequence(t, r)
	calls := r.msg.ToolCalls()
	if len(calls) != 3 || r.msg.StopReason != llm.StopToolUse {
		t.Fatalf("calls %+v stop %s", calls, r.msg.StopReason)
	}
	want := []struct{ id, args string }{{"toolu_a", `{"path":"a.txt"}`}, {"toolu_b", `{"path":"b.txt"}`}, {"toolu_c", `{"command":"echo 1"}`}}
	for i, c := range calls {
		if c.ID != want[i].id || string(c.Arguments) != want[i].args {
			t.Errorf("call %d: %s %s, want %+v", i, c.ID, c.Arguments, want[i])
		}
	}
	if count(r.types, "toolcall_end") != 3 || count(r.types, "toolcall_delta") != 6 {
		t.Fatalf("events %v", r.types)
	}
}

func TestUsageAndCost(t *testing.T) {
	r, _ := run(t, wiremock.Script{Text: []string{"ok"}, Usage: &wiremock.Usage{Input: 1000, Output: 500, CacheRead: 2000, CacheWrite: 400}}, runOpts{})
	u := r.msg.Usage
	if u.Input != 1000 || u.Output != 500 || u.CacheRead != 2000 || u.CacheWrite != 400 || u.TotalTokens != 3900 {
		t.Fatalf("usage %+v", u)
	}
	want := (1000*3 + 500*15 + 2000*0.3 + 400*3.75) / 1e6
	if d := u.Cost.Total - want; d > 1e-12 || d < -1e-12 {
		t.Fatalf("cost %+v, want total %v", u.Cost, want)
	}
}

func TestStopReasons(t *testing.T) {
	tests := []struct {
		stop     string
		tools    bool
		want     llm.StopReason
		errorMsg string
	}{
		{"stop", false, llm.StopStop, ""},
		{"stop_sequence", false, llm.StopStop, ""},
		{"pause_turn", false, llm.StopStop, ""},
		{"length", false, llm.StopLength, ""},
		{"model_context_window_exceeded", false, llm.StopLength, ""},
		{"toolUse", true, llm.StopToolUse, ""},
		{"refusal", false, llm.StopError, "the model refused to answer this request"},
	}
	for _, tt := range tests {
		t.Run(tt.stop, func(t *testing.T) {
			sc := wiremock.Script{Text: []string{"I "}, Stop: tt.stop}
			if tt.tools {
				sc.ToolCalls = []wiremock.ToolCall{{ID: "toolu_1", Name: "ls", Args: []string{"{}"}}}
			}
			r, _ := run(t, sc, runOpts{})
			checkSequence(t, r)
			if r.msg.StopReason != tt.want || r.msg.ErrorMessage != tt.errorMsg {
				t.Fatalf("stop %s message %q, want %s %q", r.msg.StopReason, r.msg.ErrorMessage, tt.want, tt.errorMsg)
			}
			if tt.errorMsg != "" && (r.err.Retryable() || r.msg.TextContent() != "I ") {
				t.Fatalf("refusal: %+v text %q", r.err, r.msg.TextContent())
			}
		})
	}
}

func TestAbortMidStream(t *testing.T) {
	r, _ := run(t, wiremock.Script{Text: []string{"one ", "two ", "three"}, Delay: 10 * time.Second},
		runOpts{cancel: func(ev llm.Event) bool { return ev.Type == llm.EventTextDelta }})
	checkSequence(t, r)
	if r.msg.StopReason != llm.StopAborted || r.err == nil || r.err.Kind != llm.ErrAborted || r.msg.TextContent() != "one " || r.msg.ErrorMessage != "Request was aborted" {
		t.Fatalf("stop %s err %v text %q", r.msg.StopReason, r.err, r.msg.TextContent())
	}
	if r.elapsed > 5*time.Second {
		t.Fatalf("abort took %s", r.elapsed)
	}
}

func TestHTTPErrors(t *testing.T) {
	tests := []struct {
		status    int
		errType   string
		msg       string
		kind      llm.ErrorKind
		retryable bool
	}{
		{400, "invalid_request_error", "max_tokens: 300000 > 64000, which is the maximum allowed number of output tokens for claude-test", llm.ErrBadRequest, false},
		{401, "authentication_error", "invalid x-api-key", llm.ErrAuth, false},
		{403, "permission_error", "Your API key does not have permission to use the specified resource.", llm.ErrPermission, false},
		{404, "not_found_error", "model: claude-nope", llm.ErrNotFound, false},
		{413, "request_too_large", "Request exceeds the maximum allowed number of bytes.", llm.ErrContextOverflow, false},
		{413, "", "payload too big", llm.ErrTooLarge, false},
		{429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit", llm.ErrRateLimit, true},
		{500, "api_error", "Internal server error", llm.ErrServer, true},
		{503, "api_error", "Service unavailable", llm.ErrServer, true},
		{529, "overloaded_error", "Overloaded", llm.ErrOverloaded, true},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.status)+tt.errType, func(t *testing.T) {
			r, _ := run(t, wiremock.Script{Status: tt.status, ErrorType: tt.errType, ErrorMessage: tt.msg}, runOpts{})
			checkSequence(t, r)
			if want := strconv.Itoa(tt.status) + " " + tt.msg; r.msg.StopReason != llm.StopError || r.msg.ErrorMessage != want {
				t.Fatalf("stop %s message %q, want %q", r.msg.StopReason, r.msg.ErrorMessage, want)
			}
			if r.err.Kind != tt.kind || r.err.Retryable() != tt.retryable || r.err.Status != tt.status {
				t.Fatalf("kind %s retryable %v status %d", r.err.Kind, r.err.Retryable(), r.err.Status)
			}
			if r.err.Err == nil {
				t.Fatal("the SDK error is not kept as the cause")
			}
		})
	}
}

// TestHTTPErrorWithoutJSONBody covers a proxy in front of the API that
// answers with its own page or a short text.
func TestHTTPErrorWithoutJSONBody(t *testing.T) {
	blankEnv(t)
	tests := []struct {
		status      int
		contentType string
		body        string
		want        string
	}{
		{502, "text/html", "<html><body><h1>502 Bad Gateway</h1></body></html>", "502 Bad Gateway"},
		{503, "text/plain", "upstream connect error\n", "503 upstream connect error"},
		{500, "application/json", "", "500 Internal Server Error"},
	}
	for _, tt := range tests {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", tt.contentType)
			w.WriteHeader(tt.status)
			_, _ = io.WriteString(w, tt.body)
		}))
		m := &llm.Model{ID: "claude-test", API: llm.APIAnthropicMessages, Provider: "anthropic", BaseURL: hs.URL}
		msg, err := llm.Collect(anthropic.New(nil).Stream(context.Background(), m, hi(), &llm.StreamOptions{APIKey: "k"}))
		hs.Close()
		e, ok := llm.AsError(err)
		if !ok || e.Kind != llm.ErrServer || msg.ErrorMessage != tt.want {
			t.Errorf("%d: err %+v message %q, want %q", tt.status, err, msg.ErrorMessage, tt.want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	r, _ := run(t, wiremock.Script{Status: 429, ErrorType: "rate_limit_error", ErrorMessage: "slow down", RetryAfter: "7"}, runOpts{})
	if r.err == nil || r.err.RetryAfter != 7*time.Second {
		t.Fatalf("retry-after: %+v", r.err)
	}
	r, _ = run(t, wiremock.Script{Status: 529, ErrorType: "overloaded_error", ErrorMessage: "Overloaded", RetryAfterMs: "1500"}, runOpts{})
	if r.err == nil || r.err.RetryAfter != 1500*time.Millisecond {
		t.Fatalf("retry-after-ms: %+v", r.err)
	}
}

func TestContextOverflow(t *testing.T) {
	r, _ := run(t, wiremock.Script{Status: 400, ErrorType: "invalid_request_error", ErrorMessage: "prompt is too long: 250000 tokens > 200000 maximum"}, runOpts{})
	if r.err == nil || !r.err.ContextOverflow() || r.err.Retryable() {
		t.Fatalf("overflow not recognised: %+v", r.err)
	}
}

// truncated is a stream that ends cleanly without message_stop, as a
// proxy that drops the upstream connection may end it.
const truncated = `event: message_start
data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":5,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}

`

func TestBrokenStreams(t *testing.T) {
	text := []string{"a", "b", "c", "d", "e", "f"}
	tests := []struct {
		name    string
		sc      wiremock.Script
		opts    llm.StreamOptions
		kind    llm.ErrorKind
		message string
	}{
		// The mock sends one frame per delta, then the end.
		{"cut", wiremock.Script{Text: text, CutAfter: 5}, llm.StreamOptions{}, llm.ErrStream, "the stream was cut off"},
		{"cut before the end", wiremock.Script{Text: text, CutAfter: 6}, llm.StreamOptions{}, llm.ErrStream, "the stream was cut off"},
		{"ended before message_stop", wiremock.Script{Raw: []byte(truncated)}, llm.StreamOptions{}, llm.ErrStream, "the stream ended before the message was complete"},
		{"malformed", wiremock.Script{Text: text, MalformedAfter: 5}, llm.StreamOptions{}, llm.ErrStream, "malformed"},
		// 1 s, not less: a busy machine that stalls the reader between
		// frames already sent must not fire the idle timeout early.
		{"idle", wiremock.Script{Text: text, HangAfter: 5}, llm.StreamOptions{IdleTimeout: time.Second}, llm.ErrIdleTimeout, "sent nothing"},
		{"idle before the first byte", wiremock.Script{Text: text, FirstDelay: 10 * time.Second}, llm.StreamOptions{IdleTimeout: 200 * time.Millisecond}, llm.ErrIdleTimeout, "sent nothing"},
		{"error event", wiremock.Script{Text: text, StreamError: &wiremock.StreamError{Type: "overloaded_error", Message: "Overloaded"}}, llm.StreamOptions{}, llm.ErrOverloaded, "overloaded_error: Overloaded"},
		{"api error event", wiremock.Script{Text: text, StreamError: &wiremock.StreamError{Type: "api_error", Message: "Internal server error"}}, llm.StreamOptions{}, llm.ErrServer, "api_error: Internal server error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := run(t, tt.sc, runOpts{opts: tt.opts})
			checkSequence(t, r)
			if r.msg.StopReason != llm.StopError || r.err.Kind != tt.kind || !r.err.Retryable() || !strings.Contains(r.msg.ErrorMessage, tt.message) {
				t.Fatalf("stop %s err %+v message %q", r.msg.StopReason, r.err, r.msg.ErrorMessage)
			}
			if tt.name != "idle before the first byte" && r.msg.TextContent() == "" {
				t.Fatal("partial text lost")
			}
			if r.elapsed > 30*time.Second { // a hang, not slowness
				t.Fatalf("took %s", r.elapsed)
			}
		})
	}
}

func TestMalformedChunkIsSyntaxError(t *testing.T) {
	r, _ := run(t, wiremock.Script{Text: []string{"a", "b", "c"}, MalformedAfter: 2}, runOpts{})
	var se *json.SyntaxError
	if r.err == nil || !errors.As(r.err, &se) {
		t.Fatalf("err %+v does not wrap a *json.SyntaxError", r.err)
	}
}

func TestConnectionRefused(t *testing.T) {
	blankEnv(t)
	srv := llmtest.NewServer(t)
	m := testModel(srv)
	srv.Close()
	msg, err := llm.Collect(anthropic.New(nil).Stream(context.Background(), m, hi(), &llm.StreamOptions{APIKey: "k"}))
	e, ok := llm.AsError(err)
	if !ok || e.Kind != llm.ErrNetwork || msg.StopReason != llm.StopError {
		t.Fatalf("got %v %+v", err, msg)
	}
}

func TestReferenceStreams(t *testing.T) {
	tests := []struct {
		file  string
		check func(t *testing.T, r result)
	}{
		{"reference-tool-use.sse", func(t *testing.T, r result) {
			calls := r.msg.ToolCalls()
			if r.msg.StopReason != llm.StopToolUse || len(calls) != 1 || calls[0].ID != "toolu_01T1x1fJ34qAmk2tNTrN7Up6" || calls[0].Name != "get_weather" ||
				string(calls[0].Arguments) != `{"location":"San Francisco, CA","unit":"fahrenheit"}` {
				t.Fatalf("stop %s calls %+v", r.msg.StopReason, calls)
			}
			if r.msg.TextContent() != "Okay, let's check the weather for San Francisco, CA:" || r.msg.ResponseID != "msg_014p7gG3wDgGV9EUtLvnow3U" {
				t.Fatalf("message %+v", r.msg)
			}
			// message_delta carries only output_tokens: the input count of
			// message_start stays.
			if u := r.msg.Usage; u.Input != 472 || u.Output != 89 {
				t.Fatalf("usage %+v", u)
			}
		}},
		{"reference-thinking.sse", func(t *testing.T, r result) {
			th := r.msg.Content[0]
			if r.msg.StopReason != llm.StopStop || th.Type != llm.ContentThinking || !strings.HasSuffix(th.Thinking, "So the GCD is 21.") || !strings.HasPrefix(th.ThinkingSignature, "EqQBCgIYAhIM") {
				t.Fatalf("message %+v", r.msg)
			}
			if u := r.msg.Usage; u.Input != 42 || u.CacheRead != 1800 || u.Output != 118 {
				t.Fatalf("usage %+v", u)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			raw, err := os.ReadFile("../llmtest/testdata/anthropic/" + tt.file)
			if err != nil {
				t.Fatal(err)
			}
			r, _ := run(t, wiremock.Script{Raw: raw}, runOpts{})
			checkSequence(t, r)
			if r.err != nil {
				t.Fatal(r.err)
			}
			tt.check(t, r)
		})
	}
}

// TestUnknownBlocksAndEvents covers what a newer API may send: server
// tool blocks, unknown delta types and events, citations.
func TestUnknownBlocksAndEvents(t *testing.T) {
	raw := `event: message_start
data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":5,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"query\":\"go\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: something_new
data: {"type":"something_new","x":1}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":"Go "}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"citations_delta","citation":{"type":"web_search_result_location","url":"https://go.dev"}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"is fun."}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_9","name":"read","input":{"path":"a.go"}}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":9}}

event: message_stop
data: {"type":"message_stop"}

`
	r, _ := run(t, wiremock.Script{Raw: []byte(raw)}, runOpts{})
	checkSequence(t, r)
	if r.err != nil || len(r.msg.Content) != 2 || r.msg.TextContent() != "Go is fun." {
		t.Fatalf("err %v content %+v", r.err, r.msg.Content)
	}
	// A tool call whose input came whole with content_block_start.
	if c := r.msg.Content[1]; c.Type != llm.ContentToolCall || string(c.Arguments) != `{"path":"a.go"}` || r.msg.StopReason != llm.StopToolUse {
		t.Fatalf("tool call %+v", c)
	}
}

// png is a 1x1 transparent PNG.
const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="

func TestRequestBody(t *testing.T) {
	const model = "claude-test"
	c := &llm.Context{
		SystemPrompt: "You are terse.",
		Tools: []llm.Tool{
			{Name: "read", Description: "Read a file.", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"limit":{"type":"integer"}},"required":["path"],"additionalProperties":false}`)},
			{Name: "bash", Description: "Run a command.", Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)},
		},
		Messages: []llm.Message{
			{Role: llm.RoleUser, Content: []llm.Content{llm.Text("What is in this picture?"), llm.Image(png, "image/png")}},
			{Role: llm.RoleAssistant, API: llm.APIAnthropicMessages, Provider: "anthropic", Model: model, StopReason: llm.StopToolUse, Content: []llm.Content{
				{Type: llm.ContentThinking, Thinking: "Look first.", ThinkingSignature: "sig-a"},
				llm.Text("Let me look."),
				llm.ToolCall("toolu_1", "read", json.RawMessage(`{"path":"a.png"}`)),
				llm.ToolCall("toolu_2", "bash", json.RawMessage(`{"command":"false"}`)),
			}},
			{Role: llm.RoleToolResult, ToolCallID: "toolu_1", ToolName: "read", Content: []llm.Content{llm.Text("an image:"), llm.Image(png, "image/png")}},
			{Role: llm.RoleToolResult, ToolCallID: "toolu_2", ToolName: "bash", IsError: true, Content: []llm.Content{llm.Text("exit status 1")}},
			{Role: llm.RoleAssistant, API: llm.APIAnthropicMessages, Provider: "anthropic", Model: model, StopReason: llm.StopStop, Content: []llm.Content{llm.Text("A red dot.")}},
			{Role: llm.RoleUser, Content: []llm.Content{llm.Text("Thanks")}},
		},
	}
	_, srv := run(t, wiremock.Script{Text: []string{"ok"}}, runOpts{ctx: c, opts: llm.StreamOptions{MaxTokens: 1000}})
	req := srv.LastRequest(t)
	want := `{
		"model": "claude-test",
		"max_tokens": 1000,
		"stream": true,
		"system": [{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}}],
		"tools": [
			{"name":"read","description":"Read a file.","input_schema":{"type":"object","properties":{"path":{"type":"string"},"limit":{"type":"integer"}},"required":["path"],"additionalProperties":false}},
			{"name":"bash","description":"Run a command.","input_schema":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]},"cache_control":{"type":"ephemeral"}}
		],
		"messages": [
			{"role":"user","content":[
				{"type":"text","text":"What is in this picture?"},
				{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + png + `"}}
			]},
			{"role":"assistant","content":[
				{"type":"thinking","thinking":"Look first.","signature":"sig-a"},
				{"type":"text","text":"Let me look."},
				{"type":"tool_use","id":"toolu_1","name":"read","input":{"path":"a.png"}},
				{"type":"tool_use","id":"toolu_2","name":"bash","input":{"command":"false"}}
			]},
			{"role":"user","content":[
				{"type":"tool_result","tool_use_id":"toolu_1","content":[
					{"type":"text","text":"an image:"},
					{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + png + `"}}
				]},
				{"type":"tool_result","tool_use_id":"toolu_2","is_error":true,"content":[{"type":"text","text":"exit status 1"}]}
			]},
			{"role":"assistant","content":[{"type":"text","text":"A red dot."}]},
			{"role":"user","content":[{"type":"text","text":"Thanks","cache_control":{"type":"ephemeral"}}]}
		]
	}`
	if !jsonEqual(t, req.JSON, want) {
		got, _ := json.MarshalIndent(req.JSON, "", "  ")
		t.Fatalf("request body:\n%s", got)
	}
	// Property order is the tool's own, not alphabetical.
	if !strings.Contains(string(req.Body), `"properties":{"path":{"type":"string"},"limit":{"type":"integer"}}`) {
		t.Fatalf("property order lost: %s", req.Body)
	}
}

func TestHeadersAndAuth(t *testing.T) {
	// Values an SDK left to its defaults would pick up.
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "token-from-env")
	t.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
	t.Setenv("ANTHROPIC_CUSTOM_HEADERS", "X-From-Env: yes")

	tests := []struct {
		name       string
		key        string
		wantAPIKey string
		wantAuth   string
		wantBeta   string
	}{
		{"api key", "sk-ant-api03-abc", "sk-ant-api03-abc", "", ""},
		{"oauth token", "sk-ant-oat01-xyz", "", "Bearer sk-ant-oat01-xyz", "oauth-2025-04-20"},
		{"oauth token with other betas", "sk-ant-oat01-xyz", "", "Bearer sk-ant-oat01-xyz", "context-1m-2025-08-07,oauth-2025-04-20"},
		{"no key", "", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewServer(t)
			srv.Enqueue(wiremock.Script{Text: []string{"ok"}})
			ro := runOpts{
				noKey: true,
				model: func(m *llm.Model) { m.Headers = map[string]string{"X-Model": "m", "X-Both": "model"} },
				opts:  llm.StreamOptions{APIKey: tt.key, Headers: map[string]string{"X-Request": "r", "X-Both": "request"}},
			}
			if strings.Contains(tt.name, "other betas") {
				ro.opts.Headers["anthropic-beta"] = "context-1m-2025-08-07"
			}
			r := runOn(t, srv, ro)
			if r.err != nil {
				t.Fatal(r.err)
			}
			h := srv.LastRequest(t).Header
			if h.Get("X-Api-Key") != tt.wantAPIKey || h.Get("Authorization") != tt.wantAuth || h.Get("Anthropic-Beta") != tt.wantBeta {
				t.Fatalf("x-api-key %q authorization %q anthropic-beta %q", h.Get("X-Api-Key"), h.Get("Authorization"), h.Get("Anthropic-Beta"))
			}
			if h.Get("Anthropic-Version") != "2023-06-01" || h.Get("X-Model") != "m" || h.Get("X-Request") != "r" || h.Get("X-Both") != "request" {
				t.Fatalf("headers %v", h)
			}
			// Sent once: nothing retried behind the caller's back (the SDK
			// used to say so with X-Stainless-Retry-Count: 0).
			if h.Get("X-From-Env") != "" || len(srv.Requests()) != 1 {
				t.Fatalf("%d requests, headers %v", len(srv.Requests()), h)
			}
		})
	}
}

func TestNoRetries(t *testing.T) {
	blankEnv(t)
	srv := llmtest.NewServer(t)
	srv.Enqueue(wiremock.Script{Status: 529, ErrorType: "overloaded_error", ErrorMessage: "Overloaded"}, wiremock.Script{Text: []string{"second"}})
	r := runOn(t, srv, runOpts{})
	if r.err == nil || len(srv.Requests()) != 1 {
		t.Fatalf("err %v after %d requests: the SDK retried", r.err, len(srv.Requests()))
	}
}

func TestTemperature(t *testing.T) {
	temp := 0.3
	_, srv := run(t, wiremock.Script{Text: []string{"ok"}}, runOpts{opts: llm.StreamOptions{Temperature: &temp}})
	if body := srv.LastRequest(t).JSON; body["temperature"] != 0.3 {
		t.Fatalf("temperature %v", body["temperature"])
	}
	_, srv = run(t, wiremock.Script{Text: []string{"ok"}}, runOpts{})
	if _, ok := srv.LastRequest(t).JSON["temperature"]; ok {
		t.Fatal("temperature sent unasked")
	}
}

// TestForeignHistory sends a conversation that started elsewhere: thinking
// from another model, OpenAI Responses tool-call ids, a failed turn, a
// tool call whose result never came, and a model without image input.
func TestForeignHistory(t *testing.T) {
	const foreignID = "call_Xk2p|fc_68a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f607"
	c := &llm.Context{Messages: []llm.Message{
		{Role: llm.RoleUser, Content: []llm.Content{llm.Text("look"), llm.Image(png, "image/png")}},
		{Role: llm.RoleAssistant, API: llm.APIOpenAIResponses, Provider: "openai", Model: "gpt-5", StopReason: llm.StopToolUse, Content: []llm.Content{
			{Type: llm.ContentThinking, Thinking: "Plan.", ThinkingSignature: `{"type":"reasoning","id":"rs_1"}`},
			{Type: llm.ContentThinking, Thinking: "  "},
			llm.ToolCall(foreignID, "read", json.RawMessage(`{"path":"x"}`)),
			llm.ToolCall("call_2", "read", json.RawMessage(`{"path":"y"}`)),
		}},
		{Role: llm.RoleToolResult, ToolCallID: foreignID, ToolName: "read", Content: []llm.Content{llm.Image(png, "image/png")}},
		// call_2 never got a result; the user spoke instead.
		{Role: llm.RoleUser, Content: []llm.Content{llm.Text("stop"), {Type: llm.ContentText}}},
		// A failed turn and the result of its call are left out.
		{Role: llm.RoleAssistant, API: llm.APIAnthropicMessages, Provider: "anthropic", Model: "claude-test", StopReason: llm.StopError, ErrorMessage: "529 Overloaded",
			Content: []llm.Content{llm.ToolCall("toolu_x", "bash", json.RawMessage(`{}`))}},
		{Role: llm.RoleToolResult, ToolCallID: "toolu_x", ToolName: "bash", Content: []llm.Content{llm.Text("orphan")}},
		// Thinking of the same model without a signature (an aborted block).
		{Role: llm.RoleAssistant, API: llm.APIAnthropicMessages, Provider: "anthropic", Model: "claude-test", StopReason: llm.StopStop, Content: []llm.Content{
			{Type: llm.ContentThinking, Thinking: "Half a thought"}, llm.Text("ok"),
		}},
		{Role: llm.RoleUser, Content: []llm.Content{llm.Text("again")}},
	}}
	_, srv := run(t, wiremock.Script{Text: []string{"ok"}}, runOpts{ctx: c, model: func(m *llm.Model) { m.Input = []string{"text"} }})
	id := anthropic.ToolCallID(foreignID)
	want := `[
		{"role":"user","content":[{"type":"text","text":"look"},{"type":"text","text":"(image omitted: this model does not take images)"}]},
		{"role":"assistant","content":[
			{"type":"text","text":"Plan."},
			{"type":"tool_use","id":"` + id + `","name":"read","input":{"path":"x"}},
			{"type":"tool_use","id":"call_2","name":"read","input":{"path":"y"}}
		]},
		{"role":"user","content":[
			{"type":"tool_result","tool_use_id":"` + id + `","content":[{"type":"text","text":"(image omitted: this model does not take images)"}]},
			{"type":"tool_result","tool_use_id":"call_2","is_error":true,"content":[{"type":"text","text":"No result provided"}]}
		]},
		{"role":"user","content":[{"type":"text","text":"stop"}]},
		{"role":"assistant","content":[{"type":"text","text":"Half a thought"},{"type":"text","text":"ok"}]},
		{"role":"user","content":[{"type":"text","text":"again","cache_control":{"type":"ephemeral"}}]}
	]`
	if got := srv.LastRequest(t).JSON["messages"]; !jsonEqual(t, got, want) {
		b, _ := json.MarshalIndent(got, "", "  ")
		t.Fatalf("messages:\n%s", b)
	}
}

func TestInvalidToolSchema(t *testing.T) {
	c := hi()
	c.Tools = []llm.Tool{{Name: "bad", Parameters: json.RawMessage(`[1,2]`)}}
	r, srv := run(t, wiremock.Script{Text: []string{"ok"}}, runOpts{ctx: c})
	if r.err == nil || r.err.Kind != llm.ErrBadRequest || !strings.Contains(r.msg.ErrorMessage, `tool "bad"`) || len(srv.Requests()) != 0 {
		t.Fatalf("err %+v message %q", r.err, r.msg.ErrorMessage)
	}
}

// TestPingsKeepTheStreamAlive: keep-alive pings count as activity for the
// idle timeout, as any bytes from a live server should. They come every
// 20 ms for 1.5 s against a 1 s idle timeout: the stream outlasts the
// timeout, and only a 50-fold stall of one gap could fire it (50 ms
// against 200 ms fired on a busy machine).
func TestPingsKeepTheStreamAlive(t *testing.T) {
	blankEnv(t)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		send := func(event, data string) {
			_, _ = io.WriteString(w, "event: "+event+"\ndata: "+data+"\n\n")
			_ = rc.Flush()
		}
		send("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":5,"output_tokens":1}}}`)
		for range 75 {
			time.Sleep(20 * time.Millisecond)
			send("ping", `{"type": "ping"}`)
		}
		send("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"late"}}`)
		send("content_block_stop", `{"type":"content_block_stop","index":0}`)
		send("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}`)
		send("message_stop", `{"type":"message_stop"}`)
	}))
	defer hs.Close()
	m := &llm.Model{ID: "claude-test", API: llm.APIAnthropicMessages, Provider: "anthropic", BaseURL: hs.URL}
	msg, err := llm.Collect(anthropic.New(nil).Stream(context.Background(), m, hi(), &llm.StreamOptions{APIKey: "k", IdleTimeout: time.Second}))
	if err != nil || msg.TextContent() != "late" {
		t.Fatalf("err %v text %q", err, msg.TextContent())
	}
}
