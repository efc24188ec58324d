package llm

import (
	"context"
	"encoding/json"
	"time"
)

// Tool is a tool the model may call: its name, what it does, and the JSON
// Schema of its arguments.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Context is everything a model is sent for one response.
type Context struct {
	SystemPrompt string
	Messages     []Message
	Tools        []Tool
}

// StreamOptions are the per-request settings. Everything a provider sends
// comes from here or from the Model: providers never read the environment.
type StreamOptions struct {
	// APIKey authenticates the request. Empty sends no key (local servers).
	APIKey string
	// Headers are added to the request after the model's own headers.
	Headers map[string]string
	// Thinking is the requested level; providers clamp it with
	// Model.ClampThinking.
	Thinking ThinkingLevel
	// ThinkingBudgets overrides the token budget per level for APIs that
	// take a budget (Anthropic). Zero entries use DefaultThinkingBudget.
	ThinkingBudgets map[ThinkingLevel]int64
	// MaxTokens caps the response; 0 uses DefaultMaxTokens(model).
	MaxTokens int64
	// Temperature is sent when set.
	Temperature *float64
	// IdleTimeout fails the stream when nothing arrives for that long,
	// including the wait for the first byte. 0 disables it.
	IdleTimeout time.Duration
	// SessionID keys prompt caching where the API supports it.
	SessionID string
}

// Provider streams assistant messages from one wire API. Implementations
// are safe for concurrent use; each Stream is used by one goroutine.
type Provider interface {
	Stream(ctx context.Context, m *Model, c *Context, o *StreamOptions) *Stream
}

// DefaultMaxTokens is the response cap used when a request sets none: the
// model's maximum output, but at most 32000 so a default request does not
// reserve a huge share of the context window.
func DefaultMaxTokens(m *Model) int64 {
	if m.MaxTokens > 0 && m.MaxTokens < 32000 {
		return m.MaxTokens
	}
	return 32000
}

// DefaultThinkingBudget is the token budget for a thinking level on APIs
// that take a budget.
func DefaultThinkingBudget(l ThinkingLevel) int64 {
	switch l {
	case ThinkingMinimal:
		return 1024
	case ThinkingLow:
		return 4096
	case ThinkingMedium:
		return 10240
	case ThinkingHigh:
		return 20480
	case ThinkingXHigh:
		return 32768
	}
	return 0
}

// ThinkingBudget returns the budget for l under o's overrides.
func (o *StreamOptions) ThinkingBudget(l ThinkingLevel) int64 {
	if b := o.ThinkingBudgets[l]; b > 0 {
		return b
	}
	return DefaultThinkingBudget(l)
}

// ReasoningEffort maps a thinking level to the effort string of OpenAI's
// reasoning_effort / reasoning.effort ("" for off).
func ReasoningEffort(l ThinkingLevel) string {
	if l == ThinkingOff || l == "" {
		return ""
	}
	return string(l)
}
