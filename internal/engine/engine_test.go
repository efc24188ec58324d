package engine

import (
	"context"
	"github.com/agentd-dev/agentd/internal/sessionspec"
	"slices"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/llm/registry"
	"github.com/agentd-dev/agentd/internal/tool"
)

// standIn is a tool from elsewhere (an editor's, an MCP server's).
type standIn struct{ name string }

func (s standIn) Spec() llm.Tool {
	return llm.Tool{Name: s.name, Description: "stand-in", Parameters: []byte(`{"type":"object"}`)}
}
func (standIn) Execute(context.Context, tool.Call, func(tool.Result)) tool.Result {
	return tool.TextResult("stand-in", nil)
}

// Extra tools take the place of the built-in of their name and add the
// others.
func TestSpecExtraReplacesAndAdds(t *testing.T) {
	reg, err := registry.Load(context.Background(), registry.Options{Extra: []llm.Model{*faux.Model()}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Options{Models: &Models{Registry: reg, Fallback: faux.New(faux.Options{})}, Model: faux.Model()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.Session(sessionspec.Spec{Cwd: t.TempDir(), Tools: []string{"read", "ls"}, Extra: []tool.Tool{standIn{"read"}, standIn{"mcp__x__y"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	byName := map[string]string{}
	for _, tl := range s.Agent().Config().Tools {
		byName[tl.Spec().Name] = tl.Spec().Description
	}
	if byName["read"] != "stand-in" || byName["mcp__x__y"] != "stand-in" || byName["ls"] == "" || byName["ls"] == "stand-in" {
		t.Fatalf("tools %v", byName)
	}
	if _, ok := byName["bash"]; ok {
		t.Fatalf("a built-in not asked for: %v", byName)
	}
}

// A session's confined tools must not read the other live sessions'
// workspaces: peersOf lists them, never the session's own, and forgets a
// session once it is closed.
func TestPeersOf(t *testing.T) {
	var e Engine
	a, b := tool.NewScope(), tool.NewScope()
	e.addLive(a, "/w/a")
	e.addLive(b, "/w/b")
	if got := e.peersOf(a); !slices.Equal(got, []string{"/w/b"}) {
		t.Fatalf("peers of a = %q, want [/w/b]", got)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := e.peersOf(a); len(got) != 0 {
		t.Fatalf("peers of a after b closed = %q, want none", got)
	}
	if got := e.peersOf(b); !slices.Equal(got, []string{"/w/a"}) {
		t.Fatalf("peers of b = %q, want [/w/a]", got)
	}
}
