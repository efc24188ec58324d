package mcp

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/agentd-dev/agentd/internal/sandbox"
)

// BaseEnv are the variables of agentd's environment every stdio server
// gets; everything else it needs its configuration names.
var BaseEnv = []string{"PATH", "HOME", "LANG", "TMPDIR"}

// environ is the server's environment: BaseEnv from agentd's, then its
// configuration's Env.
func (s *server) environ() []string {
	var env []string
	for _, kv := range s.m.opt.Environ {
		name, _, _ := strings.Cut(kv, "=")
		if _, own := s.cfg.Env[name]; !own && slices.Contains(BaseEnv, name) {
			env = append(env, kv)
		}
	}
	names := make([]string, 0, len(s.cfg.Env))
	for k := range s.cfg.Env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		env = append(env, k+"="+s.cfg.Env[k])
	}
	return env
}

// policy is what the server runs under: the owner's sandbox with the
// network, writing (in workspace-write) where the session may, in the
// server's own cwd and the temp dir.
func (s *server) policy() sandbox.Policy {
	p := s.m.opt.Sandbox
	if p.Mode == "" || !p.Confined() {
		return sandbox.Policy{Mode: sandbox.FullAccess, Network: true}
	}
	p.Network = true
	var w []string
	for _, d := range append([]string{s.workspace, s.cfg.Cwd, s.m.opt.TempDir}, p.Writable...) {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		if r, err := sandbox.RealPath(d); err == nil {
			d = r
		}
		if !slices.Contains(w, d) {
			w = append(w, d)
		}
	}
	p.Writable = w
	return p
}

// lookPath finds name in the PATH of env, as a shell would: the sandbox
// helper executes exactly the path it is given.
func lookPath(name string, env []string) string {
	if strings.Contains(name, "/") {
		return name
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return name
}

// redactor removes from a server's output what may be a secret: the
// values of its configuration's Env and Headers, and token-shaped words.
func (s *server) redactor() func(string) string {
	var values []string
	for _, m := range []map[string]string{s.cfg.Env, s.cfg.Headers} {
		for _, v := range m {
			if len(v) >= 4 {
				values = append(values, v)
			}
		}
	}
	// Longest first: a value inside another is not left half shown.
	sort.Slice(values, func(i, j int) bool { return len(values[i]) > len(values[j]) })
	return func(text string) string {
		for _, v := range values {
			text = strings.ReplaceAll(text, v, "[redacted]")
		}
		return secretWord().ReplaceAllString(text, "[redacted]")
	}
}

// secretWord matches what looks like a credential in free text: the
// providers' key prefixes, bearer tokens, and NAME=value where the name
// says key, token, secret or password.
// Compiled on first use: only a server's stderr needs it.
var secretWord = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)\b(sk-[a-z0-9_-]{8,}|gh[pousr]_[a-z0-9]{16,}|xox[abpr]-[a-z0-9-]{8,}|AKIA[A-Z0-9]{12,})|(bearer\s+)\S+|([A-Z0-9_]*(KEY|TOKEN|SECRET|PASSWORD|CREDENTIALS)[A-Z0-9_]*\s*[=:]\s*)\S+`)
})
