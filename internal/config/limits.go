package config

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/agentd-dev/agentd/internal/proclimit"
)

// ToolLimits bound what one bash command may spend (see package
// proclimit). Zero takes the default; a negative value means no limit.
type ToolLimits struct {
	// MaxProcs bounds the processes and threads of one command at once.
	MaxProcs int
	// MaxMemory bounds its memory in bytes.
	MaxMemory LimitSize
	// CPUTime bounds its CPU time.
	CPUTime time.Duration
}

// Register adds the limit flags to fs.
func (l *ToolLimits) Register(fs *flag.FlagSet) {
	fs.IntVar(&l.MaxProcs, "tool-max-procs", l.MaxProcs, fmt.Sprintf("processes and threads one bash command may have at once (0: the default, %d; negative: no limit)", proclimit.DefaultProcs))
	fs.Var(&l.MaxMemory, "tool-max-memory", "memory one bash command may use, e.g. 2GiB (default: half the machine's memory, at most 8GiB; none: no limit)")
	fs.DurationVar(&l.CPUTime, "tool-cpu-time", l.CPUTime, fmt.Sprintf("CPU time one bash command may use (0: the default, %v; negative: no limit)", proclimit.DefaultCPU))
}

// Limits are the limits l describes, defaults filled in.
func (l ToolLimits) Limits() proclimit.Limits {
	out := proclimit.Default()
	switch {
	case l.MaxProcs < 0:
		out.Procs = 0
	case l.MaxProcs > 0:
		out.Procs = l.MaxProcs
	}
	switch {
	case l.MaxMemory < 0:
		out.Memory = 0
	case l.MaxMemory > 0:
		out.Memory = int64(l.MaxMemory)
	}
	switch {
	case l.CPUTime < 0:
		out.CPU = 0
	case l.CPUTime > 0:
		out.CPU = l.CPUTime
	}
	return out
}

// Check validates l, naming the flag that is wrong.
func (l ToolLimits) Check() error {
	if l.MaxMemory > 0 && l.MaxMemory < proclimit.MinMemory {
		return fmt.Errorf("--tool-max-memory %d: must be at least %dMiB (or none)", l.MaxMemory, proclimit.MinMemory>>20)
	}
	if l.CPUTime > 0 && l.CPUTime < time.Second {
		return fmt.Errorf("--tool-cpu-time %v: must be at least 1s (or negative: no limit)", l.CPUTime)
	}
	if l.MaxProcs > 0 && l.MaxProcs < proclimit.MinProcs {
		return fmt.Errorf("--tool-max-procs %d: must be at least %d (or negative: no limit)", l.MaxProcs, proclimit.MinProcs)
	}
	return l.Limits().Check()
}

// LimitSize is a ByteSize flag that also takes "none" (-1).
type LimitSize int64

func (s *LimitSize) String() string {
	switch {
	case s == nil || *s == 0:
		return ""
	case *s < 0:
		return "none"
	}
	b := ByteSize(*s)
	return b.String()
}

// Set parses a size such as 2GiB, or none.
func (s *LimitSize) Set(v string) error {
	if strings.TrimSpace(v) == "none" {
		*s = -1
		return nil
	}
	var b ByteSize
	if err := b.Set(v); err != nil {
		return fmt.Errorf("%w, or none", err)
	}
	*s = LimitSize(b)
	return nil
}
