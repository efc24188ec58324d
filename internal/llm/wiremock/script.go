// Package wiremock serves local HTTP endpoints that stream exactly what
// the Anthropic Messages, OpenAI Chat Completions and OpenAI Responses
// APIs stream: the model faked at the wire. The bench command (package
// loadgen) serves it to the server it measures; tests use it through
// package llmtest, which adds what ties it to a testing.TB. It imports
// neither testing nor net/http/httptest, so the agentd binary, which
// carries it for the bench, carries no test machinery. One Server answers all three APIs; each request takes
// the next queued Script (or asks a Handler) and renders it in the wire
// format of the path it arrived on.
package wiremock

import "time"

// Script is what one model response should look like on the wire. The
// zero Script is an empty successful answer.
type Script struct {
	// Status, when set and not 200, answers with that HTTP status and the
	// API's error body built from ErrorType and ErrorMessage.
	Status       int
	ErrorType    string // e.g. "overloaded_error", "rate_limit_error", "context_length_exceeded"
	ErrorMessage string
	// RetryAfter is sent as the Retry-After header; RetryAfterMs as retry-after-ms.
	RetryAfter   string
	RetryAfterMs string
	// Headers are added to the response.
	Headers map[string]string

	Thinking          []string // thinking deltas
	ThinkingSignature string
	RedactedThinking  string   // Anthropic redacted_thinking payload, if any
	Text              []string // text deltas
	ToolCalls         []ToolCall
	// Stop is the finish reason in agentd's terms ("stop", "length",
	// "toolUse"); empty means toolUse when there are tool calls, else stop.
	Stop string
	// Usage is reported at the end of the stream (nil: zero usage).
	Usage *Usage
	// ResponseID is the provider's response id (a default is generated).
	ResponseID string

	// Delay is slept before every content-delta frame but the first
	// (structural frames go out at once, as from the real APIs).
	Delay time.Duration
	// FirstDelay is slept before the response headers are written.
	FirstDelay time.Duration
	// CutAfter > 0 closes the connection after that many wire events,
	// without the API's terminating frames.
	CutAfter int
	// MalformedAfter > 0 sends a chunk that is not valid JSON after that
	// many wire events, then closes.
	MalformedAfter int
	// HangAfter > 0 stops sending after that many wire events and holds
	// the connection open until the client goes away.
	HangAfter int
	// StreamError, when set, is sent as the API's in-stream error event
	// after the content, in place of the normal end.
	StreamError *StreamError
	// NoUsageInStream makes the OpenAI Chat Completions mock behave like
	// an OpenAI-compatible server that ignores stream_options.include_usage.
	NoUsageInStream bool
	// Raw, when set, is written verbatim as an event-stream body: a
	// recorded stream replayed byte for byte.
	Raw []byte
}

// ToolCall is a scripted tool call whose argument JSON arrives in the
// given chunks.
type ToolCall struct {
	ID   string
	Name string
	Args []string
}

// Usage is the token accounting a mock reports.
type Usage struct {
	Input      int64
	Output     int64
	CacheRead  int64
	CacheWrite int64
	Reasoning  int64 // reported by OpenAI APIs inside output tokens
}

// StreamError is an error reported inside a 200 stream.
type StreamError struct {
	Type    string
	Message string
}

// StopReason returns the script's stop reason with the default applied.
func (s *Script) StopReason() string {
	if s.Stop != "" {
		return s.Stop
	}
	if len(s.ToolCalls) > 0 {
		return "toolUse"
	}
	return "stop"
}
