//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// An MCP server's progress for a call reaches a pi-server client as the
// call's tool_execution_update events while it runs: the server goes on
// to the next step only once the test saw the update of the one before.
func TestMCPProgressReachesTheClient(t *testing.T) {
	t.Parallel()
	bin := testMCPServer(t)
	e := e2eNewEnv(t, e2eOpts{})
	gate := filepath.Join(e.tmp, "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(e.root, "mcp.json")
	if err := os.WriteFile(cfg, []byte(`{"mcpServers":{"tiny":{"command":"`+bin+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	e.tweak("MCP-PROGRESS", func(s *wiremock.Script) {
		*s = e2eToolScript("tiny__progress", map[string]string{"gate": gate})
	})
	s := svStart(t, e, "--mcp-config", cfg)
	c := s.dial("A")
	svCreate(c, "p")
	// Not svPrompt: its response comes with the turn's end, which
	// waits for the test.
	c.send(svM{"id": "go", "type": "prompt", "sessionId": "p", "message": "MCP-PROGRESS"})
	for i := 1; i <= 3; i++ {
		u := c.waitEvent("p", "tool_execution_update")
		if want := fmt.Sprintf("Progress %d/3: step %d", i, i); !strings.Contains(u.raw, want) || svStr(u.m, "event", "toolName") != "tiny__progress" {
			t.Fatalf("update %d: %s, want %q", i, u.raw, want)
		}
		// Opening the FIFO's other end lets the server go on.
		f, err := os.OpenFile(gate, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	end := c.waitEvent("p", "tool_execution_end")
	if !strings.Contains(end.raw, "progress done") {
		t.Fatalf("end: %s", end.raw)
	}
	if r := c.response("go"); r.m["success"] != true {
		t.Fatalf("prompt: %s", r.raw)
	}
	c.close()
	s.sigterm()
	if code := s.waitExit(); code != 0 {
		t.Fatalf("exit code %d\n%s", code, s.stderrTail(2000))
	}
}
