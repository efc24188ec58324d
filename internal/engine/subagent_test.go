package engine

import (
	"testing"

	"github.com/agentd-dev/agentd/internal/sandbox"
)

// A child runs in its parent's mode, or its type's when that is
// stricter; never looser.
func TestChildMode(t *testing.T) {
	for _, tt := range []struct{ parent, typ, want sandbox.Mode }{
		{sandbox.FullAccess, "", sandbox.FullAccess},
		{sandbox.FullAccess, sandbox.ReadOnly, sandbox.ReadOnly},
		{sandbox.WorkspaceWrite, sandbox.FullAccess, sandbox.WorkspaceWrite},
		{sandbox.ReadOnly, sandbox.WorkspaceWrite, sandbox.ReadOnly},
		{sandbox.WorkspaceWrite, sandbox.ReadOnly, sandbox.ReadOnly},
		{sandbox.WorkspaceWrite, "bogus", "bogus"}, // unknown ranks strictest (engine.Session then refuses it)
	} {
		if got := ChildMode(tt.parent, tt.typ); got != tt.want {
			t.Errorf("ChildMode(%s, %s) = %s, want %s", tt.parent, tt.typ, got, tt.want)
		}
	}
}
