package openairesponses

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/llmtest"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// sdkEnv are the variables openai-go's default client options read.
var sdkEnv = []string{
	"OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID",
	"OPENAI_ADMIN_KEY", "OPENAI_WEBHOOK_SECRET", "OPENAI_CUSTOM_HEADERS",
}

// poisonEnv sets the SDK's environment variables to values that would show
// up in the request if anything read them.
func poisonEnv(t *testing.T) {
	t.Helper()
	for _, k := range sdkEnv {
		v := "env-leak"
		switch k {
		case "OPENAI_BASE_URL":
			v = "http://127.0.0.1:1/v1"
		case "OPENAI_CUSTOM_HEADERS":
			v = "X-Env-Leak: yes"
		}
		t.Setenv(k, v)
	}
}

// testProvider is a provider whose connections are closed when the test
// ends, so goleak sees no idle keep-alive goroutines.
func testProvider(t *testing.T) *Provider {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return New(&http.Client{Transport: tr})
}

// chatModel is a non-reasoning model with gpt-4.1-mini's prices.
func chatModel(srv *wiremock.Server) *llm.Model {
	return &llm.Model{
		ID: "gpt-4.1-mini", Name: "GPT-4.1 mini", API: llm.APIOpenAIResponses, Provider: "openai",
		BaseURL: srv.OpenAIURL(), Input: []string{"text", "image"},
		Cost:          llm.ModelCost{Input: 0.4, Output: 1.6, CacheRead: 0.1},
		ContextWindow: 1047576, MaxTokens: 32768,
	}
}

// reasoningModel is a reasoning model with gpt-5-mini's prices.
func reasoningModel(srv *wiremock.Server) *llm.Model {
	return &llm.Model{
		ID: "gpt-5-mini", Name: "GPT-5 mini", API: llm.APIOpenAIResponses, Provider: "openai",
		BaseURL: srv.OpenAIURL(), Reasoning: true, Input: []string{"text", "image"},
		Cost:          llm.ModelCost{Input: 0.25, Output: 2, CacheRead: 0.025},
		ContextWindow: 400000, MaxTokens: 128000,
	}
}

func hello() *llm.Context {
	return &llm.Context{
		SystemPrompt: "You are terse.",
		Messages:     []llm.Message{{Role: llm.RoleUser, Content: []llm.Content{llm.Text("hi")}}},
	}
}

// run drains a stream, checking the event grammar as it goes: start, then
// per block *_start, *_delta..., *_end, then exactly one done or error.
func run(t *testing.T, s *llm.Stream) ([]llm.Event, *llm.Message, *llm.Error) {
	t.Helper()
	defer s.Close()
	var evs []llm.Event
	open := map[int]string{}
	for s.Next() {
		ev := s.Event()
		if ev.ToolCall != nil {
			tc := *ev.ToolCall
			tc.Arguments = append(json.RawMessage(nil), tc.Arguments...)
			ev.ToolCall = &tc
		}
		evs = append(evs, ev)
		if len(evs) == 1 && ev.Type != llm.EventStart {
			t.Fatalf("first event %s, want start", ev.Type)
		}
		kind, phase, _ := strings.Cut(string(ev.Type), "_")
		switch phase {
		case "start":
			if _, dup := open[ev.ContentIndex]; dup {
				t.Errorf("block %d started twice", ev.ContentIndex)
			}
			open[ev.ContentIndex] = kind
		case "delta", "end":
			if open[ev.ContentIndex] != kind {
				t.Errorf("%s on block %d, which is %q", ev.Type, ev.ContentIndex, open[ev.ContentIndex])
			}
			if phase == "end" {
				open[ev.ContentIndex] = "ended"
			}
		}
	}
	for i, ev := range evs {
		last := i == len(evs)-1
		if end := ev.Type == llm.EventDone || ev.Type == llm.EventError; end != last {
			t.Fatalf("event %d is %s; the stream must end with exactly one done or error", i, ev.Type)
		}
	}
	if evs[len(evs)-1].Type == llm.EventDone {
		for i, k := range open {
			if k != "ended" {
				t.Errorf("done with block %d (%s) still open", i, k)
			}
		}
	}
	return evs, s.Result(), s.Err()
}

// types lists event types, deltas shown after a colon.
func types(evs []llm.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = string(ev.Type)
		if ev.Delta != "" {
			out[i] += ":" + ev.Delta
		}
	}
	return out
}

func TestText(t *testing.T) {
	srv := llmtest.NewServer(t)
	srv.Enqueue(wiremock.Script{ResponseID: "resp_abc", Text: []string{"Hel", "lo", "!"}, Usage: &wiremock.Usage{Input: 12, Output: 3}})
	evs, msg, err := run(t, testProvider(t).Stream(context.Background(), chatModel(srv), hello(), &llm.StreamOptions{APIKey: "sk-test"}))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"start", "text_start", "text_delta:Hel", "text_delta:lo", "text_delta:!", "text_end", "done"}
	if diff := cmp.Diff(want, types(evs)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if evs[5].Content != "Hello!" {
		t.Errorf("text_end content %q", evs[5].Content)
	}
	if msg.StopReason != llm.StopStop || msg.TextContent() != "Hello!" || msg.ResponseID != "resp_abc" {
		t.Errorf("message: stop %s text %q response %q", msg.StopReason, msg.TextContent(), msg.ResponseID)
	}
	if sig := msg.Content[0].TextSignature; sig != "msg_abc" {
		t.Errorf("text signature %q, want the message item id", sig)
	}
	if msg.API != llm.APIOpenAIResponses || msg.Provider != "openai" || msg.Model != "gpt-4.1-mini" {
		t.Errorf("message origin %s/%s/%s", msg.API, msg.Provider, msg.Model)
	}
}

func TestThinking(t *testing.T) {
	srv := llmtest.NewServer(t)
	srv.Enqueue(wiremock.Script{
		ResponseID:        "resp_r1",
		Thinking:          []string{"**Plan**\n\n", "Say hi."},
		ThinkingSignature: "gAAAAABo-encrypted",
		Text:              []string{"Hi"},
		Usage:             &wiremock.Usage{Input: 10, Output: 100, Reasoning: 90},
	})
	evs, msg, err := run(t, testProvider(t).Stream(context.Background(), reasoningModel(srv), hello(), &llm.StreamOptions{Thinking: llm.ThinkingMedium}))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"start", "thinking_start", "thinking_delta:**Plan**\n\n", "thinking_delta:Say hi.", "thinking_end",
		"text_start", "text_delta:Hi", "text_end", "done"}
	if diff := cmp.Diff(want, types(evs)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	th := msg.Content[0]
	if th.Type != llm.ContentThinking || th.Thinking != "**Plan**\n\nSay hi." || th.Redacted {
		t.Errorf("thinking block %+v", th)
	}
	var item struct {
		ID               string `json:"id"`
		Type             string `json:"type"`
		EncryptedContent string `json:"encrypted_content"`
		Summary          []struct {
			Text string `json:"text"`
		} `json:"summary"`
	}
	if err := json.Unmarshal([]byte(th.ThinkingSignature), &item); err != nil {
		t.Fatalf("signature is not the reasoning item: %v", err)
	}
	if item.ID != "rs_r1" || item.Type != "reasoning" || item.EncryptedContent != "gAAAAABo-encrypted" || len(item.Summary) != 1 {
		t.Errorf("reasoning item %+v", item)
	}
	body := srv.LastRequest(t).JSON
	if diff := cmp.Diff(map[string]any{"effort": "medium", "summary": "auto"}, body["reasoning"]); diff != "" {
		t.Errorf("reasoning param (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]any{"reasoning.encrypted_content"}, body["include"]); diff != "" {
		t.Errorf("include (-want +got):\n%s", diff)
	}
}

func TestToolCalls(t *testing.T) {
	tests := []struct {
		name  string
		calls []wiremock.ToolCall
		want  []string // arguments at toolcall_end
	}{
		{
			name:  "one",
			calls: []wiremock.ToolCall{{ID: "call_A", Name: "read", Args: []string{`{"pa`, `th":"/etc/`, `hosts"}`}}},
			want:  []string{`{"path":"/etc/hosts"}`},
		},
		{
			name: "several",
			calls: []wiremock.ToolCall{
				{ID: "call_A", Name: "read", Args: []string{`{"path":`, `"a.go"}`}},
				{ID: "call_B", Name: "bash", Args: []string{`{"command":"ls -la",`, `"timeout":`, `30}`}},
				{ID: "call_C", Name: "noargs"},
			},
			want: []string{`{"path":"a.go"}`, `{"command":"ls -la","timeout":30}`, `{}`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewServer(t)
			srv.Enqueue(wiremock.Script{ResponseID: "resp_t", Text: []string{"Let me look."}, ToolCalls: tt.calls})
			evs, msg, err := run(t, testProvider(t).Stream(context.Background(), chatModel(srv), hello(), nil))
			if err != nil {
				t.Fatal(err)
			}
			if msg.StopReason != llm.StopToolUse {
				t.Errorf("stop %s, want toolUse", msg.StopReason)
			}
			var deltas map[int][]string = map[int][]string{}
			var ends []*llm.Content
			for _, ev := range evs {
				switch ev.Type {
				case llm.EventToolCallDelta:
					deltas[ev.ContentIndex] = append(deltas[ev.ContentIndex], ev.Delta)
				case llm.EventToolCallEnd:
					ends = append(ends, ev.ToolCall)
				}
			}
			if len(ends) != len(tt.calls) {
				t.Fatalf("%d toolcall_end events, want %d", len(ends), len(tt.calls))
			}
			for i, tc := range tt.calls {
				idx := i + 1 // after the text block
				if diff := cmp.Diff(tc.Args, deltas[idx]); diff != "" {
					t.Errorf("call %d deltas (-want +got):\n%s", i, diff)
				}
				end := ends[i]
				wantID := tc.ID + "|fc_t_" + string(rune('0'+i))
				if end.ID != wantID || end.Name != tc.Name || string(end.Arguments) != tt.want[i] {
					t.Errorf("call %d end: id %q name %q args %s; want %q %q %s", i, end.ID, end.Name, end.Arguments, wantID, tc.Name, tt.want[i])
				}
				if got := msg.Content[idx]; got.ID != wantID || string(got.Arguments) != tt.want[i] {
					t.Errorf("call %d in message: %+v", i, got)
				}
			}
		})
	}
}

func TestUsageAndCost(t *testing.T) {
	srv := llmtest.NewServer(t)
	srv.Enqueue(wiremock.Script{Text: []string{"ok"}, Usage: &wiremock.Usage{Input: 1_000_000, CacheRead: 2_000_000, Output: 500_000, Reasoning: 100_000}})
	_, msg, err := run(t, testProvider(t).Stream(context.Background(), reasoningModel(srv), hello(), nil))
	if err != nil {
		t.Fatal(err)
	}
	// input_tokens on the wire is 3M with 2M cached: 1M uncached input.
	want := llm.Usage{
		Input: 1_000_000, Output: 500_000, CacheRead: 2_000_000, TotalTokens: 3_500_000,
		Cost: llm.Cost{Input: 0.25, Output: 1, CacheRead: 0.05, Total: 1.3},
	}
	if diff := cmp.Diff(want, msg.Usage, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-12 && b-a < 1e-12 })); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
}

func TestAbort(t *testing.T) {
	srv := llmtest.NewServer(t)
	text := make([]string, 50)
	for i := range text {
		text[i] = "word "
	}
	srv.Enqueue(wiremock.Script{Text: text, Delay: 300 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := testProvider(t).Stream(ctx, chatModel(srv), hello(), nil)
	var cancelled time.Time
	evs, msg, err := func() ([]llm.Event, *llm.Message, *llm.Error) {
		defer s.Close()
		var evs []llm.Event
		for s.Next() {
			ev := s.Event()
			evs = append(evs, ev)
			if ev.Type == llm.EventTextDelta && cancelled.IsZero() {
				cancelled = time.Now()
				cancel()
			}
		}
		return evs, s.Result(), s.Err()
	}()
	if elapsed := time.Since(cancelled); elapsed > 250*time.Millisecond {
		t.Errorf("abort took %s", elapsed)
	}
	if err == nil || err.Kind != llm.ErrAborted {
		t.Fatalf("error %v, want aborted", err)
	}
	if msg.StopReason != llm.StopAborted || msg.ErrorMessage != "Request was aborted" {
		t.Errorf("stop %s message %q", msg.StopReason, msg.ErrorMessage)
	}
	if msg.TextContent() != "word " {
		t.Errorf("partial text %q, want the first delta kept", msg.TextContent())
	}
	if last := evs[len(evs)-1]; last.Type != llm.EventError || last.Reason != llm.StopAborted {
		t.Errorf("last event %+v", last)
	}
}

func TestHTTPErrors(t *testing.T) {
	tests := []struct {
		status  int
		errType string
		message string
		kind    llm.ErrorKind
	}{
		{400, "invalid_request_error", "Invalid value for 'input[0].content'.", llm.ErrBadRequest},
		{401, "invalid_api_key", "Incorrect API key provided: sk-bad.", llm.ErrAuth},
		{403, "unsupported_country_region_territory", "Country, region, or territory not supported", llm.ErrPermission},
		{404, "model_not_found", "The model `gpt-9` does not exist or you do not have access to it.", llm.ErrNotFound},
		{413, "", "Request too large for gpt-4.1.", llm.ErrTooLarge},
		{429, "rate_limit_exceeded", "Rate limit reached for gpt-4.1 on tokens per min (TPM): Limit 30000.", llm.ErrRateLimit},
		{500, "server_error", "The server had an error while processing your request. Sorry about that!", llm.ErrServer},
		{503, "", "The engine is currently overloaded, please try again later.", llm.ErrServer},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			srv := llmtest.NewServer(t)
			srv.Enqueue(wiremock.Script{Status: tt.status, ErrorType: tt.errType, ErrorMessage: tt.message})
			evs, msg, err := run(t, testProvider(t).Stream(context.Background(), chatModel(srv), hello(), nil))
			if err == nil {
				t.Fatal("no error")
			}
			want := strings.TrimSpace(strings.Join([]string{strconv.Itoa(tt.status), tt.message}, " "))
			if err.Error() != want || msg.ErrorMessage != want {
				t.Errorf("error %q / message %q, want %q", err.Error(), msg.ErrorMessage, want)
			}
			if err.Kind != tt.kind || err.Status != tt.status {
				t.Errorf("kind %s status %d, want %s %d", err.Kind, err.Status, tt.kind, tt.status)
			}
			if diff := cmp.Diff([]string{"start", "error"}, types(evs)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("%d requests; the SDK must not retry", n)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		name string
		s    wiremock.Script
		want time.Duration
	}{
		{"seconds", wiremock.Script{Status: 429, RetryAfter: "7"}, 7 * time.Second},
		{"milliseconds", wiremock.Script{Status: 429, RetryAfter: "7", RetryAfterMs: "1500"}, 1500 * time.Millisecond},
		{"none", wiremock.Script{Status: 503}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewServer(t)
			srv.Enqueue(tt.s)
			_, _, err := run(t, testProvider(t).Stream(context.Background(), chatModel(srv), hello(), nil))
			if err == nil || err.RetryAfter != tt.want {
				t.Errorf("error %v retry-after %v, want %v", err, err.RetryAfter, tt.want)
			}
			if !err.Retryable() {
				t.Errorf("%s is not retryable", err.Kind)
			}
		})
	}
}

func TestBrokenStreams(t *testing.T) {
	// 1 s, not less: a busy machine that stalls the reader between
	// frames already sent must not fire the idle timeout early.
	idle := llm.StreamOptions{IdleTimeout: time.Second}
	tests := []struct {
		name   string
		s      wiremock.Script
		o      llm.StreamOptions
		kind   llm.ErrorKind
		text   string
		syntax bool
	}{
		// Frames: created, in_progress, item added, part added, delta "Hel", delta "lo", ...
		{name: "cut", s: wiremock.Script{Text: []string{"Hel", "lo", "!"}, CutAfter: 6}, kind: llm.ErrStream, text: "Hello"},
		{name: "malformed", s: wiremock.Script{Text: []string{"Hel", "lo", "!"}, MalformedAfter: 6}, kind: llm.ErrStream, text: "Hello", syntax: true},
		{name: "idle", s: wiremock.Script{Text: []string{"Hel", "lo", "!"}, HangAfter: 6}, o: idle, kind: llm.ErrIdleTimeout, text: "Hello"},
		{name: "idle before headers", s: wiremock.Script{Text: []string{"Hel"}, FirstDelay: 5 * time.Second}, o: idle, kind: llm.ErrIdleTimeout},
		{name: "cut before content", s: wiremock.Script{Text: []string{"Hel"}, CutAfter: 1}, kind: llm.ErrStream},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewServer(t)
			srv.Enqueue(tt.s)
			start := time.Now()
			evs, msg, err := run(t, testProvider(t).Stream(context.Background(), chatModel(srv), hello(), &tt.o))
			if err == nil || err.Kind != tt.kind {
				t.Fatalf("error %v, want kind %s", err, tt.kind)
			}
			if msg.StopReason != llm.StopError || msg.ErrorMessage == "" {
				t.Errorf("stop %s message %q", msg.StopReason, msg.ErrorMessage)
			}
			if msg.TextContent() != tt.text {
				t.Errorf("partial text %q, want %q", msg.TextContent(), tt.text)
			}
			var se *json.SyntaxError
			if got := errors.As(err, &se); got != tt.syntax {
				t.Errorf("wraps *json.SyntaxError = %v (%v)", got, err)
			}
			if evs[len(evs)-1].Reason != llm.StopError {
				t.Errorf("last event %+v", evs[len(evs)-1])
			}
			if tt.kind == llm.ErrIdleTimeout && time.Since(start) > 30*time.Second { // a hang, not slowness
				t.Errorf("idle timeout took %s", time.Since(start))
			}
		})
	}
}

func TestStreamErrors(t *testing.T) {
	tests := []struct {
		name     string
		s        wiremock.Script
		want     string
		kind     llm.ErrorKind
		overflow bool
	}{
		{
			name: "error event",
			s:    wiremock.Script{Text: []string{"Part"}, StreamError: &wiremock.StreamError{Type: "server_error", Message: "The server had an error processing your request."}},
			want: "server_error: The server had an error processing your request.",
			kind: llm.ErrServer,
		},
		{
			name: "rate limit",
			s:    wiremock.Script{StreamError: &wiremock.StreamError{Type: "rate_limit_exceeded", Message: "Rate limit reached."}},
			want: "rate_limit_exceeded: Rate limit reached.",
			kind: llm.ErrRateLimit,
		},
		{
			name:     "context overflow in stream",
			s:        wiremock.Script{StreamError: &wiremock.StreamError{Type: "context_length_exceeded", Message: "Your input exceeds the context window of this model."}},
			want:     "context_length_exceeded: Your input exceeds the context window of this model.",
			kind:     llm.ErrContextOverflow,
			overflow: true,
		},
		{
			name:     "context overflow as HTTP 400",
			s:        wiremock.Script{Status: 400, ErrorType: "context_length_exceeded", ErrorMessage: "Your input exceeds the context window of this model. Please adjust your input and try again."},
			want:     "400 Your input exceeds the context window of this model. Please adjust your input and try again.",
			kind:     llm.ErrContextOverflow,
			overflow: true,
		},
		{
			name: "content filter",
			s:    wiremock.Script{Text: []string{"I"}, Stop: "content_filter"},
			want: "the response was stopped by the content filter (incomplete: content_filter)",
			kind: llm.ErrBadRequest,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewServer(t)
			srv.Enqueue(tt.s)
			evs, msg, err := run(t, testProvider(t).Stream(context.Background(), chatModel(srv), hello(), nil))
			if err == nil {
				t.Fatal("no error")
			}
			if err.Error() != tt.want || msg.ErrorMessage != tt.want || err.Kind != tt.kind {
				t.Errorf("error %q (%s), want %q (%s)", err.Error(), err.Kind, tt.want, tt.kind)
			}
			if err.ContextOverflow() != tt.overflow {
				t.Errorf("ContextOverflow() = %v", err.ContextOverflow())
			}
			if msg.StopReason != llm.StopError || evs[len(evs)-1].Type != llm.EventError {
				t.Errorf("stop %s, last event %s", msg.StopReason, evs[len(evs)-1].Type)
			}
		})
	}
}

func TestLength(t *testing.T) {
	srv := llmtest.NewServer(t)
	srv.Enqueue(wiremock.Script{Text: []string{"Once upon", " a time"}, Stop: "length", Usage: &wiremock.Usage{Input: 5, Output: 16}})
	_, msg, err := run(t, testProvider(t).Stream(context.Background(), chatModel(srv), hello(), &llm.StreamOptions{MaxTokens: 16}))
	if err != nil {
		t.Fatal(err)
	}
	if msg.StopReason != llm.StopLength || msg.TextContent() != "Once upon a time" || msg.Usage.Output != 16 {
		t.Errorf("stop %s text %q usage %+v", msg.StopReason, msg.TextContent(), msg.Usage)
	}
	if got := srv.LastRequest(t).JSON["max_output_tokens"]; got != float64(16) {
		t.Errorf("max_output_tokens %v", got)
	}
}

func TestRequest(t *testing.T) {
	poisonEnv(t)
	temp := 0.2
	tools := []llm.Tool{{
		Name: "read", Description: "Read a file",
		Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"offset":{"type":"number"}},"required":["path"]}`),
	}}
	tests := []struct {
		name   string
		model  func(*wiremock.Server) *llm.Model
		o      llm.StreamOptions
		check  map[string]any // top-level fields that must equal
		absent []string       // top-level fields that must not be sent
	}{
		{
			name:  "chat model",
			model: chatModel,
			o:     llm.StreamOptions{APIKey: "sk-test", Temperature: &temp, SessionID: "sess-1", Thinking: llm.ThinkingHigh},
			check: map[string]any{
				"model": "gpt-4.1-mini", "stream": true, "store": false, "max_output_tokens": float64(32000),
				"temperature": 0.2,
			},
			// prompt_cache_key is for api.openai.com only; the mock is not.
			absent: []string{"reasoning", "include", "prompt_cache_key", "instructions"},
		},
		{
			name:  "reasoning model",
			model: reasoningModel,
			o:     llm.StreamOptions{APIKey: "sk-test", Temperature: &temp, MaxTokens: 4096, Thinking: llm.ThinkingXHigh},
			check: map[string]any{
				"model": "gpt-5-mini", "max_output_tokens": float64(4096),
				// No xhigh without Compat.SupportsXHigh.
				"reasoning": map[string]any{"effort": "high", "summary": "auto"},
				"include":   []any{"reasoning.encrypted_content"},
			},
			absent: []string{"temperature"},
		},
		{
			name: "xhigh",
			model: func(s *wiremock.Server) *llm.Model {
				m := reasoningModel(s)
				m.Compat = &llm.Compat{SupportsXHigh: ptr(true)}
				return m
			},
			o:     llm.StreamOptions{Thinking: llm.ThinkingXHigh},
			check: map[string]any{"reasoning": map[string]any{"effort": "xhigh", "summary": "auto"}},
		},
		{
			name:  "minimal",
			model: reasoningModel,
			o:     llm.StreamOptions{Thinking: llm.ThinkingMinimal},
			check: map[string]any{"reasoning": map[string]any{"effort": "minimal", "summary": "auto"}},
		},
		{
			name:   "thinking off",
			model:  reasoningModel,
			o:      llm.StreamOptions{Thinking: llm.ThinkingOff},
			check:  map[string]any{"include": []any{"reasoning.encrypted_content"}},
			absent: []string{"reasoning"},
		},
		{
			name: "compat server",
			model: func(s *wiremock.Server) *llm.Model {
				m := reasoningModel(s)
				m.Compat = &llm.Compat{SupportsStore: ptr(false), SupportsReasoningEffort: ptr(false), SupportsStrictMode: ptr(false), SupportsDeveloperRole: ptr(false)}
				return m
			},
			o:      llm.StreamOptions{Thinking: llm.ThinkingHigh},
			absent: []string{"store", "reasoning", "include"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewServer(t)
			srv.Enqueue(wiremock.Script{Text: []string{"ok"}})
			m := tt.model(srv)
			m.Headers = map[string]string{"X-Model": "m", "X-Both": "model"}
			o := tt.o
			o.Headers = map[string]string{"X-Both": "options", "X-Request": "r"}
			c := hello()
			c.Tools = tools
			if _, _, err := run(t, testProvider(t).Stream(context.Background(), m, c, &o)); err != nil {
				t.Fatal(err)
			}
			req := srv.LastRequest(t)
			if req.Path != wiremock.PathResponses {
				t.Errorf("path %s", req.Path)
			}
			for k, want := range tt.check {
				if diff := cmp.Diff(want, req.JSON[k]); diff != "" {
					t.Errorf("%s (-want +got):\n%s", k, diff)
				}
			}
			for _, k := range tt.absent {
				if v, ok := req.JSON[k]; ok {
					t.Errorf("%s sent: %v", k, v)
				}
			}
			// Headers: the model's, then the options' (which win).
			h := req.Header
			if h.Get("X-Model") != "m" || h.Get("X-Request") != "r" || h.Get("X-Both") != "options" {
				t.Errorf("headers %v", h)
			}
			if wantAuth := "Bearer " + o.APIKey; o.APIKey != "" && h.Get("Authorization") != wantAuth {
				t.Errorf("Authorization %q, want %q", h.Get("Authorization"), wantAuth)
			} else if o.APIKey == "" && h.Get("Authorization") != "" {
				t.Errorf("Authorization %q sent without a key (from the environment?)", h.Get("Authorization"))
			}
			if h.Get("X-Env-Leak") != "" || h.Get("OpenAI-Organization") != "" || h.Get("OpenAI-Project") != "" || strings.Contains(string(req.Body), "env-leak") {
				t.Errorf("environment leaked into the request: %v %s", h, req.Body)
			}
			// The tool, schema bytes as written.
			wantTool := `{"type":"function","name":"read","description":"Read a file","parameters":{"type":"object","properties":{"path":{"type":"string"},"offset":{"type":"number"}},"required":["path"]},"strict":false}`
			if m.Compat != nil && m.Compat.SupportsStrictMode != nil {
				wantTool = strings.Replace(wantTool, `,"strict":false`, "", 1)
			}
			if got := rawField(t, req.Body, "tools"); !jsonEqual(got, "["+wantTool+"]") || !strings.Contains(got, `"properties":{"path":{"type":"string"},"offset":`) {
				t.Errorf("tools\n got %s\nwant [%s]", got, wantTool)
			}
			// The system prompt, as developer for reasoning models.
			role := "system"
			if m.Reasoning && (m.Compat == nil || m.Compat.SupportsDeveloperRole == nil) {
				role = "developer"
			}
			first := req.JSON["input"].([]any)[0].(map[string]any)
			if first["role"] != role || first["content"] != "You are terse." {
				t.Errorf("first input item %v, want the system prompt as %s", first, role)
			}
		})
	}
}

// TestNoKeyNoEnv: an empty key sends no Authorization even when
// OPENAI_API_KEY is set, and the base URL never comes from OPENAI_BASE_URL.
func TestNoKeyNoEnv(t *testing.T) {
	for _, k := range sdkEnv {
		t.Setenv(k, "")
	}
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	srv := llmtest.NewServer(t)
	srv.Enqueue(wiremock.Script{Text: []string{"ok"}})
	if _, _, err := run(t, testProvider(t).Stream(context.Background(), chatModel(srv), hello(), &llm.StreamOptions{})); err != nil {
		t.Fatal(err)
	}
	if got := srv.LastRequest(t).Header.Get("Authorization"); got != "" {
		t.Errorf("Authorization %q", got)
	}
}

// TestPromptCacheKey sends to api.openai.com (rerouted to the mock) to see
// the session id used as prompt_cache_key.
func TestPromptCacheKey(t *testing.T) {
	srv := llmtest.NewServer(t)
	target, _ := url.Parse(srv.URL())
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Host != "api.openai.com" {
			t.Errorf("request to %s", r.URL)
		}
		r = r.Clone(r.Context())
		r.URL.Scheme, r.URL.Host = target.Scheme, target.Host
		return tr.RoundTrip(r)
	})}
	m := chatModel(srv)
	m.BaseURL = "https://api.openai.com/v1"
	for _, session := range []string{"session-42", ""} {
		srv.Enqueue(wiremock.Script{Text: []string{"ok"}})
		if _, _, err := run(t, New(client).Stream(context.Background(), m, hello(), &llm.StreamOptions{SessionID: session})); err != nil {
			t.Fatal(err)
		}
		got, ok := srv.LastRequest(t).JSON["prompt_cache_key"]
		if session == "" && ok || session != "" && got != session {
			t.Errorf("session %q: prompt_cache_key %v", session, got)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestReferenceStream replays a stream written after the API reference's
// streaming-event examples: a reasoning item with two summary parts, a
// message, and a function call.
func TestReferenceStream(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "wiremock", "testdata", "openai-responses", "reference-stream.sse"))
	if err != nil {
		t.Fatal(err)
	}
	srv := llmtest.NewServer(t)
	srv.Enqueue(wiremock.Script{Raw: raw})
	evs, msg, serr := run(t, testProvider(t).Stream(context.Background(), reasoningModel(srv), hello(), &llm.StreamOptions{Thinking: llm.ThinkingLow}))
	if serr != nil {
		t.Fatal(serr)
	}
	want := []string{
		"start",
		"thinking_start", "thinking_delta:**Checking the weather**\n\nThe user wants Paris weather.",
		"thinking_delta:\n\n", "thinking_delta:**Calling the tool**\n\nI'll call get_weather.", "thinking_end",
		"text_start", "text_delta:Let me", "text_delta: check.", "text_end",
		"toolcall_start", `toolcall_delta:{"location":`, `toolcall_delta:"Paris, France"}`, "toolcall_end",
		"done",
	}
	if diff := cmp.Diff(want, types(evs)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if th := msg.Content[0]; th.Thinking != "**Checking the weather**\n\nThe user wants Paris weather.\n\n**Calling the tool**\n\nI'll call get_weather." ||
		!strings.Contains(th.ThinkingSignature, `"encrypted_content":"gAAAAABoXJ`) {
		t.Errorf("thinking %+v", th)
	}
	if tc := msg.Content[2]; tc.ID != "call_12345xyz|fc_12345xyz" || tc.Name != "get_weather" || string(tc.Arguments) != `{"location":"Paris, France"}` {
		t.Errorf("tool call %+v", tc)
	}
	if msg.StopReason != llm.StopToolUse || msg.ResponseID != "resp_67ccfcdd16748190a91872c75d38539e09e4d4aac714747c" {
		t.Errorf("stop %s response %s", msg.StopReason, msg.ResponseID)
	}
	if msg.Usage.Input != 36 || msg.Usage.Output != 87 || msg.Usage.TotalTokens != 123 {
		t.Errorf("usage %+v", msg.Usage)
	}
}

// TestCompatibleServerStreams covers what OpenAI-compatible servers do
// differently from api.openai.com.
func TestCompatibleServerStreams(t *testing.T) {
	tests := []struct {
		name  string
		raw   string
		want  []string
		check func(t *testing.T, msg *llm.Message, err *llm.Error)
	}{
		{
			name: "data-only frames, no added events, [DONE]",
			raw: `data: {"type":"response.created","response":{"id":"resp_v"}}

data: {"type":"response.reasoning_text.delta","output_index":0,"content_index":0,"delta":"think"}

data: {"type":"response.output_text.delta","output_index":1,"content_index":0,"delta":"Hi"}

data: {"type":"response.completed","response":{"id":"resp_v","status":"completed","usage":{"input_tokens":3,"output_tokens":2,"total_tokens":5}}}

data: [DONE]

`,
			want: []string{"start", "thinking_start", "thinking_delta:think", "thinking_end", "text_start", "text_delta:Hi", "text_end", "done"},
			check: func(t *testing.T, msg *llm.Message, err *llm.Error) {
				if err != nil || msg.ResponseID != "resp_v" || msg.Usage.Input != 3 {
					t.Errorf("err %v message %+v", err, msg)
				}
			},
		},
		{
			name: "content only in done items",
			raw: `event: response.output_item.done
data: {"type":"response.output_item.done","output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"hmm"}]}}

event: response.output_item.done
data: {"type":"response.output_item.done","output_index":1,"item":{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"Hello"}]}}

event: response.output_item.done
data: {"type":"response.output_item.done","output_index":2,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"ls","arguments":"{\"dir\":\".\"}"}}

event: response.completed
data: {"type":"response.completed","response":{"status":"completed"}}

`,
			want: []string{"start", "thinking_start", "thinking_delta:hmm", "thinking_end", "text_start", "text_delta:Hello", "text_end",
				"toolcall_start", `toolcall_delta:{"dir":"."}`, "toolcall_end", "done"},
			check: func(t *testing.T, msg *llm.Message, err *llm.Error) {
				if msg.StopReason != llm.StopToolUse || msg.Content[2].ID != "call_1|fc_1" {
					t.Errorf("message %+v", msg)
				}
			},
		},
		{
			name: "arguments only in done event, ids at the end",
			raw: `data: {"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","name":"ls","arguments":""}}

data: {"type":"response.function_call_arguments.done","output_index":0,"arguments":"{}"}

data: {"type":"response.output_item.done","output_index":0,"item":{"type":"function_call","id":"fc_9","call_id":"call_9","name":"ls","arguments":"{}"}}

data: {"type":"response.completed","response":{"status":"completed"}}

`,
			want: []string{"start", "toolcall_start", "toolcall_delta:{}", "toolcall_end", "done"},
			check: func(t *testing.T, msg *llm.Message, err *llm.Error) {
				if msg.Content[0].ID != "call_9|fc_9" {
					t.Errorf("tool call id %q", msg.Content[0].ID)
				}
			},
		},
		{
			name: "nested error event",
			raw: `event: error
data: {"type":"error","sequence_number":2,"error":{"type":"invalid_request_error","code":"context_length_exceeded","message":"Input too long.","param":"input"}}

`,
			want: []string{"start", "error"},
			check: func(t *testing.T, msg *llm.Message, err *llm.Error) {
				if err == nil || !err.ContextOverflow() || err.Error() != "context_length_exceeded: Input too long." {
					t.Errorf("error %v", err)
				}
			},
		},
		{
			name: "failed without details",
			raw: `event: response.failed
data: {"type":"response.failed","sequence_number":1,"response":{"id":"r","status":"failed","error":null}}

`,
			want: []string{"start", "error"},
			check: func(t *testing.T, msg *llm.Message, err *llm.Error) {
				if err == nil || err.Message != "the response failed without error details" {
					t.Errorf("error %v", err)
				}
			},
		},
		{
			name: "comments, CRLF and multi-line data",
			raw:  ": keep-alive\r\n\r\nevent: response.output_text.delta\r\ndata: {\"type\":\"response.output_text.delta\",\r\ndata: \"output_index\":0,\"delta\":\"a\\nb\"}\r\n\r\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\"}}\r\n\r\n",
			want: []string{"start", "text_start", "text_delta:a\nb", "text_end", "done"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewServer(t)
			srv.Enqueue(wiremock.Script{Raw: []byte(tt.raw)})
			evs, msg, err := run(t, testProvider(t).Stream(context.Background(), reasoningModel(srv), hello(), nil))
			if diff := cmp.Diff(tt.want, types(evs)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if tt.check != nil {
				tt.check(t, msg, err)
			}
		})
	}
}

func TestErrorBodyShapes(t *testing.T) {
	tests := []struct {
		name, body, errType, message string
	}{
		{"openai", `{"error":{"message":"Bad key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, "invalid_api_key", "Bad key"},
		{"openai without code", `{"error":{"message":"Boom","type":"server_error","param":null,"code":null}}`, "server_error", "Boom"},
		{"ollama", `{"error":"model \"llama9\" not found, try pulling it first"}`, "", `model "llama9" not found, try pulling it first`},
		{"vllm", `{"object":"error","message":"This model's maximum context length is 8192 tokens.","type":"BadRequestError","param":null,"code":400}`, "400", "This model's maximum context length is 8192 tokens."},
		{"fastapi", `{"detail":"Not Found"}`, "", "Not Found"},
		{"fastapi list", `{"detail":[{"loc":["body","model"],"msg":"field required"}]}`, "", `[{"loc":["body","model"],"msg":"field required"}]`},
		{"plain text", "upstream connect error\n", "", "upstream connect error"},
		{"empty", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errType, msg := parseErrorBody([]byte(tt.body))
			if errType != tt.errType || msg != tt.message {
				t.Errorf("got (%q, %q), want (%q, %q)", errType, msg, tt.errType, tt.message)
			}
		})
	}
}

// TestNonJSONErrorBody: a proxy's HTML error page still gives
// "<status> <text>".
func TestNonJSONErrorBody(t *testing.T) {
	srv := httpServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("bad gateway: upstream timed out"))
	}))
	m := &llm.Model{ID: "local", API: llm.APIOpenAIResponses, Provider: "vllm", BaseURL: srv + "/v1"}
	_, _, err := run(t, testProvider(t).Stream(context.Background(), m, hello(), nil))
	if err == nil || err.Error() != "502 bad gateway: upstream timed out" || err.Kind != llm.ErrServer {
		t.Errorf("error %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	m := &llm.Model{ID: "x", API: llm.APIOpenAIResponses, Provider: "openai", BaseURL: "http://127.0.0.1:1/v1"}
	_, msg, err := run(t, testProvider(t).Stream(context.Background(), m, hello(), nil))
	if err == nil || err.Kind != llm.ErrNetwork || msg.StopReason != llm.StopError {
		t.Errorf("error %v", err)
	}
}

func TestBadTool(t *testing.T) {
	srv := llmtest.NewServer(t)
	c := hello()
	c.Tools = []llm.Tool{{Name: "broken", Parameters: json.RawMessage(`{"type":`)}}
	_, _, err := run(t, testProvider(t).Stream(context.Background(), chatModel(srv), c, nil))
	if err == nil || err.Kind != llm.ErrBadRequest || !strings.Contains(err.Error(), `tool "broken"`) {
		t.Errorf("error %v", err)
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

func ptr[T any](v T) *T { return &v }

// rawField returns a top-level field of a JSON object as sent.
func rawField(t *testing.T, body []byte, key string) string {
	t.Helper()
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		t.Fatal(err)
	}
	return string(obj[key])
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return cmp.Equal(x, y)
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
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
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}

// httpServer serves h on 127.0.0.1 until the test ends and returns its URL.
func httpServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestConcurrentStreams(t *testing.T) {
	srv := llmtest.NewServer(t)
	srv.Handle(func(r *wiremock.Request) wiremock.Script {
		return wiremock.Script{Text: []string{"a", "b"}, ToolCalls: []wiremock.ToolCall{{Name: "ls", Args: []string{"{}"}}}}
	})
	p := testProvider(t)
	m := chatModel(srv)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg, err := llm.Collect(p.Stream(context.Background(), m, hello(), &llm.StreamOptions{APIKey: "k"}))
			if err == nil && (msg.TextContent() != "ab" || msg.StopReason != llm.StopToolUse) {
				err = errors.New("wrong message " + msg.TextContent())
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestFrameDecoder(t *testing.T) {
	var f frameDecoder
	var ev wireEvent
	tests := []struct {
		data    string
		delta   string
		wantErr bool
		syntax  bool
	}{
		{data: `{"type":"response.output_text.delta","delta":"a"}`, delta: "a"},
		{data: "  {\"type\":\"response.output_text.delta\",\"delta\":\"b\"}  \n", delta: "b"},
		{data: `{"type":"response.output_text.delta","delta":"c"} {"x":1}`, wantErr: true, syntax: true},
		// The decoder recovers after an error.
		{data: `{"type":"response.output_text.delta","delta":"d"}`, delta: "d"},
		{data: `{"type":"response.output_text.delta","delta":"e`, wantErr: true, syntax: true},
		{data: `{"type":"response.output_text.delta","delta":"f"}}`, wantErr: true, syntax: true},
		{data: `{"type":"response.output_text.delta","delta":"\u00e9\ud83d\ude00"}`, delta: "é😀"},
		{data: `{"type":"response.output_text.delta","delta":7}`, wantErr: true},
	}
	for i, tt := range tests {
		err := f.decode([]byte(tt.data), &ev)
		if (err != nil) != tt.wantErr {
			t.Fatalf("%d: error %v", i, err)
		}
		var se *json.SyntaxError
		if errors.As(err, &se) != tt.syntax {
			t.Errorf("%d: %v is a syntax error: %v", i, err, !tt.syntax)
		}
		if err == nil && (ev.Delta != tt.delta || ev.Type != evTextDelta) {
			t.Errorf("%d: decoded %+v", i, ev)
		}
	}
}

// TestKeepAliveComments: comments a proxy sends while the model thinks
// keep the idle timeout from firing. They come every 20 ms for 1.5 s
// against a 1 s idle timeout: the stream as a whole outlasts the
// timeout, and a busy machine would have to stall one gap 50-fold to
// fire it (with 50 ms against 150 ms, a 3-fold stall did).
func TestKeepAliveComments(t *testing.T) {
	url := httpServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := 0; i < 75; i++ {
			_, _ = io.WriteString(w, ": OPENROUTER PROCESSING\n\n")
			_ = rc.Flush()
			select {
			case <-time.After(20 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, "data: {\"type\":\"response.output_text.delta\",\"output_index\":0,\"delta\":\"hi\"}\n\n"+
			"data: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\"}}\n\n")
	}))
	m := &llm.Model{ID: "openai/gpt-5", API: llm.APIOpenAIResponses, Provider: "openrouter", BaseURL: url + "/api/v1"}
	_, msg, err := run(t, testProvider(t).Stream(context.Background(), m, hello(), &llm.StreamOptions{IdleTimeout: time.Second}))
	if err != nil || msg.TextContent() != "hi" {
		t.Fatalf("err %v text %q", err, msg.TextContent())
	}
}
