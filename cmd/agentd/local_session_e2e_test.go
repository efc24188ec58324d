package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// The commands that host one session here (rpc, acp, tools) check their
// flags and files in a fixed order and say what was wrong with the exit
// code of its kind: a mistake on the command line 2, anything else 1.
// Where two things are wrong, the first checked is the one reported, and
// what was logged before it stays on stderr; stdout, which carries the
// protocol, stays empty.
func TestLocalSessionCommandErrors(t *testing.T) {
	t.Parallel()
	const unknownTool = `--tools: unknown tool "nope" (known: read, bash, edit, write, grep, find, ls, task)`
	tests := []struct {
		name  string
		home  string // "": clean; "models": a malformed models.json; "settings": a malformed settings.json
		args  []string
		code  int
		want  []string // on stderr in this order (compared in lower case)
		never []string // not on stderr
	}{
		{name: "rpc extra args", args: []string{"rpc", "now"}, code: 2, want: []string{"agentd rpc: unexpected arguments: now"}},
		{name: "rpc stream format", args: []string{"rpc", "--stream-format", "x"}, code: 2, want: []string{`agentd rpc: --stream-format "x": want full or delta`}},
		{name: "rpc small lines", args: []string{"rpc", "--max-line-bytes", "10"}, code: 2, want: []string{"agentd rpc: --max-line-bytes 10: must be at least 1024"}},
		{name: "rpc unknown tool", args: []string{"rpc", "--tools", "nope"}, code: 2, want: []string{"agentd rpc: " + unknownTool}},
		{name: "rpc model before tools", args: []string{"rpc", "--model", "nope/x", "--tools", "nope"}, code: 1, want: []string{`agentd rpc: unknown model "nope/x"`}},
		{name: "rpc bad thinking", args: []string{"rpc", "--thinking", "huge"}, code: 2, want: []string{`agentd rpc: invalid thinking level "huge"`}},
		{name: "rpc missing policy", args: []string{"rpc", "--policy", "/nonexistent/p.json"}, code: 2, want: []string{"agentd rpc: --policy: open /nonexistent/p.json"}},
		{name: "rpc bad policy", args: []string{"rpc", "--policy", "/dev/null"}, code: 2, want: []string{"agentd rpc: --policy /dev/null: "}},
		{name: "rpc missing session", args: []string{"rpc", "--session", "/nonexistent/s.jsonl"}, code: 1, want: []string{"agentd rpc: session file /nonexistent/s.jsonl: stat /nonexistent/s.jsonl"}},
		{name: "rpc policy before session", args: []string{"rpc", "--policy", "/dev/null", "--session", "/nonexistent/s.jsonl"}, code: 2, want: []string{"agentd rpc: --policy /dev/null: "}},
		{name: "rpc session before mcp config", args: []string{"rpc", "--session", "/nonexistent/s.jsonl", "--mcp-config", "/dev/null"}, code: 1, want: []string{"agentd rpc: session file /nonexistent/s.jsonl"}},
		{name: "rpc missing mcp config", args: []string{"rpc", "--mcp-config", "/nonexistent/m.json"}, code: 2,
			want: []string{"tools run with full access (no sandbox)", "agentd rpc: --mcp-config: open /nonexistent/m.json"}},
		{name: "rpc bad mcp config", args: []string{"rpc", "--mcp-config", "/dev/null"}, code: 2,
			want: []string{"tools run with full access (no sandbox)", "agentd rpc: --mcp-config /dev/null: mcp configuration"}},
		{name: "rpc models before tools", home: "models", args: []string{"rpc", "--tools", "nope"}, code: 1,
			want: []string{"agentd rpc: cannot use the model configuration", "models.json: malformed JSON at line 1"}, never: []string{"unknown tool"}},
		{name: "rpc settings before tools", home: "settings", args: []string{"rpc", "--tools", "nope"}, code: 1,
			want: []string{"agentd rpc: settings file ", "is not a json object"}},

		{name: "acp extra args", args: []string{"acp", "now"}, code: 2, want: []string{"agentd acp: unexpected arguments: now"}},
		{name: "acp small lines", args: []string{"acp", "--max-line-bytes", "10"}, code: 2, want: []string{"agentd acp: --max-line-bytes 10: must be at least 1024"}},
		{name: "acp unknown tool", args: []string{"acp", "--tools", "nope"}, code: 2, want: []string{"agentd acp: " + unknownTool}},
		{name: "acp model before tools", args: []string{"acp", "--model", "nope/x", "--tools", "nope"}, code: 1, want: []string{`agentd acp: unknown model "nope/x"`}},
		{name: "acp missing policy", args: []string{"acp", "--policy", "/nonexistent/p.json"}, code: 2, want: []string{"agentd acp: --policy: open /nonexistent/p.json"}},
		{name: "acp policy before mcp config", args: []string{"acp", "--policy", "/nonexistent/p.json", "--mcp-config", "/nonexistent/m.json"}, code: 2,
			want: []string{"agentd acp: --policy: open /nonexistent/p.json"}, never: []string{"sandboxed"}},
		{name: "acp missing mcp config", args: []string{"acp", "--mcp-config", "/nonexistent/m.json"}, code: 2,
			want: []string{"sandboxed", "agentd acp: --mcp-config: open /nonexistent/m.json"}},
		{name: "acp bad mcp config", args: []string{"acp", "--mcp-config", "/dev/null"}, code: 2,
			want: []string{"sandboxed", "agentd acp: --mcp-config /dev/null: mcp configuration"}},
		{name: "acp models before tools", home: "models", args: []string{"acp", "--tools", "nope"}, code: 1,
			want: []string{"agentd acp: cannot use the model configuration", "models.json: malformed JSON at line 1"}, never: []string{"unknown tool"}},
		{name: "acp settings before tools", home: "settings", args: []string{"acp", "--tools", "nope"}, code: 1,
			want: []string{"agentd acp: settings file ", "is not a json object"}},

		{name: "tools extra args", args: []string{"tools", "now"}, code: 2, want: []string{"agentd tools: unexpected arguments: now"}},
		{name: "tools unknown tool", args: []string{"tools", "--tools", "nope"}, code: 2, want: []string{"agentd tools: " + unknownTool}},
		{name: "tools missing mcp config", args: []string{"tools", "--mcp-config", "/nonexistent/m.json"}, code: 2,
			want: []string{"tools run with full access (no sandbox)", "agentd tools: --mcp-config: open /nonexistent/m.json"}},
		{name: "tools bad mcp config", args: []string{"tools", "--mcp-config", "/dev/null"}, code: 2,
			want: []string{"tools run with full access (no sandbox)", "agentd tools: --mcp-config /dev/null: mcp configuration"}},
		{name: "tools checks tools before models", home: "models", args: []string{"tools", "--tools", "nope"}, code: 2,
			want: []string{"agentd tools: " + unknownTool}, never: []string{"model configuration"}},
		{name: "tools bad models", home: "models", args: []string{"tools"}, code: 1,
			want: []string{"agentd tools: cannot use the model configuration", "models.json: malformed JSON at line 1"}},
		{name: "tools checks tools before settings", home: "settings", args: []string{"tools", "--tools", "nope"}, code: 2,
			want: []string{"agentd tools: " + unknownTool}},
		{name: "tools bad settings", home: "settings", args: []string{"tools"}, code: 1,
			want: []string{"agentd tools: settings file ", "is not a json object"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			home, cwd := filepath.Join(root, "home"), filepath.Join(root, "work")
			for _, d := range []string{filepath.Join(home, ".agentd"), cwd} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			switch tt.home {
			case "models":
				writeFile(t, filepath.Join(home, ".agentd", "models.json"), "{")
			case "settings":
				writeFile(t, filepath.Join(home, ".agentd", "settings.json"), "[")
			}
			r := runIn(t, cwd, home, []string{"TMPDIR=" + root}, "", tt.args...)
			stderr := strings.ToLower(r.stderr)
			if r.code != tt.code || r.stdout != "" {
				t.Fatalf("exit %d (want %d)\nstdout: %s\nstderr: %s", r.code, tt.code, r.stdout, r.stderr)
			}
			rest := stderr
			for _, w := range tt.want {
				i := strings.Index(rest, strings.ToLower(w))
				if i < 0 {
					t.Fatalf("stderr does not say %q (in this order: %q):\n%s", w, tt.want, r.stderr)
				}
				rest = rest[i+len(w):]
			}
			for _, n := range tt.never {
				if strings.Contains(stderr, strings.ToLower(n)) {
					t.Fatalf("stderr says %q:\n%s", n, r.stderr)
				}
			}
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The MCP servers of agentd rpc and agentd tools, and what they started,
// end before agentd does: the session stops them on its way out.
func TestLocalSessionMCPServersEnd(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	server := testMCPServer(t)
	// The server leaves a child in its process group that outlives it
	// unless agentd ends the group.
	config := func(name string) (path, serverPid, childPid string) {
		serverPid = filepath.Join(e.root, name+".pid")
		childPid = filepath.Join(e.root, name+".child.pid")
		script := "sleep 300 & echo $! > " + childPid + "; exec " + server + " " + serverPid
		b, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
			"tiny": map[string]any{"command": "sh", "args": []string{"-c", script}},
		}})
		path = filepath.Join(e.root, name+".json")
		writeFile(t, path, string(b))
		return path, serverPid, childPid
	}
	ended := func(t *testing.T, what, pidFile string, wait time.Duration) {
		t.Helper()
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		deadline := time.Now().Add(wait)
		for processRuns(pid) {
			if time.Now().After(deadline) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("%s (pid %d) still runs after agentd exited", what, pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	t.Run("rpc", func(t *testing.T) {
		path, serverPid, childPid := config("rpc")
		e.tweak("MCP-ECHO", func(s *wiremock.Script) { *s = e2eToolScript("tiny__echo", map[string]string{"text": "hi"}) })
		p := e.start("--no-session", "--mcp-config", path)
		p.ok(`{"id":"1","type":"prompt","message":"MCP-ECHO"}`)
		p.event("tool_execution_end")
		p.event("agent_end")
		p.close()
		// agentd waited for its server: it is gone the moment agentd is.
		defer ended(t, "the MCP server's child", childPid, 5*time.Second)
		ended(t, "the MCP server", serverPid, 0)
	})
	t.Run("tools", func(t *testing.T) {
		path, serverPid, childPid := config("tools")
		cmd := exec.Command(agentdBin, "tools", "--mcp-config", path)
		dieWithTest(cmd)
		cmd.Dir = e.cwd
		cmd.Env = []string{"HOME=" + e.home, "PATH=" + os.Getenv("PATH"), "AGENTD_DATA_DIR=" + e.data, "TMPDIR=" + e.tmp}
		out, err := cmd.Output()
		if err != nil || !strings.Contains(string(out), "\ntiny__echo ") {
			t.Fatalf("agentd tools: %v\n%s", err, out)
		}
		defer ended(t, "the MCP server's child", childPid, 5*time.Second)
		ended(t, "the MCP server", serverPid, 0)
	})
}

// processRuns says whether pid is a live process; a zombie has ended.
func processRuns(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}
