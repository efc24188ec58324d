package llm

import "fmt"

// ThinkingLevel is how hard a reasoning model is asked to think.
type ThinkingLevel string

// Thinking levels, as in pi.
const (
	ThinkingOff     ThinkingLevel = "off"
	ThinkingMinimal ThinkingLevel = "minimal"
	ThinkingLow     ThinkingLevel = "low"
	ThinkingMedium  ThinkingLevel = "medium"
	ThinkingHigh    ThinkingLevel = "high"
	ThinkingXHigh   ThinkingLevel = "xhigh"
)

// ThinkingLevels lists every level from least to most effort.
var ThinkingLevels = [...]ThinkingLevel{ThinkingOff, ThinkingMinimal, ThinkingLow, ThinkingMedium, ThinkingHigh, ThinkingXHigh}

// ParseThinkingLevel validates s.
func ParseThinkingLevel(s string) (ThinkingLevel, error) {
	for _, l := range ThinkingLevels {
		if string(l) == s {
			return l, nil
		}
	}
	return "", fmt.Errorf("invalid thinking level %q: want one of off, minimal, low, medium, high, xhigh", s)
}

// ModelCost is a price list in dollars per million tokens.
type ModelCost struct {
	Input      float64 `json:"input"`
	Output     float64 `json:"output"`
	CacheRead  float64 `json:"cacheRead"`
	CacheWrite float64 `json:"cacheWrite"`
}

// Compat describes what an OpenAI-compatible server does differently from
// OpenAI itself. The zero value means "behave like api.openai.com"; nil
// pointers mean "not set, use the default".
type Compat struct {
	// SupportsStore: send store=false (OpenAI does; many servers reject the field).
	SupportsStore *bool `json:"supportsStore,omitempty"`
	// SupportsDeveloperRole: send the system prompt as role "developer" to reasoning models.
	SupportsDeveloperRole *bool `json:"supportsDeveloperRole,omitempty"`
	// SupportsReasoningEffort: send reasoning_effort / reasoning.effort.
	SupportsReasoningEffort *bool `json:"supportsReasoningEffort,omitempty"`
	// SupportsUsageInStreaming: ask for stream_options.include_usage.
	SupportsUsageInStreaming *bool `json:"supportsUsageInStreaming,omitempty"`
	// MaxTokensField is "max_completion_tokens" (OpenAI) or "max_tokens" (most others).
	MaxTokensField string `json:"maxTokensField,omitempty"`
	// SupportsStrictMode: mark function tools strict.
	SupportsStrictMode *bool `json:"supportsStrictMode,omitempty"`
	// SupportsXHigh: the model accepts the xhigh reasoning effort.
	SupportsXHigh *bool `json:"supportsXHigh,omitempty"`
	// AdaptiveThinking: Anthropic models that take thinking {type: adaptive}
	// with an effort instead of a token budget.
	AdaptiveThinking *bool `json:"adaptiveThinking,omitempty"`
}

// Flag reads an optional compat flag with its default.
func Flag(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

// Model describes one model a provider serves. The JSON shape is pi's, so
// get_state and get_available_models show it as pi does.
type Model struct {
	ID            string            `json:"id"`
	Name          string            `json:"name"`
	API           API               `json:"api"`
	Provider      string            `json:"provider"`
	BaseURL       string            `json:"baseUrl"`
	Reasoning     bool              `json:"reasoning"`
	Input         []string          `json:"input"`
	Cost          ModelCost         `json:"cost"`
	ContextWindow int64             `json:"contextWindow"`
	MaxTokens     int64             `json:"maxTokens"`
	Headers       map[string]string `json:"headers,omitempty"`
	Compat        *Compat           `json:"compat,omitempty"`
}

// CompatOrDefault returns the model's compat settings, never nil.
func (m *Model) CompatOrDefault() Compat {
	if m.Compat == nil {
		return Compat{}
	}
	return *m.Compat
}

// SupportsImages reports whether the model takes image input.
func (m *Model) SupportsImages() bool {
	for _, in := range m.Input {
		if in == "image" {
			return true
		}
	}
	return false
}

// ClampThinking maps a requested level to the nearest one the model
// supports: off for models that do not reason, high for xhigh where the
// model has no xhigh.
func (m *Model) ClampThinking(l ThinkingLevel) ThinkingLevel {
	if !m.Reasoning || l == "" {
		return ThinkingOff
	}
	if l == ThinkingXHigh && !Flag(m.CompatOrDefault().SupportsXHigh, false) {
		return ThinkingHigh
	}
	return l
}

// CalculateCost prices u with the model's price list, filling u.Cost and
// u.TotalTokens.
func (m *Model) CalculateCost(u *Usage) {
	u.TotalTokens = u.Input + u.Output + u.CacheRead + u.CacheWrite
	u.Cost.Input = float64(u.Input) * m.Cost.Input / 1e6
	u.Cost.Output = float64(u.Output) * m.Cost.Output / 1e6
	u.Cost.CacheRead = float64(u.CacheRead) * m.Cost.CacheRead / 1e6
	u.Cost.CacheWrite = float64(u.CacheWrite) * m.Cost.CacheWrite / 1e6
	u.Cost.Total = u.Cost.Input + u.Cost.Output + u.Cost.CacheRead + u.Cost.CacheWrite
}
