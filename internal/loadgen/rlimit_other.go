//go:build !unix

package loadgen

import "errors"

// RaiseOpenFileLimit is not supported here.
func RaiseOpenFileLimit() (uint64, error) {
	return 0, errors.New("open-file limit: not supported on this system")
}
