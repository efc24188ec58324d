package engine

import (
	"context"
	"github.com/agentd-dev/agentd/internal/sessionspec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/commands"
	"github.com/agentd-dev/agentd/internal/instructions"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/llm/registry"
	"github.com/agentd-dev/agentd/internal/session"
)

// The skills go into the system prompt after the project's context
// files and before the working directory, only when the session has the
// read tool to load them with; a built-in another package registers is
// listed and run by every session.
func TestSessionPromptListsSkills(t *testing.T) {
	root := t.TempDir()
	cfgDir := filepath.Join(root, "home", ".agentd")
	cwd := filepath.Join(root, "proj")
	put(t, filepath.Join(cwd, "AGENTS.md"), "PROJECT-RULE")
	put(t, filepath.Join(cfgDir, "skills", "deploy", "SKILL.md"), "---\ndescription: Ship it.\n---\nSKILL-BODY")
	for _, tt := range []struct {
		name  string
		tools []string
		want  bool
	}{
		{"with read", nil, true},
		{"without read", []string{"bash"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reg, err := registry.Load(context.Background(), registry.Options{Extra: []llm.Model{*faux.Model()}})
			if err != nil {
				t.Fatal(err)
			}
			p := faux.New(faux.Options{})
			p.Push(faux.Response{Text: "ok"})
			e, err := New(Options{Models: &Models{Registry: reg, Fallback: p}, Model: faux.Model(),
				Instructions: instructions.Config{GlobalDirs: []string{cfgDir}},
				Commands:     commands.Config{GlobalDirs: []string{cfgDir}}})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Builtins().Add(commands.Builtin{Name: "shout", Description: "Say it louder",
				Run: func(_ context.Context, c commands.Call) (string, error) { return "loud " + c.Args, nil }}); err != nil {
				t.Fatal(err)
			}
			s, err := e.Session(sessionspec.Spec{Cwd: cwd, Tools: tt.tools})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if out, ok, err := s.RunCommand(context.Background(), "/shout 2"); !ok || err != nil || out != "loud 2" {
				t.Fatalf("/shout: %q %v %v", out, ok, err)
			}
			if err := s.Prompt(session.UserMessage("hi", nil), session.BehaviorNone); err != nil {
				t.Fatal(err)
			}
			if err := s.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := p.Requests()[0].SystemPrompt
			rule, sk, wd := strings.Index(got, "PROJECT-RULE"), strings.Index(got, "<available_skills>"), strings.Index(got, "Working directory:")
			if tt.want && (rule < 0 || sk < rule || wd < sk || !strings.Contains(got, "<name>deploy</name>")) {
				t.Fatalf("skills missing or out of place:\n%s", got)
			}
			if !tt.want && sk >= 0 {
				t.Fatalf("skills listed without the read tool:\n%s", got)
			}
			if strings.Contains(got, "SKILL-BODY") {
				t.Fatalf("a skill's body is in the prompt:\n%s", got)
			}
		})
	}
}
