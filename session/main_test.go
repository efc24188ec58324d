package session_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every session goroutine (runs, retries, compactions) must be gone when
// its tests end; idle keep-alive connections of the HTTP client to the
// mock are the only thing allowed to outlive them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}
