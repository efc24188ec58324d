package engine

import (
	"context"
	"github.com/agentd-dev/agentd/internal/sessionspec"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/instructions"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/llm/registry"
	"github.com/agentd-dev/agentd/internal/session"
)

func put(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The system prompt the provider receives carries the instruction files
// of the session's directories, global first, then root-most to cwd, and
// the session reports which files they were; with NoContextFiles it
// carries none, and SYSTEM.md and APPEND_SYSTEM.md still apply.
func TestSessionPromptCarriesInstructions(t *testing.T) {
	root := t.TempDir()
	cfgDir, piDir := filepath.Join(root, "home", ".agentd"), filepath.Join(root, "home", ".pi", "agent")
	proj := filepath.Join(root, "proj")
	cwd := filepath.Join(proj, "sub")
	put(t, filepath.Join(cfgDir, "AGENTS.md"), "GLOBAL-AGENTD")
	put(t, filepath.Join(piDir, "AGENTS.md"), "GLOBAL-PI")
	put(t, filepath.Join(proj, "AGENTS.md"), "PROJECT-ROOT")
	put(t, filepath.Join(proj, "CLAUDE.md"), "PROJECT-CLAUDE")
	put(t, filepath.Join(cwd, "CLAUDE.md"), "SUB-CLAUDE")
	put(t, filepath.Join(cwd, ".pi", "APPEND_SYSTEM.md"), "APPENDED")

	for _, tt := range []struct {
		name      string
		noContext bool
		want      []string
		not       []string
		files     []string
	}{
		{name: "context files", want: []string{"You are a coding agent", "APPENDED", "GLOBAL-AGENTD", "GLOBAL-PI", "PROJECT-ROOT", "SUB-CLAUDE", "Working directory: " + cwd},
			not:   []string{"PROJECT-CLAUDE"},
			files: []string{filepath.Join(cwd, ".pi", "APPEND_SYSTEM.md"), filepath.Join(cfgDir, "AGENTS.md"), filepath.Join(piDir, "AGENTS.md"), filepath.Join(proj, "AGENTS.md"), filepath.Join(cwd, "CLAUDE.md")}},
		{name: "no context files", noContext: true, want: []string{"You are a coding agent", "APPENDED", "Working directory: " + cwd},
			not:   []string{"GLOBAL-AGENTD", "GLOBAL-PI", "PROJECT-ROOT", "SUB-CLAUDE", "# Project Context"},
			files: []string{filepath.Join(cwd, ".pi", "APPEND_SYSTEM.md")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reg, err := registry.Load(context.Background(), registry.Options{Extra: []llm.Model{*faux.Model()}})
			if err != nil {
				t.Fatal(err)
			}
			p := faux.New(faux.Options{})
			p.Push(faux.Response{Text: "ok"})
			e, err := New(Options{Models: &Models{Registry: reg, Fallback: p}, Model: faux.Model(),
				Instructions: instructions.Config{GlobalDirs: []string{cfgDir, piDir}, ProjectDirs: []string{".agentd", ".pi"}, NoContextFiles: tt.noContext}})
			if err != nil {
				t.Fatal(err)
			}
			s, err := e.Session(sessionspec.Spec{Cwd: cwd})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Prompt(session.UserMessage("hi", nil), session.BehaviorNone); err != nil {
				t.Fatal(err)
			}
			if err := s.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			reqs := p.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests", len(reqs))
			}
			got := reqs[0].SystemPrompt
			at := 0
			for _, w := range tt.want {
				i := strings.Index(got[at:], w)
				if i < 0 {
					t.Fatalf("%q missing or out of order in the system prompt:\n%s", w, got)
				}
				at += i + len(w)
			}
			for _, n := range tt.not {
				if strings.Contains(got, n) {
					t.Fatalf("%q in the system prompt:\n%s", n, got)
				}
			}
			var paths []string
			for _, f := range s.Instructions() {
				paths = append(paths, f.Path)
			}
			if strings.Join(paths, "\n") != strings.Join(tt.files, "\n") {
				t.Fatalf("session reports\n%s\nwant\n%s", strings.Join(paths, "\n"), strings.Join(tt.files, "\n"))
			}
		})
	}
}

// SYSTEM.md in the project takes the place of agentd's own prompt.
func TestSessionSystemMDReplaces(t *testing.T) {
	cwd := t.TempDir()
	put(t, filepath.Join(cwd, ".agentd", "SYSTEM.md"), "YOU ARE A PIRATE")
	reg, err := registry.Load(context.Background(), registry.Options{Extra: []llm.Model{*faux.Model()}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Options{Models: &Models{Registry: reg, Fallback: faux.New(faux.Options{})}, Model: faux.Model(),
		Instructions: instructions.Config{ProjectDirs: []string{".agentd", ".pi"}, NoContextFiles: true}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.Session(sessionspec.Spec{Cwd: cwd})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := s.Agent().Config().SystemPrompt
	if !strings.HasPrefix(got, "YOU ARE A PIRATE\n\nWorking directory: "+cwd) || strings.Contains(got, "coding agent") {
		t.Fatalf("system prompt:\n%s", got)
	}
}
