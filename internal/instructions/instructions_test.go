package instructions

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// order checks that each of want appears in text, in this order.
func order(t *testing.T, text string, want ...string) {
	t.Helper()
	at := 0
	for _, w := range want {
		i := strings.Index(text[at:], w)
		if i < 0 {
			t.Fatalf("%q missing (or out of order) in prompt:\n%s", w, text)
		}
		at += i + len(w)
	}
}

func paths(fs []File) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Kind+":"+f.Path)
	}
	return out
}

func TestBuild(t *testing.T) {
	tests := []struct {
		name  string
		tree  map[string]string // relative to a temp root holding home/, agentd/, proj/
		cfg   func(root string) Config
		cwd   string
		want  []string // in order in the prompt
		not   []string // absent from the prompt
		files []string // kind:path relative to root, in prompt order
	}{
		{
			name: "nested AGENTS.md global first then root-most to cwd, CLAUDE.md only without AGENTS.md",
			tree: map[string]string{
				"agentd/AGENTS.md":       "agentd global rules",
				"pi/AGENTS.md":           "pi global rules",
				"proj/AGENTS.md":         "project rules",
				"proj/CLAUDE.md":         "claude shadowed",
				"proj/a/CLAUDE.md":       "claude in a",
				"proj/a/b/AGENTS.md":     "rules of b",
				"proj/a/b/.pi/unrelated": "x",
				"proj/a/b/c/README.md":   "not an instruction file",
				"proj/a/b/c/AGENTS.md/x": "a directory named AGENTS.md is skipped",
			},
			cwd:  "proj/a/b/c",
			want: []string{"BASE", "# Project Context", "agentd global rules", "pi global rules", "project rules", "claude in a", "rules of b", "FOOTER"},
			not:  []string{"claude shadowed", "not an instruction file"},
			files: []string{"context:agentd/AGENTS.md", "context:pi/AGENTS.md", "context:proj/AGENTS.md",
				"context:proj/a/CLAUDE.md", "context:proj/a/b/AGENTS.md"},
		},
		{
			name: "project SYSTEM.md replaces, .agentd before .pi before global; APPEND_SYSTEM.md appends",
			tree: map[string]string{
				"proj/.agentd/SYSTEM.md": "agentd project system",
				"proj/.pi/SYSTEM.md":     "pi project system",
				"agentd/SYSTEM.md":       "global system",
				"pi/APPEND_SYSTEM.md":    "pi global append",
				"proj/AGENTS.md":         "project rules",
			},
			cwd:   "proj",
			want:  []string{"agentd project system", "pi global append", "project rules", "FOOTER"},
			not:   []string{"BASE", "pi project system", "global system"},
			files: []string{"system:proj/.agentd/SYSTEM.md", "append:pi/APPEND_SYSTEM.md", "context:proj/AGENTS.md"},
		},
		{
			name: "global SYSTEM.md when the project has none",
			tree: map[string]string{
				"pi/SYSTEM.md":              "pi global system",
				"proj/.pi/APPEND_SYSTEM.md": "project append",
				"agentd/APPEND_SYSTEM.md":   "global append shadowed",
			},
			cwd:   "proj",
			want:  []string{"pi global system", "project append", "FOOTER"},
			not:   []string{"BASE", "global append shadowed", "# Project Context"},
			files: []string{"system:pi/SYSTEM.md", "append:proj/.pi/APPEND_SYSTEM.md"},
		},
		{
			name: "no context files leaves AGENTS.md out but keeps SYSTEM.md",
			tree: map[string]string{
				"agentd/AGENTS.md":   "global rules",
				"proj/AGENTS.md":     "project rules",
				"proj/.pi/SYSTEM.md": "custom",
			},
			cfg: func(root string) Config {
				return Config{GlobalDirs: []string{filepath.Join(root, "agentd")}, ProjectDirs: []string{".agentd", ".pi"}, NoContextFiles: true}
			},
			cwd:   "proj",
			want:  []string{"custom", "FOOTER"},
			not:   []string{"global rules", "project rules", "BASE", "# Project Context"},
			files: []string{"system:proj/.pi/SYSTEM.md"},
		},
		{
			name:  "nothing found is agentd's own prompt",
			cwd:   "proj",
			want:  []string{"BASE", "FOOTER"},
			not:   []string{"# Project Context"},
			files: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for p, text := range tt.tree {
				write(t, filepath.Join(root, p), text)
			}
			if err := os.MkdirAll(filepath.Join(root, tt.cwd), 0o755); err != nil {
				t.Fatal(err)
			}
			cfg := Config{GlobalDirs: []string{filepath.Join(root, "agentd"), filepath.Join(root, "pi")}, ProjectDirs: []string{".agentd", ".pi"}}
			if tt.cfg != nil {
				cfg = tt.cfg(root)
			}
			p := Build(cfg, filepath.Join(root, tt.cwd), "BASE", "FOOTER")
			order(t, p.Text, tt.want...)
			for _, n := range tt.not {
				if strings.Contains(p.Text, n) {
					t.Errorf("%q in prompt:\n%s", n, p.Text)
				}
			}
			var want []string
			for _, f := range tt.files {
				kind, rel, _ := strings.Cut(f, ":")
				want = append(want, kind+":"+filepath.Join(root, rel))
			}
			if got := paths(p.Files); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("files\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for _, f := range p.Files {
				if f.Truncated || int64(f.Included) != f.Bytes {
					t.Errorf("%s: %+v", f.Path, f)
				}
				if f.Kind == KindContext && !strings.Contains(p.Text, "## "+f.Path+"\n") {
					t.Errorf("no heading naming %s", f.Path)
				}
			}
		})
	}
}

// A file past the per-file bound is cut, and the files that do not fit
// the total are cut from the global end, each with a note saying so.
func TestBuildBounds(t *testing.T) {
	root := t.TempDir()
	g, proj := filepath.Join(root, "g"), filepath.Join(root, "p")
	write(t, filepath.Join(g, "AGENTS.md"), "GLOBAL"+strings.Repeat("g", 50))
	// 'é' is two bytes: the cut at 40 falls inside one and must not split it.
	write(t, filepath.Join(proj, "AGENTS.md"), "PROJECT"+strings.Repeat("é", 100))
	p := Build(Config{GlobalDirs: []string{g}, MaxFileBytes: 40, MaxTotalBytes: 60}, proj, "BASE", "")
	if len(p.Files) != 2 {
		t.Fatalf("files %+v", p.Files)
	}
	gl, pr := p.Files[0], p.Files[1]
	if !pr.Truncated || pr.Bytes != 207 || pr.Included != 39 {
		t.Fatalf("project file %+v", pr)
	}
	if !gl.Truncated || gl.Bytes != 56 || gl.Included != 21 {
		t.Fatalf("global file %+v", gl)
	}
	order(t, p.Text, "GLOBAL", "is 56 bytes; only the first 21 are included (the limit for all instruction files together is 60 bytes)",
		"PROJECT", "is 207 bytes; only the first 39 are included (the limit per file is 40 bytes)")
	if !strings.Contains(p.Text, "PROJECT"+strings.Repeat("é", 16)+"\n[agentd:") {
		t.Fatalf("cut inside a character:\n%q", p.Text)
	}
}

// A project's symlinks lead only to Markdown: CLAUDE.md -> AGENTS.md
// elsewhere is followed, AGENTS.md -> a key file is not, nor a FIFO
// (which would hang the read) or a device.
func TestBuildProjectSymlinks(t *testing.T) {
	root := t.TempDir()
	secret := filepath.Join(root, "id_ed25519")
	write(t, secret, "PRIVATE KEY")
	write(t, filepath.Join(root, "shared", "rules.md"), "SHARED RULES")
	ok := filepath.Join(root, "ok")
	bad := filepath.Join(root, "ok", "bad")
	fifo := filepath.Join(root, "ok", "bad", "fifo")
	dev := filepath.Join(root, "ok", "bad", "fifo", "dev")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		filepath.Join(ok, "CLAUDE.md"):   filepath.Join(root, "shared", "rules.md"),
		filepath.Join(bad, "AGENTS.md"):  secret,
		filepath.Join(dev, "AGENTS.md"):  "/dev/zero",
		filepath.Join(root, "agents.md"): secret, // not a name that is looked for
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(fifo, "AGENTS.md"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The same symlink in a global directory, the operator's own, is
	// followed.
	global := filepath.Join(root, "global")
	if err := os.MkdirAll(global, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "shared", "rules.md"), filepath.Join(global, "AGENTS.md")); err != nil {
		t.Fatal(err)
	}
	p := Build(Config{GlobalDirs: []string{global}}, dev, "BASE", "")
	if strings.Contains(p.Text, "PRIVATE KEY") {
		t.Fatalf("a symlinked key file reached the prompt:\n%s", p.Text)
	}
	want := []string{"context:" + filepath.Join(global, "AGENTS.md"), "context:" + filepath.Join(ok, "CLAUDE.md")}
	if got := paths(p.Files); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("files %q, want %q", got, want)
	}
	order(t, p.Text, "SHARED RULES", "SHARED RULES")
}
