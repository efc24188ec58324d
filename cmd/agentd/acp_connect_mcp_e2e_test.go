package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// agentd acp --connect takes the editor's MCP servers in session/new: they
// become the session's own servers on agentd serve (started there under
// its sandbox), a prompt calls one of their tools, and a server that
// cannot start is named to the editor.
func TestACPConnectEditorMCPServers(t *testing.T) {
	t.Parallel()
	bin := testMCPServer(t)
	e := e2eNewEnv(t, e2eOpts{})
	e.tweak("MCP-ECHO", func(s *wiremock.Script) {
		*s = e2eToolScript("tiny__echo", map[string]string{"text": "through the bridge"})
	})
	s := svStart(t, e)
	ed := startACPProc(t, e, "--connect", "ws://"+s.addr+"/")
	init := ed.call("initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{}})
	if caps, _ := init["agentCapabilities"].(map[string]any); caps["mcpCapabilities"].(map[string]any)["http"] != true {
		t.Fatalf("initialize: %v", init)
	}
	r := ed.call("session/new", map[string]any{"cwd": e.cwd, "mcpServers": []any{
		map[string]any{"name": "tiny", "command": bin, "args": []any{}, "env": []any{}},
		map[string]any{"name": "broken", "command": "/nonexistent/mcp-server", "args": []any{}, "env": []any{map[string]any{"name": "SECRET", "value": "s3cr3t"}}},
	}})
	sid, _ := r["sessionId"].(string)
	if sid == "" {
		t.Fatalf("session/new: %v", r)
	}
	// The failure is told once the session is open.
	timeout := time.After(svWait)
	var told string
	for told == "" {
		for _, u := range ed.takeUpdates() {
			if ct, _ := u["content"].(map[string]any); u["sessionUpdate"] == "agent_message_chunk" {
				if txt, _ := ct["text"].(string); strings.Contains(txt, "MCP server broken failed to start") {
					told = txt
				}
			}
		}
		if told != "" {
			break
		}
		select {
		case f, ok := <-ed.frames:
			if !ok {
				t.Fatalf("agentd acp ended\nstderr:\n%s", ed.stderr.String())
			}
			if m, isReq := f["method"].(string); isReq {
				ed.handle(m, f)
			}
		case <-timeout:
			t.Fatalf("the editor was not told of the broken server\nstderr:\n%s", ed.stderr.String())
		}
	}
	if told == "" || !strings.Contains(told, "/nonexistent/mcp-server") || strings.Contains(told, "s3cr3t") {
		t.Fatalf("the editor was not told of the broken server (or was told its env): %q", told)
	}
	p := ed.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "MCP-ECHO"}}})
	if p["stopReason"] != "end_turn" {
		t.Fatalf("prompt: %v", p)
	}
	end := acpCallEnd(ed.takeUpdates())
	if end == nil || !strings.Contains(fmt.Sprint(end), "tiny echo: through the bridge") {
		t.Fatalf("the MCP tool's result: %v", end)
	}
}

// The same through the official SDK 2.4.0: a stdio MCP server given in
// session/new is used through the bridge, and the session is resumed on a
// new bridge without a replay.
func TestACPConnectMCPWithTheOfficialClient(t *testing.T) {
	acpNodeModules(t)
	t.Parallel()
	bin := testMCPServer(t)
	e := e2eNewEnv(t, e2eOpts{})
	e.tweak("MCP-ECHO", func(s *wiremock.Script) {
		*s = e2eToolScript("tiny__echo", map[string]string{"text": "sdk bridge"})
	})
	s := svStart(t, e)
	steps := e.acpClient([]string{
		"init", "new-mcp:tiny=" + bin, "prompt:MCP-ECHO",
		"restart", "init", "resume", "prompt:after resume",
	}, "--connect", "ws://"+s.addr+"/")
	if end := acpToolEnd(acpFind(t, steps, "prompt:MCP-ECHO")); end == nil || !strings.Contains(fmt.Sprint(end), "tiny echo: sdk bridge") {
		t.Fatalf("the MCP tool through the bridge: %v", end)
	}
	if r := acpFind(t, steps, "resume"); len(r.Updates) != 0 {
		t.Errorf("session/resume through the bridge replayed %d updates", len(r.Updates))
	}
	if a := acpFind(t, steps, "prompt:after resume"); a.StopReason != "end_turn" {
		t.Errorf("prompt after resume: %q", a.StopReason)
	}
}
