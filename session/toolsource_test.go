package session_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentd-dev/agentd/interaction"
	"github.com/agentd-dev/agentd/llm/llmtest"
	"github.com/agentd-dev/agentd/mcp"
	"github.com/agentd-dev/agentd/session"
)

// toolNames are the tools a model request offered.
func toolNames(r llmtest.Request) []string {
	var out []string
	tools, _ := r.JSON["tools"].([]any)
	for _, t := range tools {
		fn, _ := t.(map[string]any)["function"].(map[string]any)
		name, _ := fn["name"].(string)
		out = append(out, name)
	}
	return out
}

// An MCP server's tools are the session's through its Set: offered to the
// model, under the policy, and when the server adds a tool and says so,
// the next prompt offers it too; a server that failed to start is
// listed as unavailable, and the session works without it.
func TestToolSourceChangesReachTheModel(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "t", Version: "1"}, nil)
	text := func(s string) *sdk.CallToolResult {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
	}
	srv.AddTool(&sdk.Tool{Name: "first", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return text("from first"), nil
	})
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	defer hs.Close()
	set := mcp.New(mcp.Options{}).Open(context.Background(), []mcp.ServerConfig{
		{Name: "web", URL: hs.URL}, {Name: "broken", Command: "/nonexistent/mcp-server"}}, t.TempDir())

	h := newHarness(t, func(c *session.Config) {
		c.Policy = interaction.Policy{Rules: []interaction.Rule{{Tool: "web__second", Action: interaction.ActionAsk}}}
	})
	h.s.AddToolSource(set, set.Close)
	if !slices.Contains(h.s.AvailableTools(), "web__first") {
		t.Fatalf("tools %v", h.s.AvailableTools())
	}
	un := h.s.UnavailableTools()
	if len(un) != 1 || un[0].Source != "mcp:broken" || !strings.Contains(un[0].Error, "MCP server broken failed to start") {
		t.Fatalf("unavailable %+v", un)
	}
	h.srv.Enqueue(llmtest.Script{Text: []string{"one"}})
	h.prompt("first")
	h.wait()
	if got := toolNames(h.srv.LastRequest(t)); !slices.Contains(got, "web__first") || slices.Contains(got, "web__second") {
		t.Fatalf("first request offered %v", got)
	}

	srv.AddTool(&sdk.Tool{Name: "second", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return text("from second"), nil
	})
	ev := h.waitEvent(func(ev session.Event) bool {
		return ev.Type == session.EventConfigChanged && ev.Config.Changed == "tools" && slices.Contains(ev.Config.Tools, "web__second")
	})
	if !slices.Contains(h.s.AvailableTools(), "web__second") {
		t.Fatalf("after the change: %v (event %v)", h.s.AvailableTools(), ev.Config.Tools)
	}
	// The new tool is offered and goes through the policy like any other.
	h.srv.Enqueue(llmtest.Script{ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "web__second", Args: []string{`{}`}}}},
		llmtest.Script{Text: []string{"done"}})
	h.prompt("second")
	req := h.waitEvent(is(string(session.EventInteractionRequested)))
	if tl := req.Interaction.Request.Tool; tl == nil || tl.ToolName != "web__second" {
		t.Fatalf("approval %+v", req.Interaction.Request)
	}
	if err := h.s.Answer(req.Interaction.Request.ID, interaction.Response{Verdict: interaction.VerdictApprove}); err != nil {
		t.Fatal(err)
	}
	h.wait()
	if got := lastUserText(ptr(h.srv.LastRequest(t))); got != "TOOL:from second" {
		t.Fatalf("the model saw %q", got)
	}
	// Closing the session stops the servers it owns (goleak checks
	// their goroutines).
	if err := h.s.Close(); err != nil {
		t.Fatal(err)
	}
}
