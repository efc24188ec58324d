package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// agentd serve --mcp-config: the servers' tools are offered to every
// session as mcp__<server>__<tool>, a pi-server client's prompt calls one
// and gets its result, and the server's process ends with agentd serve.
func TestServeMCPConfig(t *testing.T) {
	t.Parallel()
	bin := testMCPServer(t)
	// env is a fresh agentd environment with cfg naming the MCP server.
	env := func(t *testing.T) (e *e2eEnv, cfg, pidFile string) {
		e = e2eNewEnv(t, e2eOpts{})
		// In the temp dir: the server runs under the sessions' sandbox.
		pidFile = filepath.Join(e.tmp, "mcp.pid")
		cfg = filepath.Join(e.root, "mcp.json")
		if err := os.WriteFile(cfg, []byte(`{"mcpServers":{"tiny":{"command":"`+bin+`","args":["`+pidFile+`"]}}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		e.tweak("MCP-ECHO", func(s *wiremock.Script) {
			*s = e2eToolScript("tiny__echo", map[string]string{"text": "from serve"})
		})
		return e, cfg, pidFile
	}

	// The flag and the environment variable both work.
	for _, how := range []string{"flag", "env"} {
		t.Run(how, func(t *testing.T) {
			e, cfg, pidFile := env(t)
			var s *svServer
			if how == "flag" {
				s = svStart(t, e, "--mcp-config", cfg)
			} else {
				s = svLaunch(t, e, svOpts{env: []string{"AGENTD_MCP_CONFIG=" + cfg}})
			}
			c := s.dial("A")
			for _, sid := range []string{"one", "two"} {
				svCreate(c, sid)
				svPrompt(c, sid, "MCP-ECHO")
				end := c.waitEvent(sid, "tool_execution_end")
				if svStr(end.m, "event", "toolName") != "tiny__echo" || end.m["event"].(map[string]any)["isError"] != false ||
					!strings.Contains(end.raw, "tiny echo: from serve") {
					t.Fatalf("session %s: the MCP tool's result: %s", sid, end)
				}
			}
			if _, err := os.ReadFile(pidFile); err != nil {
				t.Fatal(err)
			}
			c.close()
			s.sigterm()
			if code := s.waitExit(); code != 0 {
				t.Fatalf("exit code %d\n%s", code, s.stderrTail(2000))
			}
			// The server's command line names its pid file.
			waitGoneWith(t, pidFile, "the MCP server, after agentd serve exited,")
		})
	}

	t.Run("bad config", func(t *testing.T) {
		e, _, _ := env(t)
		bad := filepath.Join(e.root, "bad.json")
		if err := os.WriteFile(bad, []byte(`{"mcpServers":{"x":{}}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		s := svLaunch(t, e, svOpts{noReady: true}, "--mcp-config", bad)
		if code := s.waitExit(); code == 0 || !strings.Contains(s.stderr.String(), "--mcp-config") {
			t.Fatalf("exit %d, stderr:\n%s", code, s.stderr.String())
		}
	})
}
