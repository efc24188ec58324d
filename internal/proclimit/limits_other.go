//go:build !linux

package proclimit

// Probe says that nothing is enforced: limits need Linux.
func Probe(lim Limits, _ bool, _ string) Enforcement {
	if lim.None() {
		return Enforcement{}
	}
	return Enforcement{Missing: []string{"processes, memory and CPU time (not supported on this system)"}}
}

func physicalMemory() int64 { return 0 }

// PrepareCgroup2 does nothing: cgroups are Linux's.
func PrepareCgroup2() (base, note string) { return "", "" }
