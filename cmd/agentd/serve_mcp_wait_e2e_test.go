package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// A prompt sent while a --mcp-config server of agentd serve is still
// starting waits for it (within the start timeout) before the model is
// asked: the model's call of that server's tool runs, rather than
// failing with "Tool slow__echo not found" a moment before the server is
// ready. The server is gated on a FIFO the test opens only once the
// prompt was accepted, so without the wait the call would find no tool.
func TestServePromptWaitsForStartingMCPServers(t *testing.T) {
	t.Parallel()
	bin := testMCPServer(t)
	e := e2eNewEnv(t, e2eOpts{})
	gate := filepath.Join(e.tmp, "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(e.root, "mcp.json")
	if err := os.WriteFile(cfg, []byte(`{"mcpServers":{"slow":{"command":"sh","args":["-c","cat `+gate+` >/dev/null; exec `+bin+`"]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	e.tweak("MCP-ECHO", func(s *wiremock.Script) {
		*s = e2eToolScript("slow__echo", map[string]string{"text": "waited"})
	})
	s := svStartInProc(t, e, "--mcp-config", cfg)
	c := s.dial("A")
	svCreate(c, "one")
	from := c.mark()
	c.send(svM{"id": "go", "type": "prompt", "sessionId": "one", "message": "MCP-ECHO"})
	c.waitLifecycle(from, "command_started", "go")
	w, err := os.OpenFile(gate, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	end := c.waitEvent("one", "tool_execution_end")
	if !strings.Contains(end.raw, "tiny echo: waited") {
		t.Fatalf("the MCP tool's result: %s", end)
	}
	if r := c.response("go"); !strings.Contains(r.raw, `"success":true`) {
		t.Fatalf("the prompt: %s", r)
	}
}
