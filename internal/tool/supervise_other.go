//go:build !linux

package tool

import (
	"context"
	"fmt"
	"os"
	"syscall"
)

// supervisorSupported: elsewhere bash runs without a supervisor (in its
// own process group, as before); Env.Supervisor is ignored.
const supervisorSupported = false

func directAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func startSupervised(Env, []string, *os.File, bool) (func(), <-chan shellExit, string) {
	return nil, nil, "Cannot start command: no process supervisor on this system"
}

// Supervise is the supervisor's main; it exists only on Linux.
func Supervise(context.Context, []string) int {
	fmt.Fprintf(os.Stderr, "agentd %s: not supported on this system\n", SuperviseCommand)
	return 2
}

// processStart reports whether pid is alive; start times are unknown
// here (0).
func processStart(pid int) (uint64, bool) {
	err := syscall.Kill(pid, 0)
	return 0, err == nil || err == syscall.EPERM
}
