package llm_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
)

func TestHTTPErrorClassification(t *testing.T) {
	tests := []struct {
		status    int
		errType   string
		msg       string
		kind      llm.ErrorKind
		retryable bool
		text      string
	}{
		{400, "invalid_request_error", "max_tokens: too big", llm.ErrBadRequest, false, "400 max_tokens: too big"},
		{400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum", llm.ErrContextOverflow, false, "400 prompt is too long: 210000 tokens > 200000 maximum"},
		{400, "context_length_exceeded", "This model's maximum context length is 128000 tokens", llm.ErrContextOverflow, false, ""},
		{401, "authentication_error", "invalid x-api-key", llm.ErrAuth, false, "401 invalid x-api-key"},
		{403, "permission_error", "no access", llm.ErrPermission, false, ""},
		{404, "not_found_error", "model: nope", llm.ErrNotFound, false, ""},
		{413, "request_too_large", "Request exceeds the maximum size", llm.ErrContextOverflow, false, ""},
		{413, "", "", llm.ErrTooLarge, false, "413 Request Entity Too Large"},
		{429, "rate_limit_error", "slow down", llm.ErrRateLimit, true, "429 slow down"},
		{500, "api_error", "boom", llm.ErrServer, true, ""},
		{503, "", "mock failure 503", llm.ErrServer, true, "503 mock failure 503"},
		{529, "overloaded_error", "Overloaded", llm.ErrOverloaded, true, "529 Overloaded"},
	}
	for _, tt := range tests {
		e := llm.HTTPError(tt.status, nil, tt.errType, tt.msg, nil)
		if e.Kind != tt.kind || e.Retryable() != tt.retryable {
			t.Errorf("%d %s %q: kind %s retryable %v, want %s %v", tt.status, tt.errType, tt.msg, e.Kind, e.Retryable(), tt.kind, tt.retryable)
		}
		if tt.text != "" && e.Error() != tt.text {
			t.Errorf("text %q, want %q", e.Error(), tt.text)
		}
		if e.ContextOverflow() != (tt.kind == llm.ErrContextOverflow) {
			t.Errorf("%q: ContextOverflow %v", tt.msg, e.ContextOverflow())
		}
	}
}

func TestRetryAfter(t *testing.T) {
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	future := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	tests := []struct {
		h        http.Header
		min, max time.Duration
	}{
		{nil, 0, 0},
		{h("Retry-After", "7"), 7 * time.Second, 7 * time.Second},
		{h("Retry-After", "1.5"), 1500 * time.Millisecond, 1500 * time.Millisecond},
		{h("Retry-After-Ms", "250", "Retry-After", "9"), 250 * time.Millisecond, 250 * time.Millisecond},
		{h("Retry-After", "-3"), 0, 0},
		{h("Retry-After", "soon"), 0, 0},
		{h("Retry-After", future), 80 * time.Second, 91 * time.Second},
	}
	for _, tt := range tests {
		got := llm.RetryAfter(tt.h)
		if got < tt.min || got > tt.max {
			t.Errorf("RetryAfter(%v) = %v, want [%v, %v]", tt.h, got, tt.min, tt.max)
		}
	}
}

func TestThinkingClamp(t *testing.T) {
	yes := true
	plain := &llm.Model{Reasoning: false}
	reasoning := &llm.Model{Reasoning: true}
	xhigh := &llm.Model{Reasoning: true, Compat: &llm.Compat{SupportsXHigh: &yes}}
	tests := []struct {
		m    *llm.Model
		in   llm.ThinkingLevel
		want llm.ThinkingLevel
	}{
		{plain, llm.ThinkingHigh, llm.ThinkingOff},
		{reasoning, llm.ThinkingMinimal, llm.ThinkingMinimal},
		{reasoning, llm.ThinkingXHigh, llm.ThinkingHigh},
		{xhigh, llm.ThinkingXHigh, llm.ThinkingXHigh},
		{reasoning, "", llm.ThinkingOff},
	}
	for _, tt := range tests {
		if got := tt.m.ClampThinking(tt.in); got != tt.want {
			t.Errorf("ClampThinking(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if _, err := llm.ParseThinkingLevel("huge"); err == nil {
		t.Error("ParseThinkingLevel accepted huge")
	}
}

func TestCalculateCost(t *testing.T) {
	m := &llm.Model{Cost: llm.ModelCost{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75}}
	u := llm.Usage{Input: 1000, Output: 2000, CacheRead: 10000, CacheWrite: 4000}
	m.CalculateCost(&u)
	if u.TotalTokens != 17000 {
		t.Errorf("total tokens %d", u.TotalTokens)
	}
	want := 0.003 + 0.03 + 0.003 + 0.015
	if d := u.Cost.Total - want; d > 1e-12 || d < -1e-12 {
		t.Errorf("cost %v, want %v", u.Cost.Total, want)
	}
}
