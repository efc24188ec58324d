// Package sandbox confines what the processes of a tool may do: where
// they may write and whether they may open TCP connections. On Linux it
// uses Landlock, applied by a small helper (agentd re-executed with
// Command) in the process that then executes the command, so the rules
// bind the command and everything it starts, and nothing it starts can
// lift them.
//
// Why a helper rather than rules applied in agentd: Landlock restricts
// the thread that asks and what it executes from then on, never its
// parent. agentd itself must stay unconfined (it writes sessions, talks
// to models), so the rules are applied in a fresh process between fork
// and the command's exec.
package sandbox

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Mode is how far a session's tools may reach.
type Mode string

// The modes.
const (
	// ReadOnly lets tools read the whole filesystem and write nothing
	// (except /dev/null and its kind).
	ReadOnly Mode = "read-only"
	// WorkspaceWrite lets tools write only under the session's working
	// directory and the temp dir.
	WorkspaceWrite Mode = "workspace-write"
	// FullAccess is no sandbox: tools run with agentd's own rights.
	FullAccess Mode = "full-access"
)

// Modes lists the modes from the strictest.
var Modes = []Mode{ReadOnly, WorkspaceWrite, FullAccess}

// ParseMode returns the mode named s.
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("sandbox mode %q: want read-only, workspace-write or full-access", s)
}

// rank orders modes from the strictest; an unknown mode ranks as the
// strictest, so a mistake never widens anything.
func (m Mode) rank() int {
	for i, x := range Modes {
		if x == m {
			return i
		}
	}
	return 0
}

// Stricter reports whether m allows less than other.
func (m Mode) Stricter(other Mode) bool { return m.rank() < other.rank() }

// Choose is the mode of a session whose client asks for want on a server
// that runs tools in base: "" is base; base or a stricter mode is granted;
// a looser or unknown mode is refused with a *ChoiceError. Every face
// that lets a client choose goes through this one rule.
func Choose(base Mode, want string) (Mode, error) {
	if base == "" {
		base = FullAccess
	}
	if want == "" {
		return base, nil
	}
	m, err := ParseMode(want)
	if err != nil || base.Stricter(m) {
		return "", &ChoiceError{Want: want, Base: base, Known: err == nil}
	}
	return m, nil
}

// ChoiceError refuses a mode a client asked for.
type ChoiceError struct {
	// Want is what was asked for.
	Want string
	// Base is the server's mode, the loosest a session may have.
	Base Mode
	// Known says Want is a mode, only looser than Base.
	Known bool
}

// Allowed are the modes a session may choose, from the strictest.
func (e *ChoiceError) Allowed() []Mode {
	var out []Mode
	for _, m := range Modes {
		if !e.Base.Stricter(m) {
			out = append(out, m)
		}
	}
	return out
}

func (e *ChoiceError) Error() string {
	names := make([]string, 0, len(Modes))
	for _, m := range e.Allowed() {
		names = append(names, string(m))
	}
	allowed := names[0]
	if n := len(names); n > 1 {
		allowed = strings.Join(names[:n-1], ", ") + " or " + names[n-1]
	}
	// The client learns what it may send instead; a looser mode also
	// learns why, since it is a valid mode on another server.
	if e.Known {
		return fmt.Sprintf("Sandbox mode %s is not allowed: this server runs tools in %s, and a session may only choose that or a stricter mode; sandbox must be %s", e.Want, e.Base, allowed)
	}
	return fmt.Sprintf("Unknown sandbox mode %q: sandbox must be %s", e.Want, allowed)
}

// Policy is what the processes of one command may do.
type Policy struct {
	Mode Mode
	// Network allows TCP connect and bind. FullAccess always has it.
	Network bool
	// Writable are the directories WorkspaceWrite may write under (the
	// working directory and the temp dir); other modes only keep them
	// visible (see Hidden).
	Writable []string
	// Hidden are files and directories confined commands must not read:
	// agentd's data and config directories, key and token files, other
	// sessions' workspaces. They are covered by empty ones in the
	// command's own mount namespace; a Writable directory under one of
	// them stays as it is.
	Hidden []string
	// NoIsolation runs confined commands in agentd's own PID and mount
	// namespaces: they may see agentd's processes and Hidden is not
	// applied. Only set where the system gives no namespaces and the
	// configuration said to go on anyway (--sandbox-fallback unconfined).
	NoIsolation bool
}

// Confined reports whether p restricts anything, i.e. whether commands
// must run under the helper.
func (p Policy) Confined() bool { return p.Mode != FullAccess }

// Describe says what p allows, for people and the model.
func (p Policy) Describe() string {
	var fs string
	switch p.Mode {
	case FullAccess:
		return "full-access (no sandbox)"
	case ReadOnly:
		fs = "read-only: no writes anywhere"
	default:
		fs = "workspace-write: writes only under " + strings.Join(p.Writable, " and ")
		if p.writesAnywhere() {
			fs = "workspace-write, widened: writes anywhere"
		}
	}
	if p.Network {
		fs += "; network allowed"
	} else {
		fs += "; no network"
	}
	if p.NoIsolation {
		fs += "; not isolated from agentd's processes and files"
	}
	return fs
}

// AllowsWrite reports whether a tool may write the file at path, which
// must be absolute with its symbolic links resolved (see RealPath), as
// must the Writable directories.
func (p Policy) AllowsWrite(path string) bool {
	switch p.Mode {
	case FullAccess:
		return true
	case WorkspaceWrite:
		for _, dir := range p.Writable {
			if within(path, dir) {
				return true
			}
		}
	}
	return false
}

// AllowsRead reports whether a tool may read the file at path (absolute,
// links resolved, see RealPath): not under a Hidden path, unless under
// one of the session's own (Writable) directories that lies deeper, as
// the command's mounts show it.
func (p Policy) AllowsRead(path string) bool {
	if !p.Confined() {
		return true
	}
	hidden, shown := -1, -1
	for _, h := range p.Hidden {
		if within(path, h) {
			hidden = max(hidden, len(h))
		}
	}
	for _, w := range p.Writable {
		if within(path, w) {
			shown = max(shown, len(w))
		}
	}
	return hidden < 0 || shown >= hidden
}

// ShowsWithin reports whether one of the session's own (Writable)
// directories lies within dir: a hidden dir is then still there to walk
// through, to that one.
func (p Policy) ShowsWithin(dir string) bool {
	return slices.ContainsFunc(p.Writable, func(w string) bool { return within(w, dir) })
}

func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// Need is the access a refused command would need.
type Need struct {
	Write   bool // to write outside what the mode allows
	Network bool // to connect or listen
}

// Any reports whether anything is needed.
func (n Need) Any() bool { return n.Write || n.Network }

// Describe is what the command wants under p, in the words of an
// approval; Widen grants exactly that and nothing else.
func (n Need) Describe(p Policy) string {
	write := "write outside the workspace"
	if p.Mode == ReadOnly {
		write = "write files in the workspace"
	}
	switch {
	case n.Write && n.Network:
		return write + " and use the network"
	case n.Network:
		return "use the network"
	default:
		return write
	}
}

// Widen returns p with exactly the access n.Describe(p) names added,
// still confined in everything else: in read-only, writes become those
// of workspace-write (under p.Writable: the workspace, the temp dir and
// the directories allowed to be written); in workspace-write, writes
// are allowed anywhere; network turns the network on. Writes never
// bring the network with them, nor the network writes.
func (p Policy) Widen(n Need) Policy {
	if n.Write {
		switch p.Mode {
		case ReadOnly:
			p.Mode = WorkspaceWrite
		case WorkspaceWrite:
			p.Writable = []string{string(filepath.Separator)}
		}
	}
	if n.Network {
		p.Network = true
	}
	return p
}

// writesAnywhere reports whether p's writable directories include the
// root, as after Widen granted writes outside the workspace.
func (p Policy) writesAnywhere() bool {
	return slices.Contains(p.Writable, string(filepath.Separator))
}

// Diagnose guesses, from a failed command's output, whether the sandbox
// refused it and what it needed. Landlock answers a refused write or
// connect with EACCES ("Permission denied"), and programs print that
// with their own words around it; a refused write of a read-only
// bind-mounted path may say EROFS. This is a heuristic: a command that
// fails on ordinary file permissions is diagnosed too, and rerunning it
// with more access then fails the same way, which costs a question, not
// safety.
func Diagnose(p Policy, output string) Need {
	if !p.Confined() {
		return Need{}
	}
	lower := strings.ToLower(output)
	denied := strings.Contains(lower, "permission denied") || strings.Contains(lower, "operation not permitted") ||
		strings.Contains(lower, "read-only file system") || strings.Contains(lower, "eacces") || strings.Contains(lower, "eperm")
	if !denied {
		return Need{}
	}
	var n Need
	if !p.Network {
		for _, w := range networkWords {
			if strings.Contains(lower, w) {
				n.Network = true
				break
			}
		}
	}
	if !n.Network {
		n.Write = true
	}
	return n
}

// networkWords mark a refusal as a network one: how curl, wget, ssh,
// git, nc, python and Go's net package report a failed connect or bind.
var networkWords = []string{
	"connect", "connection", "bind", "socket", "network", "could not resolve", "unable to access",
	"curl:", "wget", "ssh:", "dial tcp", "listen tcp", "urlopen", "fetch",
}

// ErrUnsupported is what Restrict returns where the kernel cannot
// enforce a policy.
var ErrUnsupported = errors.New("sandbox: this kernel cannot enforce the sandbox (Landlock unavailable)")

// Scrub returns environ without the variables that look like secrets,
// except those named in allow: the server token, and every name that
// (ignoring case) ends in _KEY, _TOKEN, _CREDENTIALS or _PAT, or holds
// SECRET, PASSWORD or PASSWD: provider keys (models.json names them by
// convention), GITHUB_TOKEN, AWS_SECRET_ACCESS_KEY,
// ANTHROPIC_AUTH_TOKEN, GOOGLE_APPLICATION_CREDENTIALS and their kind.
// Tools rarely need them, a confined command that could read them could
// send them anywhere it may write, and a person who wants one passed on
// names it (--sandbox-env-allow).
func Scrub(environ []string, allow ...string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if SecretName(name) && !slices.Contains(allow, name) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// SecretName reports whether Scrub drops a variable called name.
func SecretName(name string) bool {
	n := strings.ToUpper(name)
	for _, s := range []string{"_KEY", "APIKEY", "_TOKEN", "_CREDENTIALS", "_PAT"} {
		if strings.HasSuffix(n, s) {
			return true
		}
	}
	for _, s := range []string{"SECRET", "PASSWORD", "PASSWD"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	switch n {
	case "TOKEN":
		return true
	}
	return false
}
