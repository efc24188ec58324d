package engine

import (
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/sandbox"
)

// The question a refused command puts to the person names exactly the
// access approving gives, and says that approving runs the whole
// command again, so what it did before the refusal happens twice.
func TestEscalationRequestSaysItRunsAgain(t *testing.T) {
	ws := []string{"/w", "/tmp"}
	cases := []struct {
		policy sandbox.Policy
		need   sandbox.Need
		title  string
	}{
		{sandbox.Policy{Mode: sandbox.WorkspaceWrite, Writable: ws}, sandbox.Need{Write: true}, "bash wants to write outside the workspace (approving runs the command again)"},
		{sandbox.Policy{Mode: sandbox.ReadOnly, Writable: ws}, sandbox.Need{Write: true}, "bash wants to write files in the workspace (approving runs the command again)"},
		{sandbox.Policy{Mode: sandbox.WorkspaceWrite, Writable: ws}, sandbox.Need{Network: true}, "bash wants to use the network (approving runs the command again)"},
	}
	for _, c := range cases {
		t.Run(c.title, func(t *testing.T) {
			req := EscalationRequest(sandbox.Request{ToolCallID: "t1", ToolName: "bash", Command: "make install", Need: c.need, Policy: c.policy, Output: "Permission denied"})
			if req.Title != c.title {
				t.Errorf("title %q, want %q", req.Title, c.title)
			}
			for _, want := range []string{"make install", "runs the whole command again, from the start", "happens a second time", "with that access and no other"} {
				if !strings.Contains(req.Message, want) {
					t.Errorf("message %q lacks %q", req.Message, want)
				}
			}
		})
	}
}
