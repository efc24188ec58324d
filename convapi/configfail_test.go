package convapi

import (
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/mcp"
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
	if r := fx.do("PATCH", path, patch); r.status == http.StatusOK {
		t.Fatalf("a PATCH that cannot be recorded was accepted: %s", r)
	}
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
