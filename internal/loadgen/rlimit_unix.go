//go:build unix

package loadgen

import (
	"fmt"
	"syscall"
)

// RaiseOpenFileLimit raises this process's soft limit on open files to its
// hard limit and returns the new soft limit. N sessions need N sockets in
// the bench and N (plus the mock's) in the server. Go already raises its
// own soft limit at start but restores the old one in child processes;
// setting it explicitly makes the server child inherit the raised limit.
func RaiseOpenFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("open-file limit: %w", err)
	}
	// Set even when Cur is already Max (Go raised it at start): only an
	// explicit Setrlimit stops Go restoring the old limit in children.
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("raise open-file limit to %d: %w", lim.Max, err)
	}
	return lim.Cur, nil
}
