//go:build !unix

package loadgen

import (
	"errors"
	"time"
)

func selfCPU() (time.Duration, error) {
	return 0, errors.New("cpu times of the bench: not on this system")
}
