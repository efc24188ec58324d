// Package llmtest is the model faked at the wire, for tests: the mock of
// package wiremock, started for a test and stopped when it ends, and the
// checks a provider's tests share (CheckGrammar). The names below are
// wiremock's, so that a test needs one import; production code (the bench
// command) imports wiremock itself, never this package, and so carries no
// testing machinery.
package llmtest

import (
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// The mock's types (see package wiremock).
type (
	// Script is what one model response looks like on the wire.
	Script = wiremock.Script
	// ToolCall is one tool call of a Script.
	ToolCall = wiremock.ToolCall
	// Usage is a Script's token counts.
	Usage = wiremock.Usage
	// StreamError is an error a Script sends inside the stream.
	StreamError = wiremock.StreamError
	// Request is one request the mock received.
	Request = wiremock.Request
	// Wire renders scripts in one API's streaming format.
	Wire = wiremock.Wire
	// Handler picks the script for a request when none is queued.
	Handler = wiremock.Handler
	// Server is a mock of all three model APIs on 127.0.0.1.
	Server = wiremock.Server
)

// Paths the mock answers on.
const (
	PathAnthropicMessages = wiremock.PathAnthropicMessages
	PathChatCompletions   = wiremock.PathChatCompletions
	PathResponses         = wiremock.PathResponses
)

// NewServer starts a mock and stops it when the test ends.
func NewServer(t testing.TB) *Server {
	s := wiremock.NewUnstarted()
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// NewUnstarted returns a mock that is not yet listening (see
// wiremock.NewUnstarted).
func NewUnstarted() *Server { return wiremock.NewUnstarted() }

// SSE formats one event-stream frame (see wiremock.SSE).
func SSE(event string, data any) string { return wiremock.SSE(event, data) }
