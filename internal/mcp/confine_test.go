package mcp

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/sandbox"
)

// agentdEnviron is an agentd environment with the secrets a server
// must never get.
func agentdEnviron(t *testing.T) []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "LANG=C.UTF-8", "TMPDIR=" + os.TempDir(),
		"AGENTD_TOKEN=agentd-token-value-0123456789", "OPENAI_API_KEY=sk-openai-secret-0123456789",
		"GITHUB_TOKEN=ghp_githubsecret0123456789abcdef", "UNRELATED=agentd-only"}
}

// A stdio server gets PATH, HOME, LANG and TMPDIR of agentd's
// environment and what its configuration names, nothing else: not the
// server token, not the providers' keys.
func TestServerEnvironmentIsOnlyWhatItsConfigNames(t *testing.T) {
	cfg := stdioServer(t)
	cfg.Env["AGENTD_MCP_TEST_EXTRA"] = "1"
	cfg.Env["SERVICE_URL"] = "https://example.invalid"
	m := New(Options{Environ: agentdEnviron(t), StartTimeout: 20 * time.Second})
	tools, stop, err := m.Start(context.Background(), []ServerConfig{cfg}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	env := text(call(t, byName(tools)["t__env"], `{}`))
	got := map[string]string{}
	for _, kv := range strings.Split(env, "\n") {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	for _, name := range []string{"AGENTD_TOKEN", "OPENAI_API_KEY", "GITHUB_TOKEN", "UNRELATED"} {
		if _, ok := got[name]; ok {
			t.Errorf("the server got %s", name)
		}
	}
	for _, name := range []string{"PATH", "HOME", "LANG", "TMPDIR", "SERVICE_URL", "AGENTD_MCP_TEST_SERVER"} {
		if _, ok := got[name]; !ok {
			t.Errorf("the server did not get %s: %q", name, env)
		}
	}
}

// syncBuffer is a log destination the server's goroutines write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A server that fails prints a secret on stderr: the cause clients see
// (Err, Unavailable, which get_tools, health_check, GET .../config and
// the journal carry) says how it ended and where to look, without what
// it printed; the log has its stderr with the secret redacted.
func TestFailedServerStderrStaysInTheLogRedacted(t *testing.T) {
	const password = "hunter2-service-password"
	cfg := stdioServer(t)
	cfg.Name = "leaky"
	cfg.Env = map[string]string{"AGENTD_MCP_TEST_SERVER": "exit-secret", "SERVICE_PASSWORD": password, "OPENAI_API_KEY": "sk-configured-key-0123456789"}
	var logs syncBuffer
	m := New(Options{Environ: agentdEnviron(t), StartTimeout: 20 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	set := m.Open(context.Background(), []ServerConfig{cfg}, t.TempDir())
	defer set.Close()
	un := set.Unavailable()
	if len(un) != 1 {
		t.Fatalf("unavailable %+v", un)
	}
	for _, seen := range []string{un[0].Error, set.Err().Error()} {
		if strings.Contains(seen, password) || strings.Contains(seen, "sk-configured") || strings.Contains(seen, "cannot log in") {
			t.Errorf("the client-visible cause quotes the server's stderr: %q", seen)
		}
		if !strings.Contains(seen, "exited with status 1 before listing its tools") || !strings.Contains(seen, "log") {
			t.Errorf("the cause does not say what happened: %q", seen)
		}
	}
	log := logs.String()
	if !strings.Contains(log, "cannot log in with [redacted]") {
		t.Errorf("the log lacks the server's stderr: %s", log)
	}
	if strings.Contains(log, password) || strings.Contains(log, "sk-configured") {
		t.Errorf("the log has the secret: %s", log)
	}
}

// Under a confining sandbox a stdio server writes where the session may
// (its workspace) and nowhere else.
func TestServerRunsUnderTheSandbox(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	policy := sandbox.Policy{Mode: sandbox.WorkspaceWrite}
	if err := sandbox.Probe().Enforces(policy); err != nil {
		t.Skipf("no sandbox here: %v", err)
	}
	work, tmp, outside := t.TempDir(), t.TempDir(), t.TempDir()
	cfg := stdioServer(t)
	cfg.Env["AGENTD_MCP_TEST_EXTRA"] = "1"
	m := New(Options{Environ: agentdEnviron(t), Sandbox: policy, SandboxExe: exe, TempDir: tmp, StartTimeout: 20 * time.Second})
	tools, stop, err := m.Start(context.Background(), []ServerConfig{cfg}, work)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	write := byName(tools)["t__write"]
	in := filepath.Join(work, "in.txt")
	if r := call(t, write, `{"text":"`+in+`"}`); r.IsError {
		t.Fatalf("write in the workspace: %q", text(r))
	}
	out := filepath.Join(outside, "escaped.txt")
	if r := call(t, write, `{"text":"`+out+`"}`); !r.IsError {
		t.Fatalf("write outside the workspace: %q", text(r))
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("the server wrote outside the workspace: %v", err)
	}
}
