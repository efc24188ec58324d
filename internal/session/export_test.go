package session_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/session"
)

// exportSetup is the file system an export test plays in: the session's
// cwd, the data dir's exports folder (not created yet), a directory
// outside both, a server state dir inside the cwd holding a journal,
// and the things an export must not replace.
type exportSetup struct {
	cwd, exports, outside, journal, index, pending string
	keep                                           map[string]string // path: content that must survive
}

func newExportSetup(t *testing.T, h *harness) *exportSetup {
	t.Helper()
	root := t.TempDir()
	x := &exportSetup{
		cwd:     filepath.Join(root, "work"),
		exports: filepath.Join(root, "data", "exports"),
		outside: filepath.Join(root, "outside"),
		keep:    map[string]string{},
	}
	state := filepath.Join(x.cwd, "state")
	for _, d := range []string{x.cwd, x.outside, state, filepath.Join(x.cwd, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	x.journal = filepath.Join(state, "journal.jsonl")
	x.index = filepath.Join(state, "sessions.jsonl")
	// A live session whose file the first append has not created yet.
	x.pending = filepath.Join(x.cwd, "pending-session.jsonl")
	write := func(p, content string) {
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		x.keep[p] = content
	}
	write(x.journal, `{"journal":1}`+"\n")
	write(x.index, `{"index":1}`+"\n")
	write(filepath.Join(x.cwd, "existing.html"), "keep me")
	write(filepath.Join(x.outside, "victim.html"), "outside, keep me")
	// Another session's transcript in the cwd, not protected by name.
	data, err := os.ReadFile(h.s.File())
	if err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(x.cwd, "other-session.jsonl"), string(data))
	link := func(target, name string) {
		if err := os.Symlink(target, filepath.Join(x.cwd, name)); err != nil {
			t.Fatal(err)
		}
	}
	link(x.outside, "out-link")                                // a directory leading out
	link(filepath.Join(x.outside, "victim.html"), "to-victim") // a file link leading out
	link(x.journal, "to-journal")
	if err := os.Link(x.journal, filepath.Join(x.cwd, "journal-hardlink")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(x.cwd, "pipe.html"), 0o600); err != nil {
		t.Fatal(err)
	}
	return x
}

func (x *exportSetup) req(path string, overwrite bool) session.ExportRequest {
	return session.ExportRequest{Path: path, Cwd: x.cwd, ExportsDir: x.exports, Overwrite: overwrite,
		Protected: []string{x.journal, x.index, x.pending}}
}

// Where an export may go and what it may replace.
func TestExportHTMLFileRules(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Enqueue(wiremock.Script{Text: []string{"the answer"}})
	h.prompt("export me")
	h.wait()
	x := newExportSetup(t, h)
	own := h.s.File()

	cases := []struct {
		name      string
		path      string
		overwrite bool
		cwd       string // "" is x.cwd
		wantPath  string // on success
		wantErr   string // a part of the error; "" for success
	}{
		{name: "relative", path: "out.html", wantPath: filepath.Join(x.cwd, "out.html")},
		{name: "dot-dot staying inside", path: "sub/../out2.html", wantPath: filepath.Join(x.cwd, "out2.html")},
		{name: "absolute inside", path: filepath.Join(x.cwd, "sub", "abs.html"), wantPath: filepath.Join(x.cwd, "sub", "abs.html")},
		{name: "exports folder, created", path: filepath.Join(x.exports, "e.html"), wantPath: filepath.Join(x.exports, "e.html")},
		{name: "replace with overwrite", path: "existing.html", overwrite: true, wantPath: filepath.Join(x.cwd, "existing.html")},
		{name: "symlink at the target is replaced, not followed", path: "to-victim", overwrite: true, wantPath: filepath.Join(x.cwd, "to-victim")},

		{name: "dot-dot out", path: "../outside/new.html", wantErr: "is outside the session's working directory " + x.cwd + " and " + x.exports},
		{name: "absolute outside", path: filepath.Join(x.outside, "new.html"), wantErr: "is outside the session's working directory"},
		{name: "absolute outside over a file", path: filepath.Join(x.outside, "victim.html"), overwrite: true, wantErr: "is outside"},
		{name: "symlinked directory leading out", path: "out-link/new.html", wantErr: "is outside"},
		{name: "inside the exports folder's parent", path: filepath.Join(filepath.Dir(x.exports), "x.html"), wantErr: "is outside"},
		{name: "existing file", path: "existing.html", wantErr: "existing.html exists; send overwrite: true to replace it"},
		{name: "symlink at the target without overwrite", path: "to-victim", wantErr: "exists; send overwrite: true"},
		{name: "journal", path: "state/journal.jsonl", overwrite: true, wantErr: "is a file agentd keeps"},
		{name: "journal without overwrite", path: "state/journal.jsonl", wantErr: "is a file agentd keeps"},
		{name: "index", path: x.index, overwrite: true, wantErr: "is a file agentd keeps"},
		{name: "symlink to the journal", path: "to-journal", overwrite: true, wantErr: "is a file agentd keeps"},
		{name: "hard link to the journal", path: "journal-hardlink", overwrite: true, wantErr: "is a file agentd keeps"},
		{name: "a live session's file not created yet", path: "pending-session.jsonl", wantErr: "is a file agentd keeps"},
		{name: "another session's transcript", path: "other-session.jsonl", overwrite: true, wantErr: "is a session file"},
		{name: "the session's own file", path: filepath.Base(own), cwd: filepath.Dir(own), overwrite: true, wantErr: "is a file agentd keeps"},
		{name: "a directory", path: "sub", overwrite: true, wantErr: "is a directory"},
		{name: "a FIFO", path: "pipe.html", overwrite: true, wantErr: "is not a regular file"},
		{name: "missing directory", path: "missing/x.html", wantErr: "directory " + filepath.Join(x.cwd, "missing") + " does not exist"},
		{name: "no file name", path: "/", wantErr: "names no file"},
		{name: "NUL byte", path: "a\x00b.html", wantErr: "NUL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := x.req(c.path, c.overwrite)
			if c.cwd != "" {
				req.Cwd = c.cwd
			}
			var got string
			var err error
			done := make(chan struct{})
			go func() {
				defer close(done)
				got, err = h.s.ExportHTMLFile(req)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("export blocked") // the FIFO case, if it opened the FIFO
			}
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !errors.Is(err, session.ErrExportRefused) {
					t.Fatalf("export %q: %q, %v; want a refusal containing %q", c.path, got, err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.wantPath {
				t.Fatalf("export %q: %q, %v; want %s", c.path, got, err, c.wantPath)
			}
			fi, err := os.Lstat(got)
			if err != nil || !fi.Mode().IsRegular() {
				t.Fatalf("%s after the export: %v, %v", got, fi, err)
			}
			if b, _ := os.ReadFile(got); !strings.Contains(string(b), "<html") || !strings.Contains(string(b), "export me") {
				t.Fatalf("%s is not the export: %.100s", got, b)
			}
		})
	}
	if fi, err := os.Stat(x.exports); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("exports folder: %v, %v; want it created 0700", fi, err)
	}
	// Nothing refused was touched, nothing was created outside, and no
	// temporary file is left behind.
	for p, want := range x.keep {
		if p == filepath.Join(x.cwd, "existing.html") {
			continue // replaced on purpose
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Errorf("%s changed: %q, %v", p, b, err)
		}
	}
	for _, p := range []string{x.pending, filepath.Join(x.outside, "new.html"), filepath.Join(filepath.Dir(x.exports), "x.html")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was created", p)
		}
	}
	for _, d := range []string{x.cwd, x.exports, filepath.Join(x.cwd, "sub")} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if strings.Contains(e.Name(), ".tmp") {
				t.Errorf("temporary file left: %s", filepath.Join(d, e.Name()))
			}
		}
	}
}

// The default name goes to the cwd, and a second export under it needs
// overwrite like any other.
func TestExportHTMLFileDefaultName(t *testing.T) {
	h := newHarness(t, nil)
	cwd := t.TempDir()
	p, err := h.s.ExportHTMLFile(session.ExportRequest{Cwd: cwd})
	if err != nil || filepath.Dir(p) != cwd || filepath.Base(p) != "agentd-session-"+h.s.ID()+".html" {
		t.Fatalf("default export: %q, %v", p, err)
	}
	if _, err := h.s.ExportHTMLFile(session.ExportRequest{Cwd: cwd}); err == nil || !strings.Contains(err.Error(), "send overwrite: true") {
		t.Fatalf("second default export: %v", err)
	}
	if _, err := h.s.ExportHTMLFile(session.ExportRequest{Cwd: cwd, Overwrite: true}); err != nil {
		t.Fatalf("second default export with overwrite: %v", err)
	}
}
