package modes

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, in string
		want     Mode
		err      string
	}{
		{name: "no frontmatter", in: "Just a prompt.\n", want: Mode{Prompt: "Just a prompt."}},
		{name: "all fields", in: "---\nname: review\ndescription: Review code\ntools: [read, \"gh__*\"]\nreadOnly: true\nask: [bash]\n---\nLook closely.\n",
			want: Mode{Name: "review", Description: "Review code", Tools: []string{"read", "gh__*"}, ReadOnly: true, Ask: []string{"bash"}, Prompt: "Look closely."}},
		{name: "crlf", in: "---\r\ndescription: d\r\n---\r\nbody\r\n", want: Mode{Description: "d", Prompt: "body"}},
		{name: "empty tools", in: "---\ntools: []\n---\n", want: Mode{Tools: []string{}}},
		{name: "unclosed", in: "---\nname: x\n", err: "no closing ---"},
		{name: "unknown key", in: "---\nnmae: x\n---\n", err: "field nmae not found"},
		{name: "bad name", in: "---\nname: Bad Name\n---\n", err: "lowercase"},
		{name: "bad glob", in: "---\ntools: [\"[\"]\n---\n", err: "tool pattern"},
		{name: "closing not alone", in: "---\nname: x\n---x\n", err: "no closing ---"}, // "---x" is no fence
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != tt.want.Name || got.Description != tt.want.Description || got.ReadOnly != tt.want.ReadOnly ||
				got.Prompt != tt.want.Prompt || !slices.Equal(got.Tools, tt.want.Tools) || (got.Tools == nil) != (tt.want.Tools == nil) ||
				!slices.Equal(got.Ask, tt.want.Ask) {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestAllows(t *testing.T) {
	plan, _ := New()
	p, _ := plan.Find(Plan)
	b, _ := plan.Find(Build)
	tests := []struct {
		mode Mode
		tool string
		want bool
	}{
		{b, "write", true}, {b, "gh__create", true},
		{p, "read", true}, {p, "bash", true}, {p, "ask_user", true}, {p, "todo", true},
		{p, "write", false}, {p, "edit", false}, {p, "gh__create", false},
		// A read-only mode never writes, whatever its tools say.
		{Mode{ReadOnly: true, Tools: []string{"*"}}, "write", false},
		{Mode{ReadOnly: true, Tools: []string{"*"}}, "gh__list", true},
		{Mode{Tools: []string{}}, "read", false},
		{Mode{Tools: []string{"gh__*"}}, "gh__list", true},
	}
	for _, tt := range tests {
		if got := tt.mode.Allows(tt.tool); got != tt.want {
			t.Errorf("%s allows %s: %v, want %v", tt.mode.Name, tt.tool, got, tt.want)
		}
	}
}

func TestLoad(t *testing.T) {
	global, cwd := t.TempDir(), t.TempDir()
	put := func(path, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put(filepath.Join(global, "modes", "review.md"), "---\ndescription: global review\n---\nG")
	put(filepath.Join(global, "modes", "docs.md"), "---\ndescription: docs\ntools: [read, write]\n---\nD")
	put(filepath.Join(cwd, ".agentd", "modes", "review.md"), "---\ndescription: project review\nreadOnly: true\n---\nP")
	put(filepath.Join(cwd, ".agentd", "modes", "plan.md"), "---\ndescription: sneaky\n---\nwrite anything")
	put(filepath.Join(cwd, ".agentd", "modes", "broken.md"), "---\nname: [\n---\n")
	put(filepath.Join(cwd, ".agentd", "modes", "notes.txt"), "ignored")
	s := Load(Config{GlobalDirs: []string{global}, ProjectDirs: []string{".agentd"}}, cwd)
	if got := strings.Join(s.Names(), ","); got != "build,plan,docs,review" {
		t.Fatalf("modes %s", got)
	}
	r, _ := s.Find("review")
	if r.Description != "project review" || !r.ReadOnly || r.Source != filepath.Join(cwd, ".agentd", "modes", "review.md") {
		t.Fatalf("review %+v", r)
	}
	p, _ := s.Find(Plan)
	if p.Source != "builtin" {
		t.Fatalf("a project redefined plan: %+v", p)
	}
	if len(s.Warnings) != 2 || !strings.Contains(strings.Join(s.Warnings, "\n"), "built in") {
		t.Fatalf("warnings %q", s.Warnings)
	}
	if sec := r.PromptSection(); !strings.HasPrefix(sec, "Mode: review (project review). This mode changes nothing") || !strings.HasSuffix(sec, "P\n") {
		t.Fatalf("prompt section %q", sec)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("---\nname: x\ntools: [a]\n---\nbody"))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte("plain"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			return
		}
		if m.Name != "" && checkName(m.Name) != nil {
			t.Fatalf("accepted name %q", m.Name)
		}
		_ = m.Allows("write")
		_ = m.PromptSection()
	})
}

// An unknown name is echoed back clipped: a client's text comes back no
// longer than a name.
func TestUnknownErrorClips(t *testing.T) {
	s, _ := New()
	msg := s.UnknownError(strings.Repeat("é", 5000)).Error()
	if want := `unknown mode "` + strings.Repeat("é", 64) + `…"; this session's modes are build, plan`; msg != want {
		t.Fatalf("got %q", msg)
	}
}
