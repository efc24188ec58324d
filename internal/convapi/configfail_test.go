package convapi

import (
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/mcp"
	"github.com/agentd-dev/agentd/internal/pipeline"
)

// sessionFile is the one session file under root's sessions directory.
func sessionFile(t *testing.T, root string) string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(filepath.Join(root, "sessions"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".jsonl") {
			files = append(files, p)
		}
		return err
	})
	if err != nil || len(files) != 1 {
		t.Fatalf("session files under %s: %v (%v)", root, files, err)
	}
	return files[0]
}

// unwritable makes path impossible to write, for root too: a directory
// takes the file's place (a session loaded from the file has it open no
// more). It returns what puts the file back.
func unwritable(t *testing.T, path string) (restore func()) {
	t.Helper()
	if err := os.Rename(path, path+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".aside", path); err != nil {
			t.Fatal(err)
		}
	}
}

// A config PATCH whose changes cannot be recorded in the conversation's
// file is refused whole: neither its MCP section nor its chat settings
// take effect, before or after the refusal; once the file can be written
// again the same PATCH applies in full.
func TestConfigPatchAllOrNothing(t *testing.T) {
	root := t.TempDir()
	url := mcpHTTPServer(t)
	fx := newFixture(t, fixtureOptions{root: root, mcp: mcp.New(mcp.Options{})})
	fx.create("atomic", map[string]any{"config": map[string]any{"chat": map[string]any{"thinking": "low", "name": "Before"}}})
	fx.stop()

	// After a restart the conversation is read from its file, which it
	// then holds no descriptor of.
	fx = newFixture(t, fixtureOptions{root: root, mcp: mcp.New(mcp.Options{})})
	const path = "/api/v2/conversations/atomic/config"
	before := fx.ok("GET", path, nil)
	restore := unwritable(t, sessionFile(t, root))

	patch := map[string]any{
		"chat": map[string]any{"thinking": "high", "name": "After", "confirm_all": false},
		"mcp":  map[string]any{"servers": []any{map[string]any{"name": "web", "url": url}}},
	}
	wantErr(t, fx.do("PATCH", path, patch), http.StatusInternalServerError, "The conversation's file could not record the change, so nothing changed; try again")
	if after := fx.ok("GET", path, nil); string(after.body) != string(before.body) {
		t.Fatalf("a refused PATCH changed the config:\nbefore %s\nafter  %s", before.body, after.body)
	}

	restore()
	fx.ok("PATCH", path, patch)
	got := fx.ok("GET", path, nil)
	chat := got.m["chat"].(map[string]any)
	if chat["thinking"] != "high" || chat["name"] != "After" || chat["confirm_all"] != false || !strings.Contains(string(got.body), `"name":"web"`) {
		t.Fatalf("the PATCH once the file can be written: %s", got.body)
	}
}

// A PATCH of chat settings alone whose first write fails leaves them as
// they were too: the session takes a new thinking level in memory before
// it records it, and the refusal puts the old one back there, which GET
// and the next run read.
func TestConfigPatchChatSettingsPutBack(t *testing.T) {
	root := t.TempDir()
	fx := newFixture(t, fixtureOptions{root: root})
	fx.create("chat", map[string]any{"config": map[string]any{"chat": map[string]any{"thinking": "low", "name": "Before"}}})
	fx.stop()

	fx = newFixture(t, fixtureOptions{root: root})
	const path = "/api/v2/conversations/chat/config"
	before := fx.ok("GET", path, nil)
	restore := unwritable(t, sessionFile(t, root))
	patch := map[string]any{"chat": map[string]any{"thinking": "high", "name": "After", "confirm_all": false}}
	wantErr(t, fx.do("PATCH", path, patch), http.StatusInternalServerError, "The conversation's file could not record the change, so nothing changed; try again")
	if after := fx.ok("GET", path, nil); string(after.body) != string(before.body) {
		t.Fatalf("a refused PATCH changed the config:\nbefore %s\nafter  %s", before.body, after.body)
	}
	restore()
}

// An MCP server that fails to start may print a secret on stderr, which
// only the log gets (redacted). The owner's answer to the PATCH says how
// it ended, never what it printed; what the command journal keeps of it
// (and a replay after a restart answers) names the server without the
// cause and holds no env value, for the answer and for a refusal that
// lists the failed servers.
func TestConfigAnswerJournaledWithoutSecrets(t *testing.T) {
	root := t.TempDir()
	const secret = "stderr-s3cret-5521"
	fx := newFixture(t, fixtureOptions{root: root, mcp: mcp.New(mcp.Options{}), journal: true})
	fx.create("loud", nil)
	const path = "/api/v2/conversations/loud/config"
	loud := map[string]any{"name": "loud", "command": "/bin/sh", "args": []string{"-c", `echo "my token is $TOKEN" >&2; exit 3`},
		"env": map[string]string{"TOKEN": secret}}
	patch := map[string]any{"mcp": map[string]any{"servers": []any{loud}}}
	live := fx.ok("PATCH", path, patch, "Idempotency-Key", "loud-1")
	if strings.Contains(string(live.body), secret) || !strings.Contains(string(live.body), "exited with status 3") {
		t.Fatalf("the owner's answer does not say why the server did not start, or quotes its stderr: %s", live.body)
	}
	refused := map[string]any{"chat": chatTools("loud__x"), "mcp": map[string]any{"servers": []any{loud}}}
	r := fx.do("PATCH", path, refused, "Idempotency-Key", "loud-2")
	if r.status != http.StatusBadRequest || strings.Contains(string(r.body), secret) || !strings.Contains(r.str("error"), "exited with status 3") {
		t.Fatalf("the owner's refusal does not say why the server did not start, or quotes its stderr: %s", r)
	}
	// The command history, which other clients may read, has the
	// refusal as the journal keeps it.
	hist := marshal(fx.layer.Pipeline().CommandHistory(pipeline.HistoryQuery{SessionID: "loud"}))
	if strings.Contains(string(hist), secret) || !strings.Contains(string(hist), "mcp:loud did not start") {
		t.Fatalf("the command history: %s", hist)
	}
	fx.stop()

	b, err := os.ReadFile(filepath.Join(root, "state", "journal.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), secret) {
		t.Fatalf("the journal keeps what the server printed:\n%s", b)
	}
	if !strings.Contains(string(b), "mcp:loud did not start") || !strings.Contains(string(b), `"TOKEN":"`+SecretPlaceholder+`"`) {
		t.Fatalf("the journal does not keep the answers without their secrets:\n%s", b)
	}

	// Replays after a restart answer what the journal kept.
	fx = newFixture(t, fixtureOptions{root: root, mcp: mcp.New(mcp.Options{}), journal: true})
	again := fx.ok("PATCH", path, patch, "Idempotency-Key", "loud-1")
	if strings.Contains(string(again.body), secret) || !strings.Contains(string(again.body), "mcp:loud did not start") || !strings.Contains(string(again.body), `"status":"ok"`) {
		t.Fatalf("the replayed answer: %s", again.body)
	}
	r = fx.do("PATCH", path, refused, "Idempotency-Key", "loud-2")
	if r.status != http.StatusBadRequest || strings.Contains(string(r.body), secret) || !strings.HasPrefix(r.str("error"), "Tool 'loud__x' not found") || !strings.Contains(r.str("error"), "mcp:loud did not start") {
		t.Fatalf("the replayed refusal: %s", r)
	}
}
