package convapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/mcp"
)

// mcpHTTPServer is an MCP server over streamable HTTP on 127.0.0.1 with
// an echo tool.
func mcpHTTPServer(t *testing.T) string {
	return mcpHTTPServerSeen(t, nil)
}

// mcpHTTPServerSeen is mcpHTTPServer telling seen of each HTTP request
// it gets.
func mcpHTTPServerSeen(t *testing.T, seen func(*http.Request)) string {
	srv := sdk.NewServer(&sdk.Implementation{Name: "t", Version: "1"}, nil)
	srv.AddTool(&sdk.Tool{Name: "echo", Description: "echoes", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, r *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var a struct{ Text string }
			_ = json.Unmarshal(r.Params.Arguments, &a)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "mcp echo: " + a.Text}}}, nil
		})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if seen != nil {
			seen(r)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		// A client's event stream would keep Close waiting.
		ts.CloseClientConnections()
		ts.Close()
	})
	return ts.URL
}

func toolsOf(r reply) []string {
	chat, _ := r.m["chat"].(map[string]any)
	return toStrings(chat["tools"])
}

// A conversation's config names MCP servers (gptme's mcp section): they
// start for it alone, their tools are confirmed like the built-in ones,
// the config echoes them with the servers that failed to start, and an
// update replaces them.
func TestConversationMCPServers(t *testing.T) {
	fx := newFixture(t, fixtureOptions{mcp: mcp.New(mcp.Options{})})
	url := mcpHTTPServer(t)
	mcpCfg := map[string]any{"enabled": true, "servers": []any{
		map[string]any{"name": "web", "url": url},
		map[string]any{"name": "broken", "command": "/nonexistent/mcp-server", "args": []string{"-x"}, "env": map[string]string{"K": "V"}},
		map[string]any{"name": "off", "enabled": false, "command": "/nonexistent/off"},
	}}
	sid := fx.create("m1", map[string]any{"config": map[string]any{"chat": map[string]any{}, "mcp": mcpCfg},
		"messages": []any{map[string]any{"role": "user", "content": "echo hi"}}})
	cfg := fx.ok("GET", "/api/v2/conversations/m1/config", nil)
	if !slices.Contains(toolsOf(cfg), "web__echo") || slices.Contains(toolsOf(cfg), "off__echo") {
		t.Fatalf("tools: %s", cfg)
	}
	m := cfg.m["mcp"].(map[string]any)
	servers := m["servers"].([]any)
	if m["enabled"] != true || len(servers) != 3 || servers[0].(map[string]any)["url"] != url ||
		servers[1].(map[string]any)["env"].(map[string]any)["K"] != SecretPlaceholder || servers[2].(map[string]any)["enabled"] != false {
		t.Fatalf("mcp echoed: %s", cfg)
	}
	un, _ := cfg.m["unavailable"].([]any)
	if len(un) != 1 || un[0].(map[string]any)["source"] != "mcp:broken" ||
		!strings.Contains(un[0].(map[string]any)["error"].(string), "MCP server broken failed to start") {
		t.Fatalf("unavailable: %s", cfg)
	}

	// The MCP tool waits for a person like any other.
	st := fx.open("/api/v2/conversations/m1/events?session_id=" + sid)
	st.next("connected")
	fx.faux.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "call1", Name: "web__echo", Args: `{"text":"hi"}`}}}, faux.Response{Text: "Done."})
	fx.ok("POST", "/api/v2/conversations/m1/step", map[string]any{"session_id": sid})
	pend := st.next("tool_pending")
	if pend.m["tooluse"].(map[string]any)["tool"] != "web__echo" {
		t.Fatalf("tool_pending = %s", pend.raw)
	}
	fx.ok("POST", "/api/v2/conversations/m1/tool/confirm", map[string]any{"session_id": sid, "tool_id": pend.str("tool_id"), "action": "confirm"})
	res := st.next("message_added")
	if c, _ := res.m["message"].(map[string]any)["content"].(string); !strings.Contains(c, "mcp echo: hi") {
		t.Fatalf("tool result = %s", res.raw)
	}
	st.next("generation_complete")
	st.next("run_ended") // a config update waits for the run's end
	st.close()

	// An update replaces the servers: none now.
	r := fx.ok("PATCH", "/api/v2/conversations/m1/config", map[string]any{"mcp": map[string]any{"servers": []any{}}})
	cfg = fx.ok("GET", "/api/v2/conversations/m1/config", nil)
	if slices.Contains(toolsOf(cfg), "web__echo") || cfg.m["unavailable"] != nil || len(cfg.m["mcp"].(map[string]any)["servers"].([]any)) != 0 {
		t.Fatalf("after the update: %s (PATCH %s)", cfg, r)
	}
	// And back, through the update endpoint.
	fx.ok("PATCH", "/api/v2/conversations/m1/config", map[string]any{"mcp": map[string]any{"servers": []any{map[string]any{"name": "web2", "url": url}}}})
	if cfg = fx.ok("GET", "/api/v2/conversations/m1/config", nil); !slices.Contains(toolsOf(cfg), "web2__echo") {
		t.Fatalf("after the second update: %s", cfg)
	}
	// Another conversation does not have them.
	fx.create("m2", nil)
	if cfg := fx.ok("GET", "/api/v2/conversations/m2/config", nil); slices.ContainsFunc(toolsOf(cfg), func(n string) bool { return strings.Contains(n, "__") }) || cfg.m["mcp"] != nil {
		t.Fatalf("the other conversation: %s", cfg)
	}
	fx.ok("DELETE", "/api/v2/conversations/m1", nil)
}

// Hostile mcp sections are a 400 naming the field, on create and on
// update, and nothing is created.
func TestConversationMCPBadInput(t *testing.T) {
	fx := newFixture(t, fixtureOptions{mcp: mcp.New(mcp.Options{})})
	fx.create("ok", nil)
	srv := func(fields map[string]any) map[string]any { return map[string]any{"servers": []any{fields}} }
	tests := []struct {
		name string
		mcp  any
		want string
	}{
		{"not an object", []any{}, "mcp must be an object {enabled, auto_start, servers}"},
		{"servers not a list", map[string]any{"servers": map[string]any{}}, "mcp.servers must be a list of objects"},
		{"server not an object", map[string]any{"servers": []any{"x"}}, "mcp.servers must be a list of objects"},
		{"enabled not a boolean", map[string]any{"enabled": "yes"}, "mcp.enabled must be a boolean"},
		{"unknown key", map[string]any{"servrs": []any{}}, `mcp: Unknown field "servrs"; allowed fields: enabled, auto_start, servers`},
		{"missing name", srv(map[string]any{"command": "x"}), "mcp.servers[0].name is required: a non-empty string"},
		{"name not a string", srv(map[string]any{"name": 3, "command": "x"}), "mcp.servers[0].name is required: a non-empty string"},
		{"neither", srv(map[string]any{"name": "a"}), "mcp.servers[0] (a): give a command (stdio) or a url (streamable HTTP)"},
		{"both", srv(map[string]any{"name": "a", "command": "x", "url": "http://127.0.0.1:1/"}), "mcp.servers[0] (a): give a command or a url, not both"},
		{"command not a string", srv(map[string]any{"name": "a", "command": []string{"x"}}), "mcp.servers[0].command must be a string"},
		{"args not strings", srv(map[string]any{"name": "a", "command": "x", "args": []any{1}}), "mcp.servers[0].args must be a list of strings"},
		{"env not a map", srv(map[string]any{"name": "a", "command": "x", "env": []string{"K=V"}}), "mcp.servers[0].env must be an object of strings"},
		{"env values not strings", srv(map[string]any{"name": "a", "command": "x", "env": map[string]any{"K": 1}}), "mcp.servers[0].env must be an object of strings"},
		{"headers not a map", srv(map[string]any{"name": "a", "url": "http://127.0.0.1:1/", "headers": "x"}), "mcp.servers[0].headers must be an object of strings"},
		{"bad url", srv(map[string]any{"name": "a", "url": "file:///etc/passwd"}), `mcp.servers[0].url: "file:///etc/passwd" is not an http or https URL`},
		{"duplicate name", map[string]any{"servers": []any{map[string]any{"name": "a", "command": "x"}, map[string]any{"name": "a", "command": "y"}}}, `mcp.servers[1].name: "a" is given twice`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "bad" + string(rune('a'+i))
			r := fx.do("PUT", "/api/v2/conversations/"+id, map[string]any{"config": map[string]any{"mcp": tt.mcp}})
			wantErr(t, r, http.StatusBadRequest, "config."+tt.want)
			if g := fx.do("GET", "/api/v2/conversations/"+id, nil); g.status != http.StatusNotFound {
				t.Errorf("created anyway: %s", g)
			}
			wantErr(t, fx.do("PATCH", "/api/v2/conversations/ok/config", map[string]any{"mcp": tt.mcp}), http.StatusBadRequest, tt.want)
		})
	}
	// A server that does not start MCP servers says so.
	plain := newFixture(t, fixtureOptions{})
	wantErr(t, plain.do("PUT", "/api/v2/conversations/x", map[string]any{"config": map[string]any{"mcp": srv(map[string]any{"name": "a", "command": "x"})}}),
		http.StatusBadRequest, "config.mcp: this server does not start MCP servers for conversations")
}

// A conversation's MCP servers are kept in its file: after a restart the
// conversation has them again, and their tools run.
func TestConversationMCPServersSurviveRestart(t *testing.T) {
	root := t.TempDir()
	url := mcpHTTPServer(t)
	fx := newFixture(t, fixtureOptions{root: root, mcp: mcp.New(mcp.Options{})})
	fx.create("kept", map[string]any{"config": map[string]any{"chat": map[string]any{},
		"mcp": map[string]any{"servers": []any{map[string]any{"name": "web", "url": url}}}}})
	fx.stop()

	fx2 := newFixture(t, fixtureOptions{root: root, mcp: mcp.New(mcp.Options{})})
	cfg := fx2.ok("GET", "/api/v2/conversations/kept/config", nil)
	if !slices.Contains(toolsOf(cfg), "web__echo") {
		t.Fatalf("tools after the restart: %s", cfg)
	}
	if m, _ := cfg.m["mcp"].(map[string]any); m == nil || len(m["servers"].([]any)) != 1 {
		t.Fatalf("mcp after the restart: %s", cfg)
	}
	fx2.ok("POST", "/api/v2/conversations/kept", map[string]any{"role": "user", "content": "echo it"})
	st := fx2.open("/api/v2/conversations/kept/events")
	conn := st.next("connected")
	fx2.faux.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "c1", Name: "web__echo", Args: `{"text":"again"}`}}}, faux.Response{Text: "Done."})
	fx2.ok("POST", "/api/v2/conversations/kept/step", map[string]any{"session_id": conn.str("session_id"), "auto_confirm": true})
	res := st.next("message_added")
	for res.m["message"].(map[string]any)["role"] != "system" {
		res = st.next("message_added")
	}
	if c, _ := res.m["message"].(map[string]any)["content"].(string); !strings.Contains(c, "mcp echo: again") {
		t.Fatalf("the tool's result after the restart: %s", res.raw)
	}
	st.close()
}
