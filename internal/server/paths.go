package server

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentd-dev/agentd/internal/fault"
)

// idChars reports whether s is not empty and every byte is an ASCII
// letter, digit, _, . or -: the regexp ^[a-zA-Z0-9_.-]+$ as a loop, so
// that nothing is compiled at start for it.
func idChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return s != ""
}

// CheckID applies pi-server's session id rule.
func CheckID(id string) error {
	switch {
	case id == "":
		return fault.New(fault.Invalid, "Validation failed: sessionId: Session ID must be a non-empty string")
	case len(id) > 256:
		return fault.New(fault.Invalid, "Validation failed: sessionId: Session ID too long (max 256 characters)")
	case !idChars(id):
		return fault.New(fault.Invalid, "Validation failed: sessionId: Session ID must contain only alphanumeric characters, underscores, dashes, and dots")
	}
	return nil
}

// CheckCwd applies the working-directory rule: an existing absolute
// directory, with no "..", "~" or NUL.
func CheckCwd(cwd string) error {
	if strings.HasPrefix(cwd, "~") || strings.ContainsRune(cwd, 0) || hasDotDot(cwd) {
		return fault.New(fault.Invalid, "Validation failed: cwd: CWD contains potentially dangerous path components")
	}
	if !filepath.IsAbs(cwd) {
		return fault.New(fault.Invalid, "Validation failed: cwd: must be an absolute path")
	}
	st, err := os.Stat(cwd)
	if err != nil || !st.IsDir() {
		return fault.Errorf(fault.Invalid, "Validation failed: cwd: %s is not a directory", cwd)
	}
	return nil
}

func hasDotDot(p string) bool {
	for _, part := range strings.Split(filepath.ToSlash(p), "/") {
		if part == ".." {
			return true
		}
	}
	return false
}

// Errors of the session-path rule (pi-server's wording).
const (
	msgPathNotAbs    = "sessionPath must be an absolute path"
	msgPathDangerous = "Validation failed: sessionPath: sessionPath contains potentially dangerous path components"
	msgPathExt       = "sessionPath must point to a .jsonl or .json session file"
)

// CheckSessionPath applies the allowed-directory rule to a session file a
// client names: absolute, no "..", no "~", a .jsonl/.json file, and, once
// every symlink is resolved, under the server's sessions directory (the
// data dir's), an allowed directory (--allow-session-dir),
// ~/.pi/agent/sessions or the .pi/sessions directory of the server's
// workspace (its working directory). Not any .pi/sessions directory on the
// host, as pi-server's spec once said: that opened every project's
// sessions to any client (pi-server 2.2.1 refuses them too). It returns the
// resolved path. A path outside those places is refused as such whether or
// not it exists, so the rule tells nothing about files elsewhere on the
// host.
func (s *Server) CheckSessionPath(p string) (string, error) {
	if strings.ContainsRune(p, 0) || strings.HasPrefix(p, "~") || hasDotDot(p) {
		return "", fault.New(fault.Invalid, msgPathDangerous)
	}
	if !filepath.IsAbs(p) {
		return "", fault.New(fault.Invalid, msgPathNotAbs)
	}
	if ext := filepath.Ext(p); ext != ".jsonl" && ext != ".json" {
		return "", fault.New(fault.Invalid, msgPathExt)
	}
	outside := fault.Errorf(fault.Forbidden, "sessionPath must be under an allowed session directory (%s)", strings.Join(s.allowedNames(), ", "))
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		// Resolve what exists of the path, so a symlinked directory
		// cannot be used to learn whether a file outside exists.
		if !s.allowed(resolveExisting(filepath.Clean(p))) {
			return "", outside
		}
		if errors.Is(err, os.ErrNotExist) {
			return "", fault.Errorf(fault.NotFound, "Session file %s does not exist", p)
		}
		return "", fault.Errorf(fault.Invalid, "Session file %s cannot be read", p)
	}
	if !s.allowed(real) {
		return "", outside
	}
	return real, nil
}

// allowed reports whether a resolved path lies where sessions may be
// loaded from.
func (s *Server) allowed(real string) bool {
	for _, root := range s.allowedRoots() {
		if within(real, root) {
			return true
		}
	}
	return false
}

// allowedNames are the places sessions may be loaded from, as the refusal
// names them.
func (s *Server) allowedNames() []string {
	var out []string
	if s.cfg.SessionsDir != "" {
		out = append(out, s.cfg.SessionsDir)
	}
	out = append(out, s.cfg.AllowedDirs...)
	if s.cfg.Home != "" {
		out = append(out, "~/.pi/agent/sessions")
	}
	if s.cfg.Cwd != "" {
		out = append(out, filepath.Join(s.cfg.Cwd, ".pi", "sessions"))
	}
	return out
}

// resolveExisting resolves the symlinks of the longest existing prefix of
// p and appends the rest.
func resolveExisting(p string) string {
	rest := ""
	for dir := p; ; {
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return p
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
}

func (s *Server) allowedRoots() []string {
	var roots []string
	add := func(d string) {
		if d == "" {
			return
		}
		if r, err := filepath.EvalSymlinks(d); err == nil {
			roots = append(roots, r)
		}
	}
	add(s.cfg.SessionsDir)
	for _, d := range s.cfg.AllowedDirs {
		add(d)
	}
	if s.cfg.Home != "" {
		add(filepath.Join(s.cfg.Home, ".pi", "agent", "sessions"))
	}
	if s.cfg.Cwd != "" {
		add(filepath.Join(s.cfg.Cwd, ".pi", "sessions"))
	}
	return roots
}

func within(p, root string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}
