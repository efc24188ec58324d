package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// DefaultCommandTimeout bounds an apiKey or header "!command", as pi does.
const DefaultCommandTimeout = 10 * time.Second

// errEnvUnset is returned by resolveValue when an apiKey names an
// environment variable that is not set.
var errEnvUnset = errors.New("environment variable not set")

// commandError is a failed "!command"; its text says what went wrong
// without repeating the command's output, which may hold a secret.
type commandError struct {
	cmd string
	msg string
	err error
}

func (e *commandError) Error() string { return fmt.Sprintf("`%s` %s", e.cmd, e.msg) }
func (e *commandError) Unwrap() error { return e.err }

// resolver turns configured values into the strings sent on the wire. It
// is owned by one Registry; its cache lives as long as the Registry.
type resolver struct {
	env     func(string) string
	timeout time.Duration

	mu   sync.Mutex
	runs map[string]*commandRun // "!command" results, by command
}

type commandRun struct {
	done chan struct{}
	out  string
	err  error
}

// resolveValue resolves one apiKey or header value the way pi does:
//
//   - "!!cmd" runs cmd through sh -c on every call;
//   - "!cmd" runs cmd once and reuses its output (a failed run is retried
//     on the next call, so a locked password manager can be unlocked);
//   - a value that is the name of a set environment variable resolves to
//     that variable's value;
//   - anything else is the literal value.
//
// With strictEnv, a value that looks like an environment variable name
// (LIKE_THIS) but is not set yields errEnvUnset instead of being sent
// literally, because a key named after an unset variable is a mistake pi
// would only discover as a 401.
func (r *resolver) resolveValue(ctx context.Context, spec string, strictEnv bool) (string, error) {
	switch {
	case strings.HasPrefix(spec, "!!"):
		return r.run(ctx, strings.TrimSpace(spec[2:]))
	case strings.HasPrefix(spec, "!"):
		return r.runCached(ctx, strings.TrimSpace(spec[1:]))
	}
	if v := r.env(spec); v != "" {
		return v, nil
	}
	if strictEnv && looksLikeEnvName(spec) {
		return "", errEnvUnset
	}
	return spec, nil
}

// looksLikeEnvName reports whether s is shaped like a conventional
// environment variable name. Real keys have lower case letters or dashes.
func looksLikeEnvName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	hasLetter := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z':
			hasLetter = true
		case c >= '0' && c <= '9', c == '_':
		default:
			return false
		}
	}
	return hasLetter
}

func (r *resolver) runCached(ctx context.Context, cmd string) (string, error) {
	r.mu.Lock()
	if run, ok := r.runs[cmd]; ok {
		r.mu.Unlock()
		select {
		case <-run.done:
			return run.out, run.err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	run := &commandRun{done: make(chan struct{})}
	if r.runs == nil {
		r.runs = make(map[string]*commandRun)
	}
	r.runs[cmd] = run
	r.mu.Unlock()

	run.out, run.err = r.run(ctx, cmd)
	if run.err != nil {
		r.mu.Lock()
		delete(r.runs, cmd)
		r.mu.Unlock()
	}
	close(run.done)
	return run.out, run.err
}

// run executes cmd with sh -c under the command timeout and returns its
// trimmed stdout. The command inherits agentd's own process environment:
// it is the user's shell snippet, and tools like op or security need
// HOME and PATH.
func (r *resolver) run(ctx context.Context, cmd string) (string, error) {
	if cmd == "" {
		return "", &commandError{cmd: cmd, msg: "is empty"}
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	c := exec.CommandContext(cctx, "sh", "-c", cmd)
	var stdout, stderr bytes.Buffer
	c.Stdout = &stdout
	c.Stderr = &stderr
	// A child of sh that inherited stdout would otherwise keep Wait blocked
	// after the timeout killed sh.
	c.WaitDelay = 250 * time.Millisecond
	err := c.Run()
	switch {
	case ctx.Err() != nil:
		return "", ctx.Err()
	case cctx.Err() != nil:
		return "", &commandError{cmd: cmd, msg: fmt.Sprintf("timed out after %s", r.timeout), err: cctx.Err()}
	case err != nil:
		msg := "failed: " + err.Error()
		if s := firstLine(stderr.String()); s != "" {
			msg += ": " + s
		}
		return "", &commandError{cmd: cmd, msg: msg, err: err}
	}
	out := strings.TrimSpace(stdout.String())
	if out == "" {
		return "", &commandError{cmd: cmd, msg: "printed nothing"}
	}
	return out, nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	const limit = 200
	if len(s) > limit {
		s = s[:limit] + "..."
	}
	return s
}
