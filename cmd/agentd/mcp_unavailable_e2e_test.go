package main

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// MCP servers that cannot start (a command that does not exist, one that
// exits at once, an HTTP endpoint that refuses) are named with their
// cause by `agentd tools`, by pi-server's get_tools and by health_check,
// and the session works with the server that did start.
func TestMCPServersThatFailToStart(t *testing.T) {
	t.Parallel()
	bin := testMCPServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String() + "/mcp"
	ln.Close()
	servers := map[string]any{
		"tiny":    map[string]any{"command": bin},
		"missing": map[string]any{"command": "/nonexistent/mcp-server"},
		"exits":   map[string]any{"command": "sh", "args": []string{"-c", "echo 'missing API key' >&2; exit 4"}},
		"refused": map[string]any{"url": refused},
	}
	want := map[string][]string{
		"missing": {"MCP server missing failed to start", "/nonexistent/mcp-server", "no such file or directory"},
		"exits":   {"MCP server exits failed to start", "exited with status 4 before listing its tools", "see the agentd log"},
		"refused": {"MCP server refused failed to start", "connection refused"},
	}
	cfg, _ := json.Marshal(map[string]any{"mcpServers": servers})
	check := func(t *testing.T, where string, texts []string) {
		t.Helper()
		for name, parts := range want {
			found := false
			for _, s := range texts {
				ok := true
				for _, p := range parts {
					ok = ok && strings.Contains(s, p)
				}
				found = found || ok
			}
			if !found {
				t.Errorf("%s: nothing says %q of %s in %q", where, parts, name, texts)
			}
		}
	}

	t.Run("agentd tools", func(t *testing.T) {
		e := e2eNewEnv(t, e2eOpts{})
		if err := os.MkdirAll(filepath.Join(e.cwd, ".agentd"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(e.cwd, ".agentd", "mcp.json"), cfg, 0o600); err != nil {
			t.Fatal(err)
		}
		run := func(args ...string) (string, string, int) {
			cmd := exec.Command(agentdBin, append([]string{"tools"}, args...)...)
			dieWithTest(cmd)
			cmd.Dir = e.cwd
			cmd.Env = []string{"HOME=" + e.home, "PATH=" + os.Getenv("PATH"), "AGENTD_DATA_DIR=" + e.data, "TMPDIR=" + e.tmp}
			var out, errb strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			return out.String(), errb.String(), code
		}
		// Untrusted, the project's file starts nothing and says how to
		// trust it.
		out, stderr, code := run()
		if code != 1 || !strings.Contains(stderr, "not trusted") || strings.Contains(out, "tiny__echo") ||
			!strings.Contains(out, "agentd trust "+e.cwd) {
			t.Fatalf("untrusted: exit %d, stdout:\n%s\nstderr:\n%s", code, out, stderr)
		}
		trust := exec.Command(agentdBin, "trust")
		trust.Dir = e.cwd
		trust.Env = []string{"HOME=" + e.home, "PATH=" + os.Getenv("PATH"), "AGENTD_DATA_DIR=" + e.data, "TMPDIR=" + e.tmp}
		if b, err := trust.CombinedOutput(); err != nil || !strings.Contains(string(b), "trusted ") {
			t.Fatalf("agentd trust: %v\n%s", err, b)
		}
		out, stderr, code = run()
		if code != 1 || !strings.Contains(stderr, "3 MCP servers failed to start") {
			t.Fatalf("exit %d, stderr:\n%s", code, stderr)
		}
		if !strings.Contains(out, "\ntiny__echo ") || !strings.HasPrefix(out, "read ") {
			t.Fatalf("the tools are not listed:\n%s", out)
		}
		var lines []string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "unavailable: ") {
				lines = append(lines, l)
			}
		}
		if len(lines) != 3 {
			t.Fatalf("unavailable lines:\n%s", out)
		}
		check(t, "agentd tools", lines)
		if strings.Contains(out, "missing API key") {
			t.Errorf("a server's stderr reached the listing:\n%s", out)
		}

		out, _, code = run("--json")
		var got struct {
			Tools       []struct{ Name, Description string }
			Unavailable []struct{ Source, Error string }
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil || code != 1 {
			t.Fatalf("--json (exit %d): %v\n%s", code, err, out)
		}
		var errs []string
		for _, u := range got.Unavailable {
			errs = append(errs, u.Source+" "+u.Error)
		}
		check(t, "agentd tools --json", errs)
	})

	t.Run("serve", func(t *testing.T) {
		e := e2eNewEnv(t, e2eOpts{})
		path := filepath.Join(e.root, "mcp.json")
		if err := os.WriteFile(path, cfg, 0o600); err != nil {
			t.Fatal(err)
		}
		e.tweak("MCP-ECHO", func(s *wiremock.Script) {
			*s = e2eToolScript("tiny__echo", map[string]string{"text": "still works"})
		})
		s := svStart(t, e, "--mcp-config", path)
		c := s.dial("A")
		svCreate(c, "one")
		// The servers start in the background: their outcome is there
		// once none is starting.
		r := svToolsSettled(t, c, "one")
		names := map[string]bool{}
		for _, tl := range svArr(r.m, "data", "tools") {
			names[svStr(tl, "name")] = true
		}
		if !names["tiny__echo"] || !names["bash"] {
			t.Fatalf("get_tools: %s", r)
		}
		var errs []string
		for _, u := range svArr(r.m, "data", "unavailable") {
			errs = append(errs, svStr(u, "source")+" "+svStr(u, "error"))
		}
		check(t, "get_tools", errs)
		// The causes may quote what a server printed (its secret): the
		// journal does not keep the answer, and the same command sent
		// again is run again, causes and all.
		journal, err := os.ReadFile(filepath.Join(e.data, "server", "journal.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(journal), svStr(r.m, "id")) || strings.Contains(string(journal), "missing API key") {
			t.Errorf("the journal does not have get_tools's outcome without its causes:\n%s", journal)
		}
		again := c.call(svM{"id": svStr(r.m, "id"), "type": "get_tools", "sessionId": "one"})
		errs = nil
		for _, u := range svArr(again.m, "data", "unavailable") {
			errs = append(errs, svStr(u, "source")+" "+svStr(u, "error"))
		}
		check(t, "get_tools sent again", errs)
		// The watcher that makes each failure a health issue runs once
		// the starts settled: its outcome follows get_tools's.
		var h svFrame
		var issues []string
		for deadline := time.Now().Add(svWait); ; time.Sleep(20 * time.Millisecond) {
			h = c.must("health_check", nil)
			issues = nil
			for _, i := range svArr(h.m, "data", "issues") {
				issues = append(issues, i.(string))
			}
			if len(issues) >= len(want) || time.Now().After(deadline) {
				break
			}
		}
		if healthy, _ := svAt(h.m, "data", "healthy").(bool); healthy {
			t.Errorf("healthy with servers down: %s", h)
		}
		check(t, "health_check", issues)
		// What the server printed goes to the log, never to a client.
		for _, f := range []svFrame{r, again, h} {
			if strings.Contains(f.raw, "missing API key") {
				t.Errorf("a server's stderr reached a client: %s", f)
			}
		}
		if !strings.Contains(s.stderr.String(), "missing API key") {
			t.Errorf("the log lacks the server's stderr:\n%s", s.stderr.String())
		}
		// The session works with the server that started.
		svPrompt(c, "one", "MCP-ECHO")
		end := c.waitEvent("one", "tool_execution_end")
		if !strings.Contains(end.raw, "tiny echo: still works") {
			t.Fatalf("the MCP tool's result: %s", end)
		}
	})
}
