package session_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/mcp"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/tool"
)

// toolNames are the tools a model request offered.
func toolNames(r wiremock.Request) []string {
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
	h.srv.Enqueue(wiremock.Script{Text: []string{"one"}})
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
	h.srv.Enqueue(wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "c1", Name: "web__second", Args: []string{`{}`}}}},
		wiremock.Script{Text: []string{"done"}})
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

// lateSource is a tool source whose tools come when it is prepared, as
// a conversation's MCP servers with auto_start false.
type lateSource struct {
	mu       sync.Mutex
	tools    []tool.Tool
	watch    func()
	prepared int
	ctxOK    bool
}

func (l *lateSource) Tools() []tool.Tool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tools
}

func (l *lateSource) Watch(changed func()) func() {
	l.mu.Lock()
	l.watch = changed
	l.mu.Unlock()
	return func() {}
}

func (*lateSource) Unavailable() []tool.Unavailable { return nil }

func (l *lateSource) Prepare(ctx context.Context) {
	l.mu.Lock()
	l.prepared++
	l.ctxOK = ctx.Err() == nil
	first := l.tools == nil
	if first {
		l.tools = []tool.Tool{lateTool{}}
	}
	watch := l.watch
	l.mu.Unlock()
	if first {
		watch()
	}
}

type lateTool struct{}

func (lateTool) Spec() llm.Tool {
	return llm.Tool{Name: "late__tool", Description: "comes when prepared", Parameters: []byte(`{"type":"object"}`)}
}

func (lateTool) Execute(context.Context, tool.Call, func(tool.Result)) tool.Result {
	return tool.Result{Content: []llm.Content{llm.Text("late")}}
}

// A source that is a Preparer is prepared at the start of every run,
// before the model request, so the first run is offered the tools it
// brings; a recorded tool list naming them holds across a reload, though
// the tools come only once the source is added and prepared again.
func TestPreparerBeforeTheRun(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Handle(echoModel)
	src := &lateSource{}
	h.s.AddToolSource(src, nil)
	if slices.Contains(h.s.AvailableTools(), "late__tool") {
		t.Fatal("the tool is there before the source was prepared")
	}
	h.prompt("first")
	h.wait()
	if got := toolNames(h.srv.LastRequest(t)); !slices.Contains(got, "late__tool") {
		t.Fatalf("the first run was offered %v", got)
	}
	h.prompt("second")
	h.wait()
	src.mu.Lock()
	prepared, ctxOK := src.prepared, src.ctxOK
	src.mu.Unlock()
	if prepared != 2 || !ctxOK {
		t.Fatalf("prepared %d times (a live context: %v), want once per run", prepared, ctxOK)
	}
	if err := h.s.SetTools([]string{"read", "late__tool"}); err != nil {
		t.Fatal(err)
	}

	h2 := reopenCopy(t, h)
	if got := h2.s.ToolNames(); !slices.Equal(got, []string{"read"}) {
		t.Fatalf("enabled after the reload, before the source: %v", got)
	}
	h2.s.AddToolSource(&lateSource{}, nil)
	h2.prompt("after the reload")
	h2.wait()
	if got := toolNames(h.srv.LastRequest(t)); !slices.Equal(got, []string{"read", "late__tool"}) {
		t.Fatalf("offered after the reload: %v", got)
	}
}
