package convapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/mcp"
)

// envServerVar makes the test binary an MCP server over stdio.
const envServerVar = "AGENTD_CONVAPI_MCP_SERVER"

// envMCPServer serves one tool, env, that answers with the value of the
// environment variable it is given: what a conversation's MCP env gave
// the server.
func envMCPServer() {
	s := sdk.NewServer(&sdk.Implementation{Name: "env", Version: "1"}, nil)
	s.AddTool(&sdk.Tool{Name: "env", Description: "an environment variable", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, r *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var a struct{ Name string }
			_ = json.Unmarshal(r.Params.Arguments, &a)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: a.Name + "=" + os.Getenv(a.Name)}}}, nil
		})
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// envServer is the configuration of envMCPServer under name, with env.
func envServer(name string, env map[string]string) map[string]any {
	e := map[string]string{envServerVar: "1"}
	for k, v := range env {
		e[k] = v
	}
	return map[string]any{"name": name, "command": os.Args[0], "env": e}
}

// callTool has the faux model call tool with args in a step of conv
// (confirmed in advance) and returns the tool's result.
func (fx *fixture) callTool(conv, name, args string) string {
	fx.t.Helper()
	fx.ok("POST", "/api/v2/conversations/"+conv, map[string]any{"role": "user", "content": "call " + name})
	st := fx.open("/api/v2/conversations/" + conv + "/events")
	defer st.close()
	conn := st.next("connected")
	fx.faux.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "c-" + name, Name: name, Args: args}}}, faux.Response{Text: "Done."})
	fx.ok("POST", "/api/v2/conversations/"+conv+"/step", map[string]any{"session_id": conn.str("session_id"), "auto_confirm": true})
	for {
		res := st.next("message_added")
		if msg := res.m["message"].(map[string]any); msg["role"] == "system" {
			c, _ := msg["content"].(string)
			st.next("generation_complete")
			st.next("run_ended") // a config update waits for the run's end
			return c
		}
	}
}

// wantErrStart checks an error answer that begins with msg.
func wantErrStart(t *testing.T, r reply, status int, msg string) {
	t.Helper()
	if r.status != status || !strings.HasPrefix(r.str("error"), msg) {
		t.Errorf("got %s\nwant %d {\"error\": %q...}", r, status, msg)
	}
}

func chatTools(names ...string) map[string]any {
	return map[string]any{"tools": names}
}

// chat.tools may name the tools of MCP servers given in the same
// request, on create and on PATCH, whether the servers start with the
// conversation or later; a name no server offers is a 400 naming it
// (with the servers that failed to start), and the request changes
// nothing. The list holds after a restart.
func TestConversationMCPToolsInSameRequest(t *testing.T) {
	root := t.TempDir()
	url := mcpHTTPServer(t)
	fx := newFixture(t, fixtureOptions{root: root, mcp: mcp.New(mcp.Options{})})
	web := func(name string) map[string]any { return map[string]any{"name": name, "url": url} }
	mcpOf := func(autoStart bool, servers ...any) map[string]any {
		return map[string]any{"auto_start": autoStart, "servers": servers}
	}
	for _, autoStart := range []bool{true, false} {
		t.Run(fmt.Sprint("auto_start=", autoStart), func(t *testing.T) {
			id := fmt.Sprint("tools-", autoStart)
			fx.create(id, map[string]any{"config": map[string]any{"chat": chatTools("read", "web__echo"), "mcp": mcpOf(autoStart, web("web"))}})
			if got := toolsOf(fx.ok("GET", "/api/v2/conversations/"+id+"/config", nil)); !slices.Equal(got, []string{"read", "web__echo"}) {
				t.Fatalf("tools after create: %v", got)
			}
			// Refused: a tool nobody offers, with a server that fails.
			bad := map[string]any{"chat": chatTools("read", "web2__nope"),
				"mcp": mcpOf(autoStart, web("web2"), map[string]any{"name": "broken", "command": "/nonexistent/mcp-server"})}
			r := fx.do("PATCH", "/api/v2/conversations/"+id+"/config", bad)
			wantErrStart(t, r, http.StatusBadRequest, "Tool 'web2__nope' not found")
			if !strings.Contains(string(r.body), "web2__echo") || !strings.Contains(string(r.body), "MCP server broken failed to start") {
				t.Fatalf("the refusal does not list the tools there are and the server that failed: %s", r)
			}
			cfg := fx.ok("GET", "/api/v2/conversations/"+id+"/config", nil)
			if got := toolsOf(cfg); !slices.Equal(got, []string{"read", "web__echo"}) || !strings.Contains(string(cfg.body), `"name":"web"`) || strings.Contains(string(cfg.body), "web2") {
				t.Fatalf("a refused PATCH changed the config: %s", cfg)
			}
			// Accepted: the new server's tool, in the same PATCH.
			fx.ok("PATCH", "/api/v2/conversations/"+id+"/config", map[string]any{"chat": chatTools("web2__echo", "ls"), "mcp": mcpOf(autoStart, web("web2"))})
			if got := toolsOf(fx.ok("GET", "/api/v2/conversations/"+id+"/config", nil)); !slices.Equal(got, []string{"ls", "web2__echo"}) {
				t.Fatalf("tools after the PATCH: %v", got)
			}
			if got := fx.callTool(id, "web2__echo", `{"text":"same request"}`); !strings.Contains(got, "mcp echo: same request") {
				t.Fatalf("the tool's result: %q", got)
			}
		})
	}
	// On create, a tool nobody offers is a 400 and nothing is created.
	r := fx.do("PUT", "/api/v2/conversations/never", map[string]any{"config": map[string]any{"chat": chatTools("web__nope"), "mcp": mcpOf(true, web("web"))}})
	wantErrStart(t, r, http.StatusBadRequest, "Tool 'web__nope' not found")
	if g := fx.do("GET", "/api/v2/conversations/never", nil); g.status != http.StatusNotFound {
		t.Fatalf("created anyway: %s", g)
	}
	fx.stop()

	// After a restart the lists name the MCP tools still, whether the
	// servers started with the conversation or not.
	fx2 := newFixture(t, fixtureOptions{root: root, mcp: mcp.New(mcp.Options{})})
	for _, id := range []string{"tools-true", "tools-false"} {
		if got := fx2.callTool(id, "web2__echo", `{"text":"after the restart"}`); !strings.Contains(got, "mcp echo: after the restart") {
			t.Fatalf("%s: the tool's result after the restart: %q", id, got)
		}
		if got := toolsOf(fx2.ok("GET", "/api/v2/conversations/"+id+"/config", nil)); !slices.Equal(got, []string{"ls", "web2__echo"}) {
			t.Fatalf("%s: tools after the restart: %v", id, got)
		}
	}
}

// auto_start false: the servers start at the conversation's first run,
// not when it is created or loaded; its tools then work. Absent, it is
// true: they start with the conversation.
func TestConversationMCPAutoStartFalse(t *testing.T) {
	root := t.TempDir()
	var requests atomic.Int64
	url := mcpHTTPServerSeen(t, func(*http.Request) { requests.Add(1) })
	fx := newFixture(t, fixtureOptions{root: root, mcp: mcp.New(mcp.Options{})})
	fx.create("lazy", map[string]any{"config": map[string]any{"mcp": map[string]any{"auto_start": false, "servers": []any{map[string]any{"name": "web", "url": url}}}}})
	cfg := fx.ok("GET", "/api/v2/conversations/lazy/config", nil)
	if n := requests.Load(); n != 0 || slices.Contains(toolsOf(cfg), "web__echo") || cfg.m["mcp"].(map[string]any)["auto_start"] != false {
		t.Fatalf("before the first run: %d requests to the server, config %s", n, cfg)
	}
	if got := fx.callTool("lazy", "web__echo", `{"text":"first use"}`); !strings.Contains(got, "mcp echo: first use") {
		t.Fatalf("the tool's result at the first run: %q", got)
	}
	if cfg := fx.ok("GET", "/api/v2/conversations/lazy/config", nil); !slices.Contains(toolsOf(cfg), "web__echo") {
		t.Fatalf("after the first run: %s", cfg)
	}
	fx.create("lazy2", map[string]any{"config": map[string]any{"mcp": map[string]any{"auto_start": false, "servers": []any{map[string]any{"name": "web", "url": url}}}}})
	// Absent: started with the conversation.
	fx.create("eager", map[string]any{"config": map[string]any{"mcp": map[string]any{"servers": []any{map[string]any{"name": "web", "url": url}}}}})
	if cfg := fx.ok("GET", "/api/v2/conversations/eager/config", nil); !slices.Contains(toolsOf(cfg), "web__echo") || cfg.m["mcp"].(map[string]any)["auto_start"] != true {
		t.Fatalf("auto_start absent: %s", cfg)
	}
	fx.stop()

	requests.Store(0)
	fx2 := newFixture(t, fixtureOptions{root: root, mcp: mcp.New(mcp.Options{})})
	cfg = fx2.ok("GET", "/api/v2/conversations/lazy/config", nil)
	if n := requests.Load(); n != 0 || slices.Contains(toolsOf(cfg), "web__echo") {
		t.Fatalf("loaded after a restart: %d requests to the server, config %s", n, cfg)
	}
	if got := fx2.callTool("lazy", "web__echo", `{"text":"after the restart"}`); !strings.Contains(got, "mcp echo: after the restart") {
		t.Fatalf("the tool's result after the restart: %q", got)
	}
	// A PATCH whose chat.tools names their tools starts them too.
	fx2.ok("PATCH", "/api/v2/conversations/lazy2/config", map[string]any{"chat": chatTools("web__echo")})
	if got := toolsOf(fx2.ok("GET", "/api/v2/conversations/lazy2/config", nil)); !slices.Equal(got, []string{"web__echo"}) {
		t.Fatalf("lazy2's tools after naming the server's: %v", got)
	}
	wantErrStart(t, fx2.do("PATCH", "/api/v2/conversations/lazy2/config", map[string]any{"chat": chatTools("web__nope")}), http.StatusBadRequest, "Tool 'web__nope' not found")
}

// The values of a conversation's MCP env and headers are answered as a
// placeholder, so no answer (and no journaled outcome) holds them; the
// servers get the real values; a PATCH that sends the placeholder back
// keeps the stored value; nothing but the session file holds them.
func TestConversationMCPSecrets(t *testing.T) {
	root := t.TempDir()
	const envSecret, hdrSecret = "env-s3cret-4711", "Bearer hdr-s3cret-0815"
	var mu sync.Mutex
	var auth []string
	url := mcpHTTPServerSeen(t, func(r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
	})
	lastAuth := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(auth) == 0 {
			return ""
		}
		return auth[len(auth)-1]
	}
	fx := newFixture(t, fixtureOptions{root: root, mcp: mcp.New(mcp.Options{}), journal: true})
	fx.create("sec", nil)
	servers := []any{envServer("sec", map[string]string{"TOKEN": envSecret}),
		map[string]any{"name": "web", "url": url, "headers": map[string]string{"Authorization": hdrSecret}}}
	r := fx.ok("PATCH", "/api/v2/conversations/sec/config", map[string]any{"mcp": map[string]any{"servers": servers}}, "Idempotency-Key", "patch-1")
	get := fx.ok("GET", "/api/v2/conversations/sec/config", nil)
	for _, a := range []reply{r, get} {
		if strings.Contains(string(a.body), envSecret) || strings.Contains(string(a.body), "hdr-s3cret") ||
			!strings.Contains(string(a.body), `"TOKEN":"`+SecretPlaceholder+`"`) || !strings.Contains(string(a.body), `"Authorization":"`+SecretPlaceholder+`"`) {
			t.Fatalf("the answer does not hide the values: %s", a)
		}
	}
	if got := fx.callTool("sec", "sec__env", `{"name":"TOKEN"}`); !strings.Contains(got, "TOKEN="+envSecret) {
		t.Fatalf("the server's env: %q", got)
	}
	if got := lastAuth(); got != hdrSecret {
		t.Fatalf("the server's Authorization header: %q", got)
	}

	// GET, change, PATCH back: the placeholders keep the values.
	back := get.m["mcp"].(map[string]any)
	back["servers"].([]any)[0].(map[string]any)["env"].(map[string]any)["PLAIN"] = "not a secret"
	fx.ok("PATCH", "/api/v2/conversations/sec/config", map[string]any{"mcp": back}, "Idempotency-Key", "patch-2")
	if got := fx.callTool("sec", "sec__env", `{"name":"TOKEN"}`); !strings.Contains(got, "TOKEN="+envSecret) {
		t.Fatalf("the server's env after a PATCH with the placeholder: %q", got)
	}
	if got := lastAuth(); got != hdrSecret {
		t.Fatalf("the server's Authorization header after a PATCH with the placeholder: %q", got)
	}
	// A placeholder with no value to keep is a 400 naming it.
	tests := []struct {
		name   string
		server map[string]any
		want   string
	}{
		{"unknown key", envServer("sec", map[string]string{"OTHER": SecretPlaceholder}), "mcp.servers[0].env.OTHER: "},
		{"unknown server", map[string]any{"name": "new", "url": url, "headers": map[string]string{"Authorization": SecretPlaceholder}}, "mcp.servers[0].headers.Authorization: "},
		{"url changed", map[string]any{"name": "web", "url": url + "/other", "headers": map[string]string{"Authorization": SecretPlaceholder}}, "server web's url changed"},
		{"command changed", map[string]any{"name": "sec", "command": "/bin/true", "env": map[string]string{"TOKEN": SecretPlaceholder}}, "server sec's command changed"},
		// The same command with other args may be another program (a
		// script, an interpreter's -c) that prints what it is given.
		{"args changed", map[string]any{"name": "sec", "command": os.Args[0], "args": []string{"-test.run=none"}, "env": map[string]string{envServerVar: "1", "TOKEN": SecretPlaceholder}},
			"mcp.servers[0].env.TOKEN: \"********\" keeps the value the conversation has only for the same command or url and args, and server sec's args changed; send the value of TOKEN again"},
		{"args added to a url server", map[string]any{"name": "web", "url": url, "args": []string{"x"}, "headers": map[string]string{"Authorization": SecretPlaceholder}}, "server web's args changed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := fx.do("PATCH", "/api/v2/conversations/sec/config", map[string]any{"mcp": map[string]any{"servers": []any{tt.server}}})
			if r.status != http.StatusBadRequest || !strings.Contains(r.str("error"), tt.want) {
				t.Fatalf("got %s, want a 400 saying %q", r, tt.want)
			}
		})
	}
	wantErrStart(t, fx.do("PUT", "/api/v2/conversations/sec2", map[string]any{"config": map[string]any{"mcp": map[string]any{"servers": []any{envServer("s", map[string]string{"K": SecretPlaceholder})}}}}),
		http.StatusBadRequest, "config.mcp.servers[0].env.K: ")
	fx.stop()

	// Only the session file holds the values (the servers start again
	// from it).
	var holders []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), envSecret) || strings.Contains(string(b), "hdr-s3cret") {
			holders = append(holders, strings.TrimPrefix(p, root))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(holders) != 1 || !strings.HasPrefix(holders[0], "/sessions/") {
		t.Fatalf("files holding the secret values: %v", holders)
	}
}
