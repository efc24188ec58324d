// Package llmtest is the model faked at the wire, for tests: the mock of
// package wiremock, started for a test and stopped when it ends, and the
// checks a provider's tests share (CheckGrammar, KeptDeltas, and Replay,
// a transport that answers with a recorded stream). Scripts and the server
// are wiremock's types; production code (the bench command) imports
// wiremock itself, never this package, and so carries no testing
// machinery.
package llmtest

import (
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// NewServer starts a mock and stops it when the test ends.
func NewServer(t testing.TB) *wiremock.Server {
	s := wiremock.NewUnstarted()
	s.Start()
	t.Cleanup(s.Close)
	return s
}
