package cli

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/config"
	"github.com/agentd-dev/agentd/internal/sandbox"
)

// Where the kernel cannot confine, agentd refuses to start in a
// confining mode, or, when told to fall back, runs unconfined and says
// so; it never claims a sandbox it does not have.
func TestSandboxPolicyFallback(t *testing.T) {
	none := sandbox.Support{Err: errors.New("no Landlock here")}
	old := sandbox.Support{ABI: 3}
	noNS := sandbox.Support{ABI: 7, Isolation: errors.New("no user namespaces here")}
	cases := []struct {
		name    string
		sc      config.Sandbox
		support sandbox.Support
		want    sandbox.Mode
		err     string
		warn    bool
	}{
		{"refuse", config.Sandbox{Mode: "workspace-write", Fallback: "refuse"}, none, "", "cannot confine tools in workspace-write mode", false},
		{"unconfined", config.Sandbox{Mode: "read-only", Fallback: "unconfined"}, none, sandbox.FullAccess, "", true},
		{"full-access needs nothing", config.Sandbox{Mode: "full-access", Fallback: "refuse"}, none, sandbox.FullAccess, "", false},
		{"no network restriction on ABI 3", config.Sandbox{Mode: "workspace-write", Fallback: "refuse"}, old, "", "cannot restrict the network", false},
		{"ABI 3 with the network allowed", config.Sandbox{Mode: "workspace-write", Network: true, Fallback: "refuse"}, old, sandbox.WorkspaceWrite, "", false},
		{"enforced", config.Sandbox{Mode: "read-only", Fallback: "refuse"}, sandbox.Support{ABI: 7}, sandbox.ReadOnly, "", false},
		{"no namespaces, refuse", config.Sandbox{Mode: "workspace-write", Fallback: "refuse"}, noNS, "", "cannot isolate tools from agentd's processes and files: no user namespaces here", false},
		{"no namespaces, unconfined", config.Sandbox{Mode: "workspace-write", Fallback: "unconfined"}, noNS, sandbox.WorkspaceWrite, "", false},
		{"no namespaces, full-access", config.Sandbox{Mode: "full-access", Fallback: "refuse"}, noNS, sandbox.FullAccess, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			p, err := sandboxPolicy(c.sc, c.support, slog.New(slog.NewTextHandler(&logs, nil)))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || p.Mode != c.want {
				t.Fatalf("policy %+v, %v; want mode %s", p, err, c.want)
			}
			if got := strings.Contains(logs.String(), "NOT SANDBOXED"); got != c.warn {
				t.Fatalf("warning logged = %v, want %v: %s", got, c.warn, logs.String())
			}
			// Isolation is given up only where it cannot be had and
			// the configuration said to go on, and then loudly.
			wantShared := p.Confined() && c.support.Isolation != nil
			if p.NoIsolation != wantShared || strings.Contains(logs.String(), "NOT ISOLATED") != wantShared {
				t.Fatalf("NoIsolation = %v, want %v; log: %s", p.NoIsolation, wantShared, logs.String())
			}
		})
	}
}
