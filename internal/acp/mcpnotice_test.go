package acp

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/mcp"
)

// A stdio MCP server of the editor's that cannot start is named to the
// editor, with its cause, once the session is open; the session works.
func TestFailedMCPServerIsReported(t *testing.T) {
	ts := &testSessions{p: faux.New(faux.Options{}), dir: t.TempDir()}
	m := mcp.New(mcp.Options{Environ: []string{"PATH=" + os.Getenv("PATH")}, StartTimeout: 10 * time.Second})
	c := startAgentWith(t, Options{Sessions: ts, SessionsDir: ts.dir, Version: "test", MCP: m})
	c.call("initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{}})
	sid := result(t, c.call("session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{
		map[string]any{"name": "broken", "command": "/nonexistent/mcp-server", "args": []any{}, "env": []any{}},
	}}))["sessionId"].(string)
	timeout := time.After(20 * time.Second)
	for {
		for _, u := range c.takeUpdates() {
			text := ""
			if ct, ok := u["content"].(map[string]any); ok {
				text, _ = ct["text"].(string)
			}
			if u["sessionUpdate"] == "agent_message_chunk" && strings.Contains(text, "MCP server broken failed to start") && strings.Contains(text, "/nonexistent/mcp-server") {
				r := result(t, c.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "still here"}}}))
				if r["stopReason"] != StopEndTurn {
					t.Fatalf("prompt: %v", r)
				}
				return
			}
		}
		select {
		case f := <-c.frames:
			meth, _ := f["method"].(string)
			c.handle(meth, f)
		case <-timeout:
			t.Fatal("the editor was not told of the server that failed")
		}
	}
}
