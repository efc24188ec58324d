package main

import (
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// rsRunTool runs prompt in conversation id (rsStepTool) and waits for
// want in the conversation: the MCP tool's answer.
func rsRunTool(t *testing.T, s *svServer, id, prompt, want string) {
	t.Helper()
	rsStepTool(t, s, id, prompt)
	svWaitUntil(t, "the MCP tool's answer in the conversation", func() bool {
		return strings.Contains(rsOK(t, s, "GET", rsConvPath(id), nil).body, want)
	})
}

// A REST conversation's own MCP servers outlive kill -9: after the
// restart its config names them, their tools are offered, and a call
// reaches the server started again.
func TestRESTConversationMCPAfterKill9(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	server := testMCPServer(t)
	s := svStart(t, e)
	id := "mcp-kill9"
	rsOK(t, s, "PUT", rsConvPath(id), map[string]any{"config": map[string]any{"chat": map[string]any{},
		"mcp": map[string]any{"servers": []any{map[string]any{"name": "tiny", "command": server}}}}})
	tools := func(r rsReply) []string {
		chat, _ := r.m["chat"].(map[string]any)
		var out []string
		for _, n := range chat["tools"].([]any) {
			out = append(out, n.(string))
		}
		return out
	}
	if got := tools(rsOK(t, s, "GET", rsConvPath(id)+"/config", nil)); !slices.Contains(got, "tiny__echo") {
		t.Fatalf("tools before the crash: %v", got)
	}
	s.kill9()

	s2 := s.restart()
	cfg := rsOK(t, s2, "GET", rsConvPath(id)+"/config", nil)
	if got := tools(cfg); !slices.Contains(got, "tiny__echo") {
		t.Fatalf("tools after kill -9 and a restart: %v (%s)", got, cfg)
	}
	if m, _ := cfg.m["mcp"].(map[string]any); m == nil || !strings.Contains(cfg.body, `"name":"tiny"`) {
		t.Fatalf("the mcp section after the restart: %s", cfg)
	}
	e.tweak("call the tiny tool", func(sc *wiremock.Script) {
		*sc = e2eToolScript("tiny__echo", map[string]string{"text": "after the crash"})
	})
	rsRunTool(t, s2, id, "call the tiny tool", "tiny echo: after the crash")
}

// A conversation's MCP servers with auto_start false outlive kill -9 as
// such: after the restart they are not started when the conversation
// loads, only at its first run, and then with the env values given. Those
// values never appear in an answer (a placeholder does) and so in no file
// of the server's but the session file, which needs them to start the
// servers again, even for a PATCH sent with an Idempotency-Key (whose
// answer is journaled).
func TestRESTConversationMCPAutoStartAndSecretsAfterKill9(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	server := testMCPServer(t)
	const secret = "e2e-s3cret-token-9921"
	// In the temp dir: the server runs under the conversation's sandbox.
	pidFile := filepath.Join(e.tmp, "tiny.pid")
	s := svStart(t, e)
	id := "mcp-lazy"
	rsOK(t, s, "PUT", rsConvPath(id), map[string]any{})
	patch := func(token string) map[string]any {
		return map[string]any{"mcp": map[string]any{"auto_start": false, "servers": []any{
			map[string]any{"name": "tiny", "command": server, "args": []string{pidFile}, "env": map[string]string{"TOKEN": token}}}}}
	}
	r := rsOK(t, s, "PATCH", rsConvPath(id)+"/config", patch(secret), "Idempotency-Key", "mcp-lazy-patch")
	if strings.Contains(r.body, secret) || !strings.Contains(r.body, `"TOKEN":"********"`) {
		t.Fatalf("the PATCH answer: %s", r)
	}
	started := func() bool { _, err := os.Stat(pidFile); return err == nil }
	if started() {
		t.Fatal("the server started with auto_start false before the first run")
	}
	// Only the session file holds the value.
	holders := func() []string {
		var out []string
		err := filepath.WalkDir(e.data, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if strings.Contains(string(b), secret) {
				out = append(out, strings.TrimPrefix(p, e.data))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if h := holders(); len(h) != 1 || !strings.HasPrefix(h[0], "/sessions/") || !strings.HasSuffix(h[0], ".jsonl") {
		t.Fatalf("files holding the secret value: %v", h)
	}
	s.kill9()

	s2 := s.restart()
	// The journaled PATCH outlives the kill under its key, and so does the
	// key its fingerprint is made with: repeated, it is answered as kept;
	// another one under the same key is refused.
	if again := rsOK(t, s2, "PATCH", rsConvPath(id)+"/config", patch(secret), "Idempotency-Key", "mcp-lazy-patch"); again.body != r.body {
		t.Fatalf("the PATCH repeated after the restart: %s, first %s", again, r)
	}
	if other := rsDo(t, s2, "PATCH", rsConvPath(id)+"/config", patch(secret+"x"), "Idempotency-Key", "mcp-lazy-patch"); other.status == http.StatusOK || !strings.Contains(other.str("error"), "Conflicting idempotencyKey 'mcp-lazy-patch'") {
		t.Fatalf("another PATCH under the key after the restart: %s", other)
	}
	cfg := rsOK(t, s2, "GET", rsConvPath(id)+"/config", nil)
	if m, _ := cfg.m["mcp"].(map[string]any); m == nil || m["auto_start"] != false || strings.Contains(cfg.body, secret) || !strings.Contains(cfg.body, `"TOKEN":"********"`) {
		t.Fatalf("the mcp section after the restart: %s", cfg)
	}
	if started() {
		t.Fatal("the server started when the conversation loaded after the restart")
	}
	e.tweak("read the token", func(sc *wiremock.Script) { *sc = e2eToolScript("tiny__env", map[string]string{"name": "TOKEN"}) })
	rsRunTool(t, s2, id, "read the token", "tiny env: TOKEN="+secret)
	if !started() {
		t.Fatal("the tool answered, but the server never wrote its pid file")
	}
}

// A conversation's MCP server that fails to start is a health issue
// that names it but not its cause: health_check answers every client.
// The conversation's own config says how it ended, but never what it
// printed (which may be a secret of its env): that is in the log only.
func TestRESTConversationMCPFailureInHealth(t *testing.T) {
	t.Parallel()
	s := svStart(t, e2eNewEnv(t, e2eOpts{}))
	id := "mcp-fails"
	rsOK(t, s, "PUT", rsConvPath(id), map[string]any{"config": map[string]any{"chat": map[string]any{},
		"mcp": map[string]any{"servers": []any{map[string]any{"name": "leaky", "command": "sh",
			"args": []string{"-c", `echo "bad key $KEY" >&2; exit 3`}, "env": map[string]string{"KEY": "s3cret-value"}}}}}})
	if cfg := rsOK(t, s, "GET", rsConvPath(id)+"/config", nil); strings.Contains(cfg.body, "s3cret-value") ||
		!strings.Contains(cfg.body, "exited with status 3") || !strings.Contains(cfg.body, "unavailable") {
		t.Errorf("the owner's config lacks the cause, or quotes the server's stderr: %s", e2eClip(cfg.body, 1500))
	}
	if log := s.stderr.String(); !strings.Contains(log, "bad key [redacted]") || strings.Contains(log, "s3cret-value") {
		t.Errorf("the log should have the server's stderr, redacted: %s", e2eClip(log, 3000))
	}
	h := s.dial("A").call(svM{"id": "h", "type": "health_check"})
	issues := svJSON(svAt(h.m, "data", "issues"))
	if !strings.Contains(issues, "Session "+id+": mcp:leaky did not start") {
		t.Errorf("health_check issues do not name the server: %s", issues)
	}
	if strings.Contains(issues, "s3cret") || strings.Contains(issues, "bad key") {
		t.Errorf("health_check quotes what the server printed: %s", issues)
	}
}
