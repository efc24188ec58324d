package convapi

import (
	"net/http"
	"slices"
	"testing"

	"github.com/agentd-dev/agentd/internal/health"
	"github.com/agentd-dev/agentd/internal/mcp"
)

// A conversation's MCP server that failed to start is a health issue for
// as long as the conversation has it, and only then: servers a refused
// PATCH opened are none, lazy ones are one once they were started, and
// the issue goes when the servers are replaced or the conversation is
// deleted.
func TestConversationMCPFailureHealthIssue(t *testing.T) {
	hl := health.NewHealth(nil)
	fx := newFixture(t, fixtureOptions{mcp: mcp.New(mcp.Options{}), health: hl})
	bad := func(lazy bool) map[string]any {
		return map[string]any{"auto_start": !lazy, "servers": []any{map[string]any{"name": "bad", "command": "/nonexistent/mcp-server"}}}
	}
	issue := func(conv string) string {
		return "Session " + conv + ": mcp:bad did not start; the conversation's config says why"
	}
	has := func(want ...string) {
		t.Helper()
		got := hl.Check().Issues
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) && (len(got) != 0 || len(want) != 0) {
			t.Fatalf("health issues %q, want %q", got, want)
		}
	}

	fx.create("plain", nil)
	wantErrStart(t, fx.do("PATCH", "/api/v2/conversations/plain/config", map[string]any{"chat": chatTools("bad__x"), "mcp": bad(true)}),
		http.StatusBadRequest, "Tool 'bad__x' not found")
	has() // the servers of a refused change (started to check its tools) never were the conversation's

	fx.create("lazy", map[string]any{"config": map[string]any{"mcp": bad(true)}})
	has() // not started yet
	wantErrStart(t, fx.do("PATCH", "/api/v2/conversations/lazy/config", map[string]any{"chat": chatTools("bad__x")}),
		http.StatusBadRequest, "Tool 'bad__x' not found")
	has(issue("lazy")) // started by naming its tools

	fx.create("eager", map[string]any{"config": map[string]any{"mcp": bad(false)}})
	has(issue("lazy"), issue("eager"))
	fx.ok("PATCH", "/api/v2/conversations/lazy/config", map[string]any{"mcp": map[string]any{"servers": []any{}}})
	has(issue("eager"))
	fx.ok("DELETE", "/api/v2/conversations/eager", nil)
	has()
}
