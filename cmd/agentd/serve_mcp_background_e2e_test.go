package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// svToolsSettled asks get_tools of session sid until no MCP server is
// still starting, and returns the last answer.
func svToolsSettled(t *testing.T, c *svConn, sid string) svFrame {
	t.Helper()
	deadline := time.Now().Add(svWait)
	for {
		r := c.must("get_tools", svM{"sessionId": sid})
		starting := false
		for _, u := range svArr(r.m, "data", "unavailable") {
			starting = starting || strings.Contains(svStr(u, "error"), "is starting")
		}
		if !starting {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("MCP servers still starting after %v: %s", svWait, r)
		}
		time.Sleep(20 * time.Millisecond) // a poll of state, not an ordering
	}
}

// agentd serve starts its --mcp-config servers without waiting for them:
// one that does not answer holds neither the server's start nor a
// session's creation; get_tools names it as starting, and when it is
// ready its tools are the session's, told to REST clients with
// config_changed, and a prompt calls one.
func TestServeMCPStartsInTheBackground(t *testing.T) {
	t.Parallel()
	bin := testMCPServer(t)
	e := e2eNewEnv(t, e2eOpts{})
	// The server starts only once the test opens the gate: until then it
	// answers nothing, as a server stuck at start does.
	gate := filepath.Join(e.tmp, "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(e.root, "mcp.json")
	if err := os.WriteFile(cfg, []byte(`{"mcpServers":{"slow":{"command":"sh","args":["-c","cat `+gate+` >/dev/null; exec `+bin+`"]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	e.tweak("MCP-ECHO", func(s *wiremock.Script) {
		*s = e2eToolScript("slow__echo", map[string]string{"text": "ready now"})
	})
	s := svStartInProc(t, e, "--mcp-config", cfg) // ready while the MCP server is stuck
	c := s.dial("A")
	svCreate(c, "one")
	r := c.must("get_tools", svM{"sessionId": "one"})
	var names []string
	for _, tl := range svArr(r.m, "data", "tools") {
		names = append(names, svStr(tl, "name"))
	}
	if slices.Contains(names, "slow__echo") || !strings.Contains(r.raw, "MCP server slow is starting") {
		t.Fatalf("get_tools while the server starts: %s", r)
	}
	st := rsOpen(t, s, rsConvPath("one")+"/events")
	from, _ := st.waitType(0, "connected")

	w, err := os.OpenFile(gate, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	_, cc := st.waitFor(from, "config_changed with the server's tools", func(ev rsEvent) bool {
		return ev.typ() == "config_changed" && strings.Contains(ev.raw, `"tools"`) && strings.Contains(ev.raw, "slow__echo")
	})
	r = svToolsSettled(t, c, "one")
	if !strings.Contains(r.raw, `"slow__echo"`) || len(svArr(r.m, "data", "unavailable")) != 0 {
		t.Fatalf("get_tools once ready: %s (config_changed %s)", r, cc.raw)
	}
	svPrompt(c, "one", "MCP-ECHO")
	end := c.waitEvent("one", "tool_execution_end")
	if !strings.Contains(end.raw, "tiny echo: ready now") {
		t.Fatalf("the MCP tool's result: %s", end)
	}
	// A session made after the start has the tools from its first run.
	svCreate(c, "two")
	if r := c.must("get_tools", svM{"sessionId": "two"}); !strings.Contains(r.raw, `"slow__echo"`) {
		t.Fatalf("get_tools of a later session: %s", r)
	}
}
