package sandbox

import (
	"fmt"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// Minimum Landlock ABI versions: 3 is the first that also refuses
// truncate(2) outside the writable paths (before it a file elsewhere
// could be emptied); 4 the first that restricts TCP.
const (
	minABIFiles   = 3
	minABINetwork = 4
)

// Support is what this kernel can enforce.
type Support struct {
	// ABI is the Landlock ABI version, 0 when there is none.
	ABI int
	// Err says why there is no (usable) Landlock.
	Err error
	// Isolation says why confined commands cannot get namespaces of
	// their own here (see ProbeIsolation); nil when they can or nobody
	// asked.
	Isolation error
}

// Probe asks the kernel which Landlock ABI it offers.
func Probe() Support {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil {
		return Support{Err: fmt.Errorf("this kernel offers no Landlock (%w); enable CONFIG_SECURITY_LANDLOCK and lsm=landlock", err)}
	}
	if v < minABIFiles {
		return Support{ABI: v, Err: fmt.Errorf("the kernel's Landlock ABI %d is too old (agentd needs 3, Linux 6.2 or later)", v)}
	}
	return Support{ABI: v}
}

// Enforces reports whether p can be enforced here, and if not why.
func (s Support) Enforces(p Policy) error {
	if !p.Confined() {
		return nil
	}
	if s.Err != nil {
		return s.Err
	}
	if !p.Network && s.ABI < minABINetwork {
		return fmt.Errorf("the kernel's Landlock ABI %d cannot restrict the network (needs 4, Linux 6.7 or later); allow the network or use full-access", s.ABI)
	}
	return nil
}

// String describes s for logs and health checks.
func (s Support) String() string {
	if s.Err != nil {
		return s.Err.Error()
	}
	if s.Isolation != nil {
		return fmt.Sprintf("Landlock ABI %d; commands not isolated: %v", s.ABI, s.Isolation)
	}
	return fmt.Sprintf("Landlock ABI %d", s.ABI)
}

// devices are the files every mode may write: discarding output and
// reading zeros is no escape.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/tty"}

// Restrict confines this process (every thread) and what it executes to
// p. It fails, never half-applies, when the kernel cannot enforce p.
func Restrict(p Policy) error {
	if !p.Confined() {
		return nil
	}
	if err := Probe().Enforces(p); err != nil {
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	// The V7 set of rights, downgraded to what the kernel knows; the
	// checks above made sure what we rely on is among them.
	base := landlock.V7
	cfg := landlock.Config{HandledAccessFS: base.HandledAccessFS}
	if !p.Network {
		cfg.HandledAccessNet = base.HandledAccessNet
		// Abstract UNIX sockets are a way out to servers outside as much
		// as TCP is.
		cfg.Scoped = landlock.ScopedSet(llsys.ScopeAbstractUnixSocket)
	}
	// Signals are not scoped: each command runs in a Landlock domain of
	// its own, and a scoped one could not stop the server an earlier
	// command of the same session started in the background.
	rules := []landlock.Rule{
		landlock.RODirs("/"),
		landlock.RWFiles(devices...).IgnoreIfMissing(),
	}
	if p.Mode == WorkspaceWrite && len(p.Writable) > 0 {
		// Refer lets mv and ln work between directories of the
		// workspace; the kernel still refuses moving a file out of it.
		rules = append(rules, landlock.RWDirs(p.Writable...).WithRefer().IgnoreIfMissing())
	}
	if err := cfg.BestEffort().Restrict(rules...); err != nil {
		return fmt.Errorf("applying Landlock rules: %w", err)
	}
	return nil
}

func execve(path string, argv, env []string) error { return syscall.Exec(path, argv, env) }
