// Package proclimit bounds what one command may spend: how many
// processes (and threads) it may have at once, how much memory and how
// much CPU time. agentd's process supervisor (see tool.Supervise) applies
// the limits to each bash command it runs, whatever the sandbox mode.
//
// Where the limits come from depends on the machine, from the best:
//   - a cgroup per command: pids.max, memory.max (memory.limit_in_bytes)
//     and the CPU time the cgroup accounts, in a cgroup v2 whose
//     controllers are enabled for agentd, or in the cgroup v1 pids and
//     memory hierarchies when those are writable (as root in many
//     containers). These count the whole command together, and hitting
//     the process limit stops the command at once.
//   - rlimits per process otherwise: RLIMIT_DATA for memory (it counts
//     what a process allocates, not address space it only reserves, so
//     runtimes that reserve large regions still start) and RLIMIT_CPU
//     for CPU time, which bind root too; RLIMIT_NPROC for processes,
//     which the kernel does not apply to root, so as root without a
//     writable pids cgroup processes are not limited (Probe says so).
//
// The rlimits are set in every case, as a second line behind a cgroup.
package proclimit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Limits are what one command may spend. Zero in a field means no limit.
type Limits struct {
	// Procs bounds the processes and threads the command has at once.
	Procs int
	// Memory bounds the memory, in bytes, the command (with a cgroup) or
	// each of its processes (with rlimits only) may allocate.
	Memory int64
	// CPU bounds the CPU time the command (with a cgroup) or each of its
	// processes (with rlimits only) may use.
	CPU time.Duration
}

// The defaults, for a command a model runs: far above what builds and
// test suites need on a workstation, far below what takes a machine down.
const (
	DefaultProcs = 2048
	// DefaultMemoryCap caps the memory default, which is otherwise half
	// of the machine's memory.
	DefaultMemoryCap = 8 << 30
	DefaultCPU       = time.Hour
	// MinMemory is the smallest memory limit accepted: below it the
	// shell and agentd's own helpers cannot start.
	MinMemory = 32 << 20
	// MinProcs is the smallest process limit accepted: the command's
	// first process is agentd, whose runtime starts a few threads.
	MinProcs = 32
)

// None reports whether l limits nothing.
func (l Limits) None() bool { return l.Procs <= 0 && l.Memory <= 0 && l.CPU <= 0 }

// Check reports a limit too small to run anything.
func (l Limits) Check() error {
	if l.Memory > 0 && l.Memory < MinMemory {
		return fmt.Errorf("memory limit %d bytes: must be at least %d MiB", l.Memory, MinMemory>>20)
	}
	if l.CPU > 0 && l.CPU < time.Second {
		return fmt.Errorf("CPU time limit %v: must be at least 1s", l.CPU)
	}
	if l.Procs > 0 && l.Procs < MinProcs {
		return fmt.Errorf("process limit %d: must be at least %d", l.Procs, MinProcs)
	}
	return nil
}

// String says what l allows, for logs and people.
func (l Limits) String() string {
	var parts []string
	if l.Procs > 0 {
		parts = append(parts, strconv.Itoa(l.Procs)+" processes")
	}
	if l.Memory > 0 {
		parts = append(parts, FormatBytes(l.Memory)+" of memory")
	}
	if l.CPU > 0 {
		parts = append(parts, l.CPU.String()+" of CPU time")
	}
	if len(parts) == 0 {
		return "no limits"
	}
	return strings.Join(parts, ", ")
}

// FormatBytes writes n in the largest binary unit that divides it.
func FormatBytes(n int64) string {
	for _, u := range []struct {
		name  string
		shift uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + " " + u.name
		}
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// The arguments that carry Limits on the supervisor's command line.
const (
	argProcs  = "--limit-procs="
	argMemory = "--limit-memory="
	argCPU    = "--limit-cpu-ms="
)

// Args writes l as command-line arguments that ParseArg reads back.
func (l Limits) Args() []string {
	var out []string
	if l.Procs > 0 {
		out = append(out, argProcs+strconv.Itoa(l.Procs))
	}
	if l.Memory > 0 {
		out = append(out, argMemory+strconv.FormatInt(l.Memory, 10))
	}
	if l.CPU > 0 {
		out = append(out, argCPU+strconv.FormatInt(l.CPU.Milliseconds(), 10))
	}
	return out
}

// ParseArg reads one argument Args wrote into l; ok is false for an
// argument that is not a limit, err set for a limit with a bad value.
func (l *Limits) ParseArg(a string) (ok bool, err error) {
	for _, p := range []string{argProcs, argMemory, argCPU} {
		v, found := strings.CutPrefix(a, p)
		if !found {
			continue
		}
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n <= 0 {
			return true, fmt.Errorf("bad limit %q", a)
		}
		switch p {
		case argProcs:
			if n > 1<<22 {
				return true, fmt.Errorf("bad limit %q", a)
			}
			l.Procs = int(n)
		case argMemory:
			l.Memory = n
		case argCPU:
			if n > int64(time.Duration(1<<62)/time.Millisecond) {
				return true, fmt.Errorf("bad limit %q", a)
			}
			l.CPU = time.Duration(n) * time.Millisecond
		}
		return true, nil
	}
	return false, nil
}

// Kind is a limit a command reached.
type Kind string

// The limits.
const (
	KindProcs  Kind = "procs"
	KindMemory Kind = "memory"
	KindCPU    Kind = "cpu"
)

// Reached says, for people and the model, that a command reached the
// limit of kind k under l.
func (l Limits) Reached(k Kind) string {
	switch k {
	case KindProcs:
		return fmt.Sprintf("it reached the limit of %d processes and threads at once (--tool-max-procs)", l.Procs)
	case KindMemory:
		return fmt.Sprintf("it reached the memory limit of %s and a process was killed (--tool-max-memory)", FormatBytes(l.Memory))
	case KindCPU:
		return fmt.Sprintf("it reached the limit of %v of CPU time (--tool-cpu-time)", l.CPU)
	}
	return "it reached a limit"
}

// ErrUnsupported is what the functions that need Linux return elsewhere.
var ErrUnsupported = errors.New("proclimit: not supported on this system")

// Enforcement says how each limit is enforced on this machine ("" for a
// limit that is not set or cannot be enforced; Missing then names the
// latter).
type Enforcement struct {
	Procs, Memory, CPU string
	Missing            []string
}

// Default is what a command may spend when nothing else is configured:
// DefaultProcs, DefaultCPU, and half of the machine's memory, at most
// DefaultMemoryCap.
func Default() Limits {
	mem := int64(DefaultMemoryCap)
	if ram := physicalMemory(); ram > 0 && ram/2 < mem {
		mem = max(ram/2, MinMemory)
	}
	return Limits{Procs: DefaultProcs, Memory: mem, CPU: DefaultCPU}
}
