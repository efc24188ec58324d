package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/cli"
	"github.com/agentd-dev/agentd/internal/llm/llmtest"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/tool"
)

// agentdBin is the binary under test, built once by TestMain in
// buildDir.
var agentdBin, buildDir string

var mcpServerOnce struct {
	sync.Once
	bin string
	err error
	out []byte
}

// testMCPServer is the test MCP server (testdata/acp/mcpserver), built
// once for the whole run.
func testMCPServer(t *testing.T) string {
	t.Helper()
	o := &mcpServerOnce
	o.Do(func() {
		o.bin = filepath.Join(buildDir, "mcpserver")
		o.out, o.err = exec.Command("go", "build", "-o", o.bin, "./testdata/acp/mcpserver").CombinedOutput()
	})
	if o.err != nil {
		t.Fatalf("building the MCP server: %v\n%s", o.err, o.out)
	}
	return o.bin
}

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == tool.SuperviseCommand || os.Args[1] == sandbox.Command) {
		// A server in the test's process (svStartInProc) starts the
		// supervisor of bash runs and the sandbox helper as
		// /proc/self/exe: this binary, which does what agentd does.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.New(os.Stdin, os.Stdout, os.Stderr, os.Getenv).Run(ctx, os.Args[1:])
		stop()
		os.Exit(code)
	}
	dir, err := os.MkdirTemp("", "agentd-e2e")
	if err != nil {
		panic(err)
	}
	buildDir = dir
	agentdBin = filepath.Join(dir, "agentd")
	build := exec.Command("go", "build", "-o", agentdBin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building agentd:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// dieWithTest makes cmd's process get SIGKILL when the test binary dies.
// t.Cleanup ends what a test started when the test fails, but not when
// the binary itself goes (a -timeout panic, a crash, a kill): without
// this, servers a test started kept running, re-parented to init, long
// after the run. (The signal follows the OS thread that started the
// child; the Go runtime keeps its threads, and these tests lock none.)
func dieWithTest(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

type result struct {
	stdout, stderr string
	code           int
}

// run starts the built agentd with a clean environment rooted in home.
func run(t *testing.T, home string, env []string, stdin string, args ...string) result {
	t.Helper()
	return runIn(t, "", home, env, stdin, args...)
}

// runIn is run in the working directory dir ("" for the test's own).
func runIn(t *testing.T, dir, home string, env []string, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(agentdBin, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}, env...)
	cmd.Stdin = strings.NewReader(stdin)
	dieWithTest(cmd)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{out.String(), errb.String(), code}
}

func writeModels(t *testing.T, home string, v any) {
	t.Helper()
	dir := filepath.Join(home, ".agentd")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	if err := os.WriteFile(filepath.Join(dir, "models.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestUsageAndErrors(t *testing.T) {
	home := t.TempDir()
	tests := []struct {
		name   string
		args   []string
		code   int
		stream string // "out" or "err"
		want   string
	}{
		{"no args", nil, 2, "out", "Usage: agentd <command>"},
		{"help", []string{"help"}, 0, "out", "models"},
		{"unknown command", []string{"frobnicate"}, 2, "err", `unknown command "frobnicate"`},
		{"bad flag", []string{"models", "--nope"}, 2, "err", "flag provided but not defined: -nope"},
		{"bad log format", []string{"models", "--log-format", "xml"}, 2, "err", `log format "xml": want text or json`},
		{"version", []string{"version"}, 0, "out", "agentd "},
		{"ask without prompt", []string{"ask"}, 2, "err", "no prompt"},
		{"ask unknown model", []string{"ask", "--model", "nope/x", "hi"}, 1, "err", `unknown model "nope/x"`},
		{"ask bad thinking", []string{"ask", "--thinking", "huge", "hi"}, 2, "err", `invalid thinking level "huge"`},
		{"serve missing policy", []string{"serve", "--policy", "/nonexistent/policy.json"}, 2, "err", "--policy: open /nonexistent/policy.json"},
		{"serve extra args", []string{"serve", "now"}, 2, "err", "unexpected arguments: now"},
		{"serve bad port", []string{"serve", "--port", "70000"}, 2, "err", "--port 70000: want 0-65535"},
		{"serve tiny frames", []string{"serve", "--max-frame-bytes", "10"}, 2, "err", "--max-frame-bytes 10: must be at least 1024"},
		{"ask unavailable model", []string{"ask", "--model", "anthropic/claude-sonnet-4-6", "hi"}, 1, "err", "no API key: set ANTHROPIC_API_KEY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, home, nil, "", tt.args...)
			got := r.stdout
			if tt.stream == "err" {
				got = r.stderr
			}
			if r.code != tt.code || !strings.Contains(got, tt.want) {
				t.Fatalf("exit %d (want %d)\nstdout: %s\nstderr: %s\nwant %q", r.code, tt.code, r.stdout, r.stderr, tt.want)
			}
		})
	}
}

func TestModelsListsAvailabilityWithReasons(t *testing.T) {
	home := t.TempDir()
	r := run(t, home, nil, "", "models", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var rows []struct {
		Model struct {
			ID       string `json:"id"`
			Provider string `json:"provider"`
		} `json:"model"`
		Available bool   `json:"available"`
		Reason    string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("models --json: %v\n%s", err, r.stdout)
	}
	var faux, anthropic bool
	for _, row := range rows {
		switch {
		case row.Model.Provider == "faux":
			faux = row.Available
		case row.Model.Provider == "anthropic":
			anthropic = true
			if row.Available || !strings.Contains(row.Reason, "ANTHROPIC_API_KEY") {
				t.Errorf("anthropic without key: %+v", row)
			}
		}
	}
	if !faux || !anthropic {
		t.Fatalf("faux available %v, anthropic listed %v", faux, anthropic)
	}

	// With a key in the environment the Anthropic models become available.
	r = run(t, home, []string{"ANTHROPIC_API_KEY=sk-ant-test"}, "", "models", "--available")
	if !strings.Contains(r.stdout, "anthropic/claude-sonnet-4-6") || strings.Contains(r.stdout, "openai/") {
		t.Fatalf("models --available with an Anthropic key:\n%s", r.stdout)
	}
}

func TestAskOffline(t *testing.T) {
	r := run(t, t.TempDir(), nil, "", "ask", "hello", "agentd")
	if r.code != 0 || !strings.Contains(r.stdout, "You said: hello agentd") || !strings.Contains(r.stderr, "faux/echo") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	r = run(t, t.TempDir(), nil, "prompt from stdin", "ask", "-")
	if !strings.Contains(r.stdout, "You said: prompt from stdin") {
		t.Fatalf("stdin prompt: %s %s", r.stdout, r.stderr)
	}
}

// TestAskThroughEachWireAPI runs the real binary against the wire mock for
// each API, configured the way a user configures a server: models.json
// with a base URL and an API key taken from an environment variable.
func TestAskThroughEachWireAPI(t *testing.T) {
	srv := llmtest.NewServer(t)
	home := t.TempDir()
	models := func(baseURL, api string) map[string]any {
		return map[string]any{
			"baseUrl": baseURL, "api": api, "apiKey": "MOCK_KEY",
			"headers": map[string]string{"X-Team": "agentd"},
			"models":  []any{map[string]any{"id": "m1", "reasoning": true, "cost": map[string]float64{"input": 1, "output": 2}}},
		}
	}
	writeModels(t, home, map[string]any{"providers": map[string]any{
		"mock-anthropic": models(srv.AnthropicURL(), "anthropic-messages"),
		"mock-chat":      models(srv.OpenAIURL(), "openai-completions"),
		"mock-responses": models(srv.OpenAIURL(), "openai-responses"),
	}})
	for _, provider := range []string{"mock-anthropic", "mock-chat", "mock-responses"} {
		t.Run(provider, func(t *testing.T) {
			srv.Enqueue(wiremock.Script{Thinking: []string{"pondering"}, Text: []string{"Hello ", "from ", provider}, Usage: &wiremock.Usage{Input: 42, Output: 7}})
			r := run(t, home, []string{"MOCK_KEY=secret-" + provider}, "", "ask", "--model", provider+"/m1:low", "Say hi")
			if r.code != 0 || strings.TrimSpace(r.stdout) != "Hello from "+provider {
				t.Fatalf("exit %d\nstdout %q\nstderr %s", r.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stderr, "pondering") || !strings.Contains(r.stderr, "42 in, 7 out") || !strings.Contains(r.stderr, "$0.000056") {
				t.Fatalf("stderr lacks thinking or usage: %s", r.stderr)
			}
			req := srv.LastRequest(t)
			auth := req.Header.Get("X-Api-Key") + req.Header.Get("Authorization")
			if !strings.Contains(auth, "secret-"+provider) || req.Header.Get("X-Team") != "agentd" {
				t.Fatalf("request headers %v", req.Header)
			}
			if !strings.Contains(string(req.Body), "Say hi") {
				t.Fatalf("request body %s", req.Body)
			}
		})
	}

	t.Run("provider error reaches the user", func(t *testing.T) {
		srv.Enqueue(wiremock.Script{Status: 429, ErrorType: "rate_limit_error", ErrorMessage: "Rate limit reached", RetryAfter: "3"})
		r := run(t, home, []string{"MOCK_KEY=k"}, "", "ask", "--model", "mock-chat/m1", "hi")
		if r.code != 1 || !strings.Contains(r.stderr, "429 Rate limit reached") {
			t.Fatalf("exit %d stderr %s", r.code, r.stderr)
		}
	})
}

// waitGoneWith waits until no process on the machine has marker in its
// command line, failing the test if one is left after five seconds. A
// process's own pid means nothing outside its PID namespace (a sandboxed
// MCP server runs in one of its own), so processes are found by what
// they were started with.
func waitGoneWith(t *testing.T, marker, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := processesWith(marker)
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still running (%d processes)", what, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
