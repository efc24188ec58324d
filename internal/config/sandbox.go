package config

import (
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Sandbox is how the tools of every session are confined (see package
// sandbox): the mode, whether they may use the network, and what to do
// where the kernel cannot confine them.
type Sandbox struct {
	// Mode is read-only, workspace-write or full-access. Each command
	// sets its default before Register: workspace-write for serve,
	// full-access for rpc (pi's RPC clients expect tools with their
	// rights).
	Mode string
	// Network lets tools connect and listen in the confining modes.
	Network bool
	// AllowWrite are more directories workspace-write lets tools write
	// under (a build cache such as ~/.cache/go-build, a shared .git).
	AllowWrite StringList
	// Fallback is what to do where the kernel has no Landlock: "refuse"
	// to start or run "unconfined" with a warning. "" is refuse, but for
	// a server only its own machine reaches (see Serve.Check). Where
	// Landlock works but commands cannot get namespaces of their own,
	// "unconfined" keeps Landlock and lets tools see agentd's processes
	// and files (with a warning); "refuse" refuses.
	Fallback string
	// EnvAllow are variables confined tools keep although their names
	// look secret (see sandbox.Scrub).
	EnvAllow StringList
	// Hide are more files and directories confined tools may not read,
	// besides the data and config directories and the key files agentd
	// is given.
	Hide StringList
}

// SandboxModes are the values of --sandbox, from the strictest: the
// modes of package sandbox, which config does not import (it holds plain
// values; cli turns them into a sandbox.Policy, and its tests check the
// two lists agree).
var SandboxModes = []string{"read-only", "workspace-write", "full-access"}

// Sandbox fallbacks.
const (
	SandboxRefuse     = "refuse"
	SandboxUnconfined = "unconfined"
)

// Register adds the sandbox flags to fs.
func (s *Sandbox) Register(fs *flag.FlagSet) {
	fs.StringVar(&s.Mode, "sandbox", s.Mode, "what tools may touch: read-only, workspace-write (the session's directory and the temp dir) or full-access (no sandbox)")
	fs.BoolVar(&s.Network, "sandbox-network", s.Network, "let tools use the network in read-only and workspace-write (agentd serve then requires a token even on loopback, and makes one in <data-dir>/server/token if none is given)")
	fs.Var(&s.AllowWrite, "sandbox-allow-write", "another directory workspace-write lets tools write under, absolute (repeatable), e.g. a build cache")
	fs.StringVar(&s.Fallback, "sandbox-fallback", s.Fallback, "where the kernel cannot confine tools (no Landlock, or no namespaces to hide agentd's processes and files): refuse to start, or run with what can be enforced (unconfined without Landlock) and a warning (when not given: refuse, but the latter for agentd acp and for agentd serve on loopback, so they start on any machine)")
	fs.Var(&s.EnvAllow, "sandbox-env-allow", "a variable confined tools keep although its name looks secret (*_KEY, *_TOKEN, *SECRET*, *PASSWORD*, *_CREDENTIALS...) (repeatable)")
	fs.Var(&s.Hide, "sandbox-hide", "another absolute file or directory confined tools may not read (repeatable), e.g. a credentials file; the data and config directories are always hidden")
}

// Check validates s.
func (s *Sandbox) Check() error {
	if !slices.Contains(SandboxModes, s.Mode) {
		return fmt.Errorf("--sandbox: sandbox mode %q: want read-only, workspace-write or full-access", s.Mode)
	}
	for _, d := range s.AllowWrite {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("--sandbox-allow-write %q: must be an absolute path", d)
		}
	}
	for _, d := range s.Hide {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("--sandbox-hide %q: must be an absolute path", d)
		}
	}
	for _, n := range s.EnvAllow {
		if n == "" || strings.ContainsAny(n, "= \t\n\x00") {
			return fmt.Errorf("--sandbox-env-allow %q: must be a variable name", n)
		}
	}
	if s.Fallback != "" && s.Fallback != SandboxRefuse && s.Fallback != SandboxUnconfined {
		return fmt.Errorf("--sandbox-fallback %q: want refuse or unconfined", s.Fallback)
	}
	return nil
}
