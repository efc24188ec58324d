package cli

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/cluster"
	"github.com/agentd-dev/agentd/internal/config"
	"github.com/agentd-dev/agentd/internal/sandbox"
)

func TestSandboxFlags(t *testing.T) {
	cases := []struct {
		def  string
		args []string
		want sandbox.Policy
		err  string
	}{
		{"workspace-write", nil, sandbox.Policy{Mode: sandbox.WorkspaceWrite}, ""},
		{"full-access", nil, sandbox.Policy{Mode: sandbox.FullAccess, Network: true}, ""},
		{"workspace-write", []string{"--sandbox", "read-only", "--sandbox-network"}, sandbox.Policy{Mode: sandbox.ReadOnly, Network: true}, ""},
		{"workspace-write", []string{"--sandbox", "readonly"}, sandbox.Policy{}, `--sandbox: sandbox mode "readonly": want read-only, workspace-write or full-access`},
		{"workspace-write", []string{"--sandbox-allow-write", "/c", "--sandbox-allow-write", "/d"}, sandbox.Policy{Mode: sandbox.WorkspaceWrite, Writable: []string{"/c", "/d"}}, ""},
		{"workspace-write", []string{"--sandbox-allow-write", "rel"}, sandbox.Policy{}, `--sandbox-allow-write "rel": must be an absolute path`},
		{"workspace-write", []string{"--sandbox-fallback", "maybe"}, sandbox.Policy{}, `--sandbox-fallback "maybe": want refuse or unconfined`},
		{"workspace-write", []string{"--sandbox-hide", "/creds", "--sandbox-hide", "/etc/k"}, sandbox.Policy{Mode: sandbox.WorkspaceWrite, Hidden: []string{"/creds", "/etc/k"}}, ""},
		{"workspace-write", []string{"--sandbox-hide", "creds"}, sandbox.Policy{}, `--sandbox-hide "creds": must be an absolute path`},
		{"workspace-write", []string{"--sandbox-env-allow", "GITHUB_TOKEN"}, sandbox.Policy{Mode: sandbox.WorkspaceWrite}, ""},
		{"workspace-write", []string{"--sandbox-env-allow", "A=B"}, sandbox.Policy{}, `--sandbox-env-allow "A=B": must be a variable name`},
		{"workspace-write", []string{"--sandbox-env-allow", ""}, sandbox.Policy{}, `--sandbox-env-allow "": must be a variable name`},
	}
	for _, c := range cases {
		t.Run(strings.Join(append([]string{c.def}, c.args...), " "), func(t *testing.T) {
			e := config.Engine{Sandbox: config.Sandbox{Mode: c.def}}
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			e.Register(fs)
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			err := e.Check()
			if c.err != "" {
				if err == nil || err.Error() != c.err {
					t.Fatalf("Check = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := policyOf(e.Sandbox); got.Mode != c.want.Mode || got.Network != c.want.Network || !slices.Equal(got.Writable, c.want.Writable) || !slices.Equal(got.Hidden, c.want.Hidden) {
				t.Fatalf("Policy = %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestConfigAgreesWithPackages checks the plain values config keeps in
// place of importing sandbox and cluster against those packages.
func TestConfigAgreesWithPackages(t *testing.T) {
	var modes []string
	for _, m := range sandbox.Modes {
		modes = append(modes, string(m))
	}
	if !slices.Equal(modes, config.SandboxModes) {
		t.Errorf("config.SandboxModes = %q, sandbox.Modes = %q", config.SandboxModes, modes)
	}
	if config.DefaultLeaseTTL != cluster.DefaultLeaseTTL {
		t.Errorf("config.DefaultLeaseTTL = %v, cluster.DefaultLeaseTTL = %v", config.DefaultLeaseTTL, cluster.DefaultLeaseTTL)
	}
	for _, id := range []string{"", "a", "node-1_B", "a.b", "a b", "é", "a*", "a>", strings.Repeat("x", 200), strings.Repeat("x", 201)} {
		if got, want := config.ValidNodeID(id), cluster.ValidID(id); got != want {
			t.Errorf("config.ValidNodeID(%q) = %v, cluster.ValidID = %v", id, got, want)
		}
	}
}
