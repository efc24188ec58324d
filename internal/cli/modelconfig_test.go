package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/llmtest"
	"github.com/agentd-dev/agentd/internal/llm/registry"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/settings"
)

// cliRun runs agentd with HOME=home and env, in the test's directory.
func cliRun(t *testing.T, home string, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	getenv := func(k string) string {
		if k == "HOME" {
			return home
		}
		return env[k]
	}
	var out, errOut bytes.Buffer
	m := New(strings.NewReader(""), &out, &errOut, getenv)
	defer m.Close()
	code = m.Run(context.Background(), args)
	return code, out.String(), errOut.String()
}

func writeConfig(t *testing.T, home, name, content string) string {
	t.Helper()
	dir := filepath.Join(home, ".agentd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A models.json the user wrote that cannot be read stops every command
// that runs a model, naming the file and what is wrong, instead of
// answering on faux/echo with exit 0. `agentd models` lists what it could
// read and fails too.
func TestBrokenModelsJSONStopsEveryCommand(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"ask", []string{"ask", "hi"}},
		{"ask with tools", []string{"ask", "--tools", "read", "hi"}},
		{"rpc", []string{"rpc", "--no-session"}},
		{"acp", []string{"acp"}},
		{"tools", []string{"tools"}},
		{"serve", []string{"serve", "--port", "0", "--data-dir", "DATA"}},
		{"serve stdio", []string{"serve", "--stdio", "--data-dir", "DATA"}},
		{"models", []string{"models"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			home := t.TempDir()
			path := writeConfig(t, home, "models.json", `{"providers": {"mock": {"baseUrl": "http://127.0.0.1:1/v1"`)
			args := append([]string(nil), tt.args...)
			for i, a := range args {
				if a == "DATA" {
					args[i] = t.TempDir()
				}
			}
			code, stdout, stderr := cliRun(t, home, nil, args...)
			if code != ExitError {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, ExitError, stdout, stderr)
			}
			if !strings.Contains(stderr, path+": malformed JSON at line 1") || !strings.Contains(stderr, "cannot use the model configuration") {
				t.Fatalf("stderr does not name the file and the problem:\n%s", stderr)
			}
			if strings.Contains(stdout, "You said") || strings.Contains(stderr, "faux/echo") && tt.name != "models" {
				t.Fatalf("ran on the echo model:\nstdout: %s\nstderr: %s", stdout, stderr)
			}
			if tt.name == "models" {
				if !strings.Contains(stdout, "faux/echo") {
					t.Fatalf("models listed nothing:\n%s", stdout)
				}
			} else if stdout != "" {
				t.Fatalf("stdout: %s", stdout)
			}
		})
	}
}

// mockModels is a models.json with one provider, "mock", on srv.
func mockModels(t *testing.T, srv *wiremock.Server, apiKey string) string {
	t.Helper()
	p := map[string]any{"baseUrl": srv.OpenAIURL(), "api": "openai-completions", "models": []any{map[string]any{"id": "m1"}}}
	if apiKey != "" {
		p["apiKey"] = apiKey
	}
	b, err := json.Marshal(map[string]any{"providers": map[string]any{"mock": p}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// One rule picks the model of every command given no --model:
// settings.json's default, else the preferred built-ins, else the first
// model of models.json, else faux/echo.
func TestDefaultModelRule(t *testing.T) {
	srv := llmtest.NewServer(t)
	tests := []struct {
		name     string
		models   bool              // a models.json with mock/m1
		settings string            // settings.json, "" for none
		env      map[string]string // the environment
		want     string
		skipped  bool // the saved default was passed over
	}{
		{name: "nothing configured", want: "faux/echo"},
		{name: "only a models.json provider", models: true, want: "mock/m1"},
		{name: "a key for a built-in wins over models.json", models: true, env: map[string]string{"ANTHROPIC_API_KEY": "k"}, want: "anthropic/claude-sonnet-4-6"},
		{name: "the saved default wins", models: true, env: map[string]string{"ANTHROPIC_API_KEY": "k"},
			settings: `{"defaultProvider":"mock","defaultModel":"m1"}`, want: "mock/m1"},
		{name: "an unknown saved default is passed over", models: true,
			settings: `{"defaultProvider":"mock","defaultModel":"nope"}`, want: "mock/m1", skipped: true},
		{name: "an unusable saved default is passed over",
			settings: `{"defaultProvider":"openai","defaultModel":"gpt-5.4"}`, want: "faux/echo", skipped: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			home := t.TempDir()
			dir := filepath.Join(home, ".agentd")
			if tt.models {
				writeConfig(t, home, "models.json", mockModels(t, srv, ""))
			}
			if tt.settings != "" {
				writeConfig(t, home, "settings.json", tt.settings)
			}
			reg, err := registry.Load(context.Background(), registry.Options{ConfigDir: dir, Env: func(k string) string { return tt.env[k] }})
			if err != nil {
				t.Fatal(err)
			}
			st, err := settings.Open(filepath.Join(dir, "settings.json"))
			if err != nil {
				t.Fatal(err)
			}
			got, skipped := defaultModelSpec(reg, st.Get())
			if got != tt.want || (skipped != "") != tt.skipped {
				t.Fatalf("default %s (skipped %q), want %s (skipped: %v)", got, skipped, tt.want, tt.skipped)
			}
		})
	}
}

// ask follows the rule like the other commands: with only a mock
// provider in models.json it asks the mock, and settings.json's default
// changes its model.
func TestAskUsesTheDefaultModelRule(t *testing.T) {
	srv := llmtest.NewServer(t)
	srv.Handle(func(r *wiremock.Request) wiremock.Script {
		return wiremock.Script{Text: []string{"mock answers"}}
	})
	home := t.TempDir()
	writeConfig(t, home, "models.json", mockModels(t, srv, ""))
	code, stdout, stderr := cliRun(t, home, nil, "ask", "hi")
	if code != ExitOK || strings.TrimSpace(stdout) != "mock answers" || !strings.Contains(stderr, "[mock/m1 ") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	// A saved default of faux/echo wins over models.json, in ask as in serve.
	writeConfig(t, home, "settings.json", `{"defaultProvider":"faux","defaultModel":"echo"}`)
	code, stdout, stderr = cliRun(t, home, nil, "ask", "hi")
	if code != ExitOK || !strings.Contains(stdout, "You said: hi") {
		t.Fatalf("with the saved default: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
}

// A provider's 401 says which key agentd sent, with and without tools.
func TestAsk401NamesTheKey(t *testing.T) {
	srv := llmtest.NewServer(t)
	srv.Handle(func(r *wiremock.Request) wiremock.Script {
		return wiremock.Script{Status: 401, ErrorMessage: "invalid api key"}
	})
	home := t.TempDir()
	writeConfig(t, home, "models.json", mockModels(t, srv, "MOCK_API_KEY"))
	for _, args := range [][]string{{"ask", "hi"}, {"ask", "--tools", "read", "hi"}} {
		code, _, stderr := cliRun(t, home, map[string]string{"MOCK_API_KEY": "wrong"}, args...)
		if code != ExitError || !strings.Contains(stderr, "401 invalid api key (mock refused the API key: check MOCK_API_KEY)") {
			t.Fatalf("%v: exit %d\nstderr: %s", args, code, stderr)
		}
	}
}

// `agentd help <command>` prints that command's help, as <command> -h.
func TestHelpCommand(t *testing.T) {
	home := t.TempDir()
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			code, _, viaHelp := cliRun(t, home, nil, "help", c.name)
			_, _, viaFlag := cliRun(t, home, nil, c.name, "-h")
			if code != ExitOK || viaHelp != viaFlag || !strings.HasPrefix(viaHelp, "Usage: agentd "+c.name) {
				t.Fatalf("agentd help %s: exit %d\n%s\nwant what -h prints:\n%s", c.name, code, viaHelp, viaFlag)
			}
		})
	}
	code, _, stderr := cliRun(t, home, nil, "help", "nope")
	if code != ExitUsage || !strings.Contains(stderr, `unknown command "nope"`) {
		t.Fatalf("agentd help nope: exit %d\n%s", code, stderr)
	}
}

// serve on a port already in use says so and nothing else: no warning
// that a drain was cut short and commands cancelled, when none ran.
func TestServePortInUseLogsNoCutDrain(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	for i := 0; i < 3; i++ {
		// Full access: a confining mode would probe the sandbox by
		// re-running this test binary as agentd's helper.
		code, _, stderr := cliRun(t, t.TempDir(), nil, "serve", "--port", port, "--data-dir", t.TempDir(), "--sandbox", "full-access")
		if code != ExitError || !strings.Contains(stderr, "address already in use") {
			t.Fatalf("exit %d\n%s", code, stderr)
		}
		if strings.Contains(stderr, "drain cut short") || strings.Contains(stderr, "cancelled") {
			t.Fatalf("a server that ran nothing reports cancelled commands:\n%s", stderr)
		}
	}
}
