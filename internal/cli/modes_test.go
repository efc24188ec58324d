package cli

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/agentd-dev/agentd/internal/config"
	"github.com/agentd-dev/agentd/internal/sandbox"
)

// Plan mode's bash runs read-only where the kernel can enforce it, with
// the configuration's hidden paths, and nowhere else.
func TestReadOnlySandbox(t *testing.T) {
	none := sandbox.Support{Err: errors.New("no Landlock here")}
	ok := sandbox.Support{ABI: 7}
	noNS := sandbox.Support{ABI: 7, Isolation: errors.New("no user namespaces here")}
	ww := sandbox.Policy{Mode: sandbox.WorkspaceWrite}
	full := sandbox.Policy{Mode: sandbox.FullAccess, Network: true}
	tests := []struct {
		name        string
		engine      sandbox.Policy
		support     sandbox.Support
		want        bool
		network     bool
		noIsolation bool
	}{
		{"no Landlock: no bash", full, none, false, false, false},
		{"unconfined server: read-only with the network", full, ok, true, true, false},
		{"workspace-write without network stays without", ww, ok, true, false, false},
		{"confined without namespaces: Landlock alone", ww, noNS, true, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := config.Sandbox{Hide: config.StringList{"/secret"}}
			p := readOnlySandbox(sc, tt.engine, tt.support, slog.New(slog.DiscardHandler))
			if (p != nil) != tt.want {
				t.Fatalf("policy %+v, want one: %v", p, tt.want)
			}
			if p == nil {
				return
			}
			if p.Mode != sandbox.ReadOnly || p.Network != tt.network || p.NoIsolation != tt.noIsolation || len(p.Hidden) != 1 || p.Writable != nil {
				t.Fatalf("policy %+v", *p)
			}
		})
	}
}
