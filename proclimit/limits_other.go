//go:build !linux

package proclimit

// Probe says that nothing is enforced: limits need Linux.
func Probe(lim Limits, _ bool) Enforcement {
	if lim.None() {
		return Enforcement{}
	}
	return Enforcement{Missing: []string{"processes, memory and CPU time (not supported on this system)"}}
}

func physicalMemory() int64 { return 0 }
