//go:build !linux

package sandbox

import "errors"

// Support is what this system can enforce: nothing outside Linux.
type Support struct {
	ABI       int
	Err       error
	Isolation error
}

// Probe reports that only Linux has Landlock.
func Probe() Support { return Support{Err: errors.New("the sandbox needs Linux (Landlock)")} }

// Enforces reports whether p can be enforced here.
func (s Support) Enforces(p Policy) error {
	if !p.Confined() {
		return nil
	}
	return s.Err
}

// String describes s.
func (s Support) String() string { return s.Err.Error() }

// Restrict fails for every confining policy outside Linux.
func Restrict(p Policy) error {
	if !p.Confined() {
		return nil
	}
	return ErrUnsupported
}

func execve(string, []string, []string) error { return ErrUnsupported }
