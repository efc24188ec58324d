package session_test

import (
	"context"
	"os"
	"testing"

	"github.com/agentd-dev/agentd/internal/tool"
	"go.uber.org/goleak"
)

// Every session goroutine (runs, retries, compactions) must be gone when
// its tests end; idle keep-alive connections of the HTTP client to the
// mock are the only thing allowed to outlive them. Started as a bash
// run's process supervisor (procs_test.go), the test binary is that; as
// crashHelperCommand, a process running a session to be killed
// (restart_test.go).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == tool.SuperviseCommand {
		os.Exit(tool.Supervise(context.Background(), os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == crashHelperCommand {
		os.Exit(crashHelper(os.Args[2:]))
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}
