package subagent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/sandbox"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		name, file string
		want       *Type // nil: no type (primary)
		disabled   bool
		err        string
	}{
		{name: "list", file: "---\ndescription: Reviews\ntools: [read, grep]\nmodel: mock/m1\nsteps: 5\n---\nBe strict.\n",
			want: &Type{Name: "list", Description: "Reviews", Tools: []string{"read", "grep"}, Model: "mock/m1", MaxTurns: 5, Prompt: "Be strict."}},
		{name: "comma string", file: "---\ndescription: d\ntools: read, ls\n---\n",
			want: &Type{Name: "comma-string", Description: "d", Tools: []string{"read", "ls"}}},
		{name: "opencode map", file: "---\ndescription: d\ntools:\n  write: false\n  edit: false\n  read: true\n---\nx",
			want: &Type{Name: "opencode-map", Description: "d", Tools: []string{"*", "!edit", "!write"}, Prompt: "x"}},
		{name: "permission deny", file: "---\ndescription: d\npermission:\n  edit: deny\n  bash:\n    \"*\": deny\n  webfetch: ask\n---\nx",
			want: &Type{Name: "permission-deny", Description: "d", Tools: []string{"*", "!bash", "!edit", "!write"}, Prompt: "x"}},
		{name: "permissions list", file: "---\ndescription: d\npermissions:\n  - action: shell\n    resource: \"*\"\n    effect: deny\n---\nx",
			want: &Type{Name: "permissions-list", Description: "d", Tools: []string{"*", "!bash"}, Prompt: "x"}},
		{name: "named", file: "---\nname: team/rev\ndescription: d\nsandbox: read-only\nmode: subagent\n---\n",
			want: &Type{Name: "team/rev", Description: "d", Sandbox: sandbox.ReadOnly}},
		{name: "prompt field", file: "---\ndescription: d\nprompt: from the field\n---\n",
			want: &Type{Name: "prompt-field", Description: "d", Prompt: "from the field"}},
		{name: "primary", file: "---\ndescription: d\nmode: primary\n---\n"},
		{name: "disabled", file: "---\ndisable: true\n---\n", disabled: true},
		{name: "no description", file: "---\ntools: [read]\n---\nbody", err: "has no description"},
		{name: "no frontmatter", file: "just a prompt", err: "has no description"},
		{name: "unclosed", file: "---\ndescription: d\n", err: "no closing ---"},
		{name: "bad sandbox", file: "---\ndescription: d\nsandbox: everything\n---\n", err: `sandbox mode "everything"`},
		{name: "bad yaml", file: "---\ndescription: [\n---\n", err: "frontmatter"},
		{name: "bad name", file: "---\nname: ../up\ndescription: d\n---\n", err: "agent name"},
		{name: "negative steps", file: "---\ndescription: d\nsteps: -1\n---\n", err: "steps must be positive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, disabled, _, err := Parse(strings.ReplaceAll(tt.name, " ", "-"), []byte(tt.file))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if disabled != tt.disabled {
				t.Fatalf("disabled %v", disabled)
			}
			if tt.disabled {
				return
			}
			if (got == nil) != (tt.want == nil) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			if got == nil {
				return
			}
			if got.Name != tt.want.Name || got.Description != tt.want.Description || !slices.Equal(got.Tools, tt.want.Tools) ||
				got.Model != tt.want.Model || got.MaxTurns != tt.want.MaxTurns || got.Prompt != tt.want.Prompt || got.Sandbox != tt.want.Sandbox {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// A type's tools are never more than its parent's.
func TestAllowed(t *testing.T) {
	parent := []string{"read", "bash", "ls", "task", "ask_user", "todo"}
	for _, tt := range []struct {
		name  string
		tools []string
		want  []string
	}{
		{"all", nil, parent},
		{"some", []string{"read", "write", "ls"}, []string{"read", "ls"}},
		{"none", []string{}, []string{}},
		{"all but", []string{"*", "!bash", "!write"}, []string{"read", "ls", "task", "ask_user", "todo"}},
		{"unknown", []string{"sudo"}, []string{}},
	} {
		if got := (&Type{Tools: tt.tools}).Allowed(parent); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Load: built-ins, then global files, then the project's from its root
// down to cwd, the nearer winning; a disabled type goes; a project's
// link is not followed (it could lead to a key file); a file that cannot
// be used is a warning.
func TestLoad(t *testing.T) {
	global := t.TempDir()
	root := t.TempDir()
	cwd := filepath.Join(root, "a", "b")
	if err := os.MkdirAll(filepath.Join(root, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "secret.md")
	write(t, secret, "---\ndescription: SECRET\n---\nSECRET")
	write(t, filepath.Join(global, "agents", "reviewer.md"), "---\ndescription: global reviewer\n---\n")
	write(t, filepath.Join(global, "agents", "team", "docs.md"), "---\ndescription: docs writer\n---\n")
	write(t, filepath.Join(root, ".agentd", "agents", "reviewer.md"), "---\ndescription: root reviewer\n---\n")
	write(t, filepath.Join(cwd, ".agentd", "agents", "reviewer.md"), "---\ndescription: cwd reviewer\n---\n")
	write(t, filepath.Join(cwd, ".agentd", "agents", "general.md"), "---\ndisable: true\n---\n")
	write(t, filepath.Join(cwd, ".agentd", "agents", "broken.md"), "---\ntools: [read]\n---\n")
	if err := os.Symlink(secret, filepath.Join(cwd, ".agentd", "agents", "leak.md")); err != nil {
		t.Fatal(err)
	}
	// Above the project's root: not the project's.
	write(t, filepath.Join(filepath.Dir(root), ".agentd", "agents", "outside.md"), "---\ndescription: outside\n---\n")

	c := Load([]string{global}, cwd)
	if got, want := c.Names(), []string{"explore", "reviewer", "team/docs"}; !slices.Equal(got, want) {
		t.Fatalf("types %v, want %v", got, want)
	}
	if r, _ := c.Get("reviewer"); r.Description != "cwd reviewer" || r.Source != SourceProject {
		t.Errorf("reviewer %+v, want the nearest file's", r)
	}
	if d, _ := c.Get("team/docs"); d.Source != SourceGlobal {
		t.Errorf("team/docs %+v", d)
	}
	var warned []string
	for _, w := range c.Warnings {
		warned = append(warned, filepath.Base(w.Path))
	}
	slices.Sort(warned)
	if !slices.Equal(warned, []string{"broken.md", "leak.md"}) {
		t.Errorf("warnings %v", c.Warnings)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("---\ndescription: d\ntools: [read]\n---\nbody"))
	f.Add([]byte("---\ntools:\n  write: false\npermission:\n  edit: deny\n---\n"))
	f.Add([]byte("---\r\ndescription: x\r\n---\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ty, _, _, err := Parse("fuzz", b)
		if err == nil && ty != nil {
			// Whatever a file says, a child gets no tool its parent lacks.
			for _, n := range ty.Allowed([]string{"read"}) {
				if n != "read" {
					t.Fatalf("allowed %q", n)
				}
			}
		}
	})
}
