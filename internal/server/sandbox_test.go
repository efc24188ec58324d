package server

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
)

// modeBuilder is fauxBuilder with the engine's sandbox rule: it refuses a
// mode looser than base, as engine.Session does, and records the mode
// each session was built with.
type modeBuilder struct {
	fauxBuilder
	base sandbox.Mode

	mu   sync.Mutex
	last sandbox.Mode
}

func (b *modeBuilder) Session(spec sessionspec.Spec) (*session.Session, error) {
	if _, err := sandbox.Choose(b.base, string(spec.Sandbox)); err != nil {
		return nil, fault.Wrap(fault.Invalid, err, err.Error())
	}
	b.mu.Lock()
	b.last = spec.Sandbox
	b.mu.Unlock()
	return b.fauxBuilder.Session(spec)
}

// lastMode is the mode the last session was built with.
func (b *modeBuilder) lastMode() sandbox.Mode {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

func (e *env) startMode(t *testing.T, b *modeBuilder) *Server {
	t.Helper()
	return e.startConfig(t, Config{Builder: b, Sandbox: b.base})
}

// A client's choice of mode is checked by the layer for every face, kept
// across a crash, kept by a copy of the session's file loaded under
// another id, and never keeps a session from loading on a server
// restarted stricter.
func TestSandboxChoice(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	b := &modeBuilder{fauxBuilder: fauxBuilder{e.faux}, base: sandbox.WorkspaceWrite}
	s := e.startMode(t, b)

	refusals := []struct{ mode, want string }{
		{"full-access", "Sandbox mode full-access is not allowed: this server runs tools in workspace-write, and a session may only choose that or a stricter mode; sandbox must be read-only or workspace-write"},
		{"bogus", `Unknown sandbox mode "bogus": sandbox must be read-only or workspace-write`},
	}
	for _, r := range refusals {
		_, err := s.Create(ctx, CreateRequest{ID: "x-" + r.mode, Sandbox: sandbox.Mode(r.mode)})
		if fault.CodeOf(err) != fault.Invalid || err.Error() != r.want {
			t.Errorf("Create with %s: %v; want invalid %q", r.mode, err, r.want)
		}
		if _, err := s.Session(ctx, "x-"+r.mode); fault.CodeOf(err) != fault.NotFound {
			t.Errorf("a refused create left session x-%s: %v", r.mode, err)
		}
	}

	created := []struct {
		id         string
		mode, runs sandbox.Mode
	}{
		{"ro", sandbox.ReadOnly, sandbox.ReadOnly},
		{"ww", sandbox.WorkspaceWrite, sandbox.WorkspaceWrite},
		{"def", "", sandbox.WorkspaceWrite},
	}
	files := map[string]string{}
	for _, c := range created {
		h, err := s.Create(ctx, CreateRequest{ID: c.id, Sandbox: c.mode})
		if err != nil {
			t.Fatal(err)
		}
		if h.Sandbox() != c.runs || b.lastMode() != c.mode {
			t.Errorf("%s: Sandbox() = %q, built with %q; want %q, %q", c.id, h.Sandbox(), b.lastMode(), c.runs, c.mode)
		}
		run(t, h, "hello") // the file exists once a message is in it
		files[c.id] = h.Session().File()
	}
	crash(s)

	// The same server again: each session loads in its mode.
	s = e.startMode(t, b)
	for _, c := range created {
		h, err := s.Session(ctx, c.id)
		if err != nil {
			t.Fatal(err)
		}
		if h.Sandbox() != c.runs || b.lastMode() != c.mode {
			t.Errorf("%s after a crash: Sandbox() = %q, built with %q; want %q, %q", c.id, h.Sandbox(), b.lastMode(), c.runs, c.mode)
		}
	}
	crash(s)

	// The read-only session's file loaded under another id stays
	// read-only; a mode asked for with Load is checked as Create's.
	s = e.startMode(t, b)
	h, err := s.Load(ctx, LoadRequest{ID: "ro-copy", Path: files["ro"]})
	if err != nil {
		t.Fatal(err)
	}
	if h.Sandbox() != sandbox.ReadOnly || b.lastMode() != sandbox.ReadOnly {
		t.Errorf("the read-only file loaded as ro-copy: Sandbox() = %q, built with %q", h.Sandbox(), b.lastMode())
	}
	if err := s.Delete(ctx, "ro-copy"); err != nil {
		t.Fatal(err)
	}
	if h, err := s.Load(ctx, LoadRequest{ID: "ro-asks-more", Path: files["ro"], Sandbox: sandbox.WorkspaceWrite}); err != nil {
		t.Fatal(err)
	} else if h.Sandbox() != sandbox.ReadOnly {
		t.Errorf("the read-only file loaded asking for workspace-write runs in %q", h.Sandbox())
	}
	if _, err := s.Load(ctx, LoadRequest{ID: "def-loose", Path: files["def"], Sandbox: sandbox.FullAccess}); fault.CodeOf(err) != fault.Invalid ||
		!strings.HasPrefix(err.Error(), "Sandbox mode full-access is not allowed") {
		t.Errorf("Load with a looser mode: %v", err)
	}
	crash(s)

	// Restarted read-only: every session loads, and read-only binds all.
	b.base = sandbox.ReadOnly
	s = e.startMode(t, b)
	for _, c := range created {
		h, err := s.Session(ctx, c.id)
		if err != nil {
			t.Fatalf("%s on a server restarted stricter: %v", c.id, err)
		}
		if h.Sandbox() != sandbox.ReadOnly {
			t.Errorf("%s on a read-only server runs in %q", c.id, h.Sandbox())
		}
	}
	crash(s)

	// Loosened again: the choice the client made still holds.
	b.base = sandbox.FullAccess
	s = e.startMode(t, b)
	want := map[string]sandbox.Mode{"ro": sandbox.ReadOnly, "ww": sandbox.WorkspaceWrite, "def": sandbox.FullAccess}
	for id, m := range want {
		h, err := s.Session(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if h.Sandbox() != m {
			t.Errorf("%s on a full-access server runs in %q, want %q", id, h.Sandbox(), m)
		}
	}
}
