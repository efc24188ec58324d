package main

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/llm/llmtest"
)

// A REST conversation's own MCP servers outlive kill -9: after the
// restart its config names them, their tools are offered, and a call
// reaches the server started again.
func TestRESTConversationMCPAfterKill9(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	server := filepath.Join(e.root, "mcpserver")
	if out, err := exec.Command("go", "build", "-o", server, "./testdata/acp/mcpserver").CombinedOutput(); err != nil {
		t.Fatalf("building the MCP server: %v\n%s", err, out)
	}
	s := svStart(t, e)
	id := "mcp-kill9"
	rsOK(t, s, "PUT", rsConvPath(id), map[string]any{"config": map[string]any{"chat": map[string]any{},
		"mcp": map[string]any{"servers": []any{map[string]any{"name": "tiny", "command": server}}}}})
	tools := func(r rsReply) []string {
		chat, _ := r.m["chat"].(map[string]any)
		var out []string
		for _, n := range chat["tools"].([]any) {
			out = append(out, n.(string))
		}
		return out
	}
	if got := tools(rsOK(t, s, "GET", rsConvPath(id)+"/config", nil)); !slices.Contains(got, "tiny__echo") {
		t.Fatalf("tools before the crash: %v", got)
	}
	s.kill9()

	s2 := s.restart()
	cfg := rsOK(t, s2, "GET", rsConvPath(id)+"/config", nil)
	if got := tools(cfg); !slices.Contains(got, "tiny__echo") {
		t.Fatalf("tools after kill -9 and a restart: %v (%s)", got, cfg)
	}
	if m, _ := cfg.m["mcp"].(map[string]any); m == nil || !strings.Contains(cfg.body, `"name":"tiny"`) {
		t.Fatalf("the mcp section after the restart: %s", cfg)
	}
	e.tweak("call the tiny tool", func(sc *llmtest.Script) {
		*sc = e2eToolScript("tiny__echo", map[string]string{"text": "after the crash"})
	})
	st := rsOpen(t, s2, rsConvPath(id)+"/events")
	_, conn := st.waitType(0, "connected")
	rsOK(t, s2, "POST", rsConvPath(id), map[string]any{"role": "user", "content": "call the tiny tool"})
	from := st.mark()
	rsOK(t, s2, "POST", rsConvPath(id)+"/step", map[string]any{"session_id": conn.str("session_id"), "auto_confirm": true})
	st.waitType(from, "tool_complete")
	svWaitUntil(t, "the MCP tool's answer in the conversation", func() bool {
		return strings.Contains(rsOK(t, s2, "GET", rsConvPath(id), nil).body, "tiny echo: after the crash")
	})
}
