//go:build unix

package loadgen

import (
	"fmt"
	"syscall"
	"time"
)

// selfCPU is the CPU time this process has used, all threads.
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("cpu times of the bench: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
