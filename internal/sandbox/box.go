package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// Box is one session's sandbox: the policy its tools run under (widened
// by what a person allowed for the rest of the session), the executable
// that applies it, and whom to ask when a command is refused. It is safe
// for concurrent use.
type Box struct {
	exe string

	mu     sync.Mutex
	policy Policy
	ask    Asker
	peers  func() []string
}

// Answer is a person's answer to an escalation.
type Answer int

// The answers.
const (
	Deny   Answer = iota // leave the command refused
	Once                 // rerun this command with the access it needs
	Always               // rerun it, and give that access for the rest of the session
)

// Request is an escalation put to a person: a command the sandbox
// refused, and the access it would need.
type Request struct {
	ToolCallID string
	ToolName   string
	Args       json.RawMessage
	Command    string
	Need       Need
	// Policy is what refused it.
	Policy Policy
	// Output is the end of what the refused command printed.
	Output string
}

// Asker puts an escalation to a person and waits for the answer; an
// error (no answer in time, the run aborted) counts as Deny.
type Asker func(ctx context.Context, r Request) (Answer, error)

// NewBox returns the sandbox of a session: p, applied through the helper
// executable exe (see Wrap). Writable directories are resolved to their
// real paths, so a symbolic link cannot stand for one.
func NewBox(p Policy, exe string) *Box {
	w := make([]string, 0, len(p.Writable))
	for _, d := range p.Writable {
		if r, err := RealPath(d); err == nil {
			d = r
		}
		w = append(w, d)
	}
	p.Writable = w
	h := make([]string, 0, len(p.Hidden))
	for _, d := range p.Hidden {
		if r, err := RealPath(d); err == nil {
			d = r
		}
		h = append(h, d)
	}
	p.Hidden = h
	return &Box{exe: exe, policy: p}
}

// Policy is the session's policy now: with the workspaces of the other
// sessions alive now (see SetPeers) added to Hidden.
func (b *Box) Policy() Policy {
	b.mu.Lock()
	p, peers := b.policy, b.peers
	b.mu.Unlock()
	if peers == nil {
		return p
	}
	p.Hidden = slices.Clone(p.Hidden)
	for _, w := range peers() {
		if r, err := RealPath(w); err == nil {
			w = r
		}
		// A workspace that holds this session's own (or its temp dir)
		// cannot be hidden without hiding those; one that is this
		// session's own is shared.
		if !slices.ContainsFunc(p.Writable, func(d string) bool { return within(d, w) }) {
			p.Hidden = append(p.Hidden, w)
		}
	}
	return p
}

// SetPeers sets where Policy finds the workspaces of the other sessions,
// which confined commands must not read.
func (b *Box) SetPeers(peers func() []string) {
	b.mu.Lock()
	b.peers = peers
	b.mu.Unlock()
}

// Exe is the helper executable.
func (b *Box) Exe() string { return b.exe }

// SetAsker sets whom Ask asks; until then (and with nil) every
// escalation is denied without asking.
func (b *Box) SetAsker(a Asker) {
	b.mu.Lock()
	b.ask = a
	b.mu.Unlock()
}

// CanAsk reports whether escalations reach a person.
func (b *Box) CanAsk() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ask != nil
}

// Ask puts r to a person. Always widens the session's policy before it
// returns.
func (b *Box) Ask(ctx context.Context, r Request) Answer {
	b.mu.Lock()
	ask := b.ask
	b.mu.Unlock()
	if ask == nil {
		return Deny
	}
	a, err := ask(ctx, r)
	if err != nil {
		return Deny
	}
	if a == Always {
		b.mu.Lock()
		b.policy = b.policy.Widen(r.Need)
		b.mu.Unlock()
	}
	return a
}

// RealPath is path (absolute) with every symbolic link resolved, also
// in its last component when that is a link to something that does not
// exist yet, and in the part of it that does not exist: what a write to
// path would really create or change.
func RealPath(path string) (string, error) {
	return realPath(filepath.Clean(path), 0)
}

func realPath(p string, depth int) (string, error) {
	if depth > 40 {
		return "", errors.New("too many levels of symbolic links")
	}
	r, err := filepath.EvalSymlinks(p)
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if target, lerr := os.Readlink(p); lerr == nil {
		// A dangling link: a write would create its target.
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		return realPath(filepath.Clean(target), depth+1)
	}
	parent := filepath.Dir(p)
	if parent == p {
		return p, nil
	}
	rp, err := realPath(parent, depth+1)
	if err != nil {
		return "", err
	}
	return filepath.Join(rp, filepath.Base(p)), nil
}
