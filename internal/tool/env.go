package tool

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentd-dev/agentd/internal/sandbox"
)

// Env is what the built-in tools know about the session they serve. The
// package reads nothing from the process environment: everything a tool
// needs (working directory, home, the child environment for bash) comes
// from here, so one server can host sessions with different settings.
// The tools built from an Env keep no per-call state and are safe for
// concurrent use.
type Env struct {
	// Cwd is the session's working directory; relative paths in tool
	// arguments resolve against it and bash runs in it. It should be
	// absolute (a relative Cwd is made absolute once, at construction);
	// empty means "/", so callers must set it.
	Cwd string
	// Home expands "~" and "~/..." in path arguments. Empty leaves a
	// leading "~" as a literal file name.
	Home string
	// Locks serialises write and edit calls that target the same file.
	// Nil gives the tools built from this Env (one Builtins call) a set of
	// their own; a server hosting several sessions passes one FileLocks to
	// all of them, so two sessions editing one file never interleave.
	Locks *FileLocks
	// TempDir receives bash's full-output files when its output is
	// truncated, in a directory per Scope. Empty means "/tmp".
	TempDir string
	// Supervisor is the argv that starts agentd's process supervisor
	// (the running agentd binary and SuperviseCommand); the command line
	// to supervise is appended. With it, everything a bash run starts,
	// setsid'd and double-forked processes included, ends on abort,
	// timeout, Scope.Close and agentd's own death. Empty (or on systems
	// other than Linux) runs bash directly in its own process group, with
	// a parent-death signal for the shell only.
	Supervisor []string
	// Scope owns the processes bash runs leave alive and their output
	// files; closing it ends them. Pass the same Scope to the tools and
	// the user's commands of one session (the session closes it). Nil
	// gives the tools built from this Env (one Builtins call) a Scope of
	// their own that nothing closes: what they leave lives until it ends
	// or agentd does, and RemoveStaleSpill deletes the files afterwards.
	Scope *Scope
	// Shell runs bash commands as `Shell -c command`. Empty picks
	// /bin/bash, then bash on Environ's PATH, then /bin/sh.
	Shell string
	// ShellPrefix, when set, is run before every bash command (joined
	// with a newline), e.g. "shopt -s expand_aliases".
	ShellPrefix string
	// Environ is the complete environment of bash's child processes, in
	// os.Environ form. Callers pass the server's environment explicitly.
	// Nil gives a minimal environment: a conventional PATH, plus HOME
	// when Home is set.
	Environ []string
	// Sandbox confines the processes bash starts and the files write and
	// edit may change (see package sandbox); nil runs them with agentd's
	// own rights. Share one Box between the tools of a session: a
	// person's "always allow" widens it for all of them.
	Sandbox *sandbox.Box
	// ReadAlso are real paths (links resolved) of files and directories
	// the file tools may read even where the sandbox hides them: the
	// session's skills, which its system prompt tells the model to read.
	// They grant reading only, never writing.
	ReadAlso []string
	// UseExternal lets grep and find use ripgrep (rg) and fd when they
	// are on Environ's PATH. Off, or when they are missing, the built-in
	// Go implementations run; they need nothing installed.
	UseExternal bool
}

// defaultPath is the PATH bash gets when the caller passes no environment.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// BuiltinNames lists the built-in tools in the order pi presents them.
var BuiltinNames = []string{"read", "bash", "edit", "write", "grep", "find", "ls"}

// Builtins returns the seven built-in tools, in BuiltinNames order, sharing
// one Env (and so one FileLocks).
func Builtins(env Env) []Tool {
	env = env.normalize()
	out := make([]Tool, 0, len(BuiltinNames))
	for _, name := range BuiltinNames {
		t, _ := newNormalized(name, env)
		out = append(out, t)
	}
	return out
}

// New returns the built-in tool called name, or an error naming the known
// tools when there is none.
func New(name string, env Env) (Tool, error) {
	return newNormalized(name, env.normalize())
}

func newNormalized(name string, env Env) (Tool, error) {
	switch name {
	case "read":
		return &readTool{env: env}, nil
	case "bash":
		return &bashTool{env: env}, nil
	case "edit":
		return &editTool{env: env}, nil
	case "write":
		return &writeTool{env: env}, nil
	case "grep":
		return &grepTool{env: env, inMemory: grepInMemory}, nil
	case "find":
		return &findTool{env: env}, nil
	case "ls":
		return &lsTool{env: env}, nil
	}
	return nil, fmt.Errorf("tool: unknown built-in tool %q (known: %s)", name, strings.Join(BuiltinNames, ", "))
}

// NewRead returns the read tool.
func NewRead(env Env) Tool { return &readTool{env: env.normalize()} }

// NewWrite returns the write tool.
func NewWrite(env Env) Tool { return &writeTool{env: env.normalize()} }

// NewEdit returns the edit tool.
func NewEdit(env Env) Tool { return &editTool{env: env.normalize()} }

// NewBash returns the bash tool.
func NewBash(env Env) Tool { return &bashTool{env: env.normalize()} }

// NewGrep returns the grep tool.
func NewGrep(env Env) Tool { return &grepTool{env: env.normalize(), inMemory: grepInMemory} }

// NewFind returns the find tool.
func NewFind(env Env) Tool { return &findTool{env: env.normalize()} }

// NewLs returns the ls tool.
func NewLs(env Env) Tool { return &lsTool{env: env.normalize()} }

// normalize fills defaults once, at construction, so Execute never has to
// decide them (and never races on them).
func (e Env) normalize() Env {
	if e.Cwd == "" {
		e.Cwd = "/"
	}
	if !filepath.IsAbs(e.Cwd) {
		if abs, err := filepath.Abs(e.Cwd); err == nil {
			e.Cwd = abs
		}
	}
	e.Cwd = filepath.Clean(e.Cwd)
	if e.Locks == nil {
		// Builtins normalises once, so its tools share this set. A server
		// hosting several sessions passes one FileLocks to all of them.
		e.Locks = &FileLocks{}
	}
	if e.TempDir == "" {
		e.TempDir = "/tmp"
	}
	if e.Scope == nil {
		e.Scope = &Scope{}
	}
	e.Supervisor = append([]string(nil), e.Supervisor...)
	if e.Environ == nil {
		e.Environ = []string{"PATH=" + defaultPath}
		if e.Home != "" {
			e.Environ = append(e.Environ, "HOME="+e.Home)
		}
	} else {
		// Copy: the caller may reuse its slice, and exec.Cmd keeps ours.
		e.Environ = append([]string(nil), e.Environ...)
	}
	if e.Shell == "" {
		e.Shell = findShell(e.Environ)
	} else if !strings.ContainsRune(e.Shell, filepath.Separator) {
		// A bare name is looked up on the session's PATH, not ours.
		if p := lookPath(e.Shell, e.Environ); p != "" {
			e.Shell = p
		}
	}
	return e
}

func findShell(environ []string) string {
	if isExecutable("/bin/bash") {
		return "/bin/bash"
	}
	if p := lookPath("bash", environ); p != "" {
		return p
	}
	return "/bin/sh"
}

// lookPath searches the PATH of environ (not of this process) for an
// executable called name.
func lookPath(name string, environ []string) string {
	path := ""
	for _, kv := range environ {
		if strings.HasPrefix(kv, "PATH=") {
			path = kv[len("PATH="):]
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			// Relative PATH entries would depend on this process's
			// directory, which means nothing to a session.
			continue
		}
		if p := filepath.Join(dir, name); isExecutable(p) {
			return p
		}
	}
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
