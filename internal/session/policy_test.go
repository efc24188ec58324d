package session_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/tool"
)

// TestPolicyPathsResolveInTheSessionCwd: the session's gate resolves a
// tool's path in the session's working directory, as the tool does, so a
// link in the project does not carry a write past a deny rule.
func TestPolicyPathsResolveInTheSessionCwd(t *testing.T) {
	prot := t.TempDir()
	secret := filepath.Join(prot, "x")
	if err := os.WriteFile(secret, []byte("PROTECTED\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(c *session.Config) {
		if err := os.Symlink(prot, filepath.Join(c.Cwd, "link")); err != nil {
			t.Fatal(err)
		}
		c.BashEnv = tool.Env{Cwd: c.Cwd}
		c.Policy = interaction.Policy{Rules: []interaction.Rule{
			{Match: prot + "/*", Action: interaction.ActionDeny, Reason: "protected"},
		}}
	})
	h.srv.Enqueue(wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "c1", Name: "write", Args: []string{`{"path":"link/x","content":"pwned\n"}`}}}},
		wiremock.Script{Text: []string{"ok"}})
	h.prompt("write")
	h.wait()
	var res *llm.Message
	for _, m := range h.s.Messages() {
		if m.Role == llm.RoleToolResult {
			res = m
		}
	}
	if res == nil || !res.IsError || res.TextContent() != "Tool call denied by policy: protected" {
		t.Errorf("tool result %+v", res)
	}
	if b, _ := os.ReadFile(secret); string(b) != "PROTECTED\n" {
		t.Errorf("the write went through the link: %q", b)
	}
}
