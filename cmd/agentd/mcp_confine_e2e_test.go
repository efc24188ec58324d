package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// An MCP server agentd starts gets PATH, HOME, LANG, TMPDIR and what its
// configuration names: not the server token, not the providers' keys
// that are in agentd's environment. Checked with the tiny test server's
// env tool and, where its npm package is installed
// (AGENTD_MCP_NODE_MODULES), with server-everything's get-env, which
// prints its whole environment.
func TestMCPServerEnvironment(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	const token = "agentd-e2e-token-0123456789"
	const key = "sk-openai-e2e-secret-0123456789"
	servers := map[string]any{
		"tiny": map[string]any{"command": testMCPServer(t), "env": map[string]string{"SERVICE_URL": "https://svc.invalid"}},
	}
	everything := ""
	if dir := os.Getenv("AGENTD_MCP_NODE_MODULES"); dir != "" {
		if _, err := exec.LookPath("node"); err == nil {
			everything = filepath.Join(dir, "@modelcontextprotocol", "server-everything", "dist", "index.js")
			if _, err := os.Stat(everything); err != nil {
				t.Fatalf("AGENTD_MCP_NODE_MODULES=%s has no server-everything: %v", dir, err)
			}
			servers["everything"] = map[string]any{"command": "node", "args": []string{everything, "stdio"}}
		}
	}
	if everything == "" {
		t.Log("AGENTD_MCP_NODE_MODULES is not set: server-everything's get-env is not checked")
	}
	cfg := filepath.Join(e.root, "mcp.json")
	b, _ := json.Marshal(map[string]any{"mcpServers": servers})
	if err := os.WriteFile(cfg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"AGENTD_TOKEN", "OPENAI_API_KEY", "SERVICE_URL"} {
		e.tweak("ENV-"+name, func(s *wiremock.Script) { *s = e2eToolScript("tiny__env", map[string]string{"name": name}) })
	}
	e.tweak("ENV-ALL", func(s *wiremock.Script) { *s = e2eToolScript("everything__get-env", map[string]string{}) })
	s := svLaunch(t, e, svOpts{env: []string{"AGENTD_TOKEN=" + token, "OPENAI_API_KEY=" + key}}, "--mcp-config", cfg)
	A := s.dialRaw(t, svDialOpts{name: "A", header: http.Header{"Authorization": {"Bearer " + token}}})
	A.ready()
	svCreate(A, "env")
	ask := func(prompt string) string {
		t.Helper()
		A.send(svM{"id": prompt, "type": "prompt", "sessionId": "env", "message": prompt})
		te := A.waitEvent("env", "tool_execution_end")
		svWantOK(t, A.response(prompt))
		return svStr(te.m, "event", "result", "content", "0", "text")
	}
	for prompt, want := range map[string]string{
		"ENV-AGENTD_TOKEN":   "tiny env: AGENTD_TOKEN=",
		"ENV-OPENAI_API_KEY": "tiny env: OPENAI_API_KEY=",
		"ENV-SERVICE_URL":    "tiny env: SERVICE_URL=https://svc.invalid",
	} {
		if got := ask(prompt); got != want {
			t.Errorf("%s: %q, want %q", prompt, got, want)
		}
	}
	if everything != "" {
		got := ask("ENV-ALL")
		if !strings.Contains(got, "PATH") {
			t.Fatalf("get-env: %q", got)
		}
		if strings.Contains(got, token) || strings.Contains(got, key) || strings.Contains(got, "MOCK_API_KEY") {
			t.Fatalf("server-everything's environment has agentd's secrets: %q", got)
		}
	}
}
