package acp

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/faux"
)

// TestTurnChangesAsDiff: a prompt whose run rewrites a file and one whose
// bash command makes a file each end with a completed edit tool call
// holding the turn's diff (old text, none for a new file, new text); a
// prompt that changes nothing sends none.
func TestTurnChangesAsDiff(t *testing.T) {
	ts := &testSessions{p: faux.New(faux.Options{}), dir: t.TempDir(), checkpoints: t.TempDir()}
	cwd := t.TempDir()
	if err := os.WriteFile(filepath.Join(cwd, "f.txt"), []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startAgent(t, ts)
	sid := c.newSession(cwd)
	changes := func() []map[string]any {
		var out []map[string]any
		for _, u := range c.takeUpdates() {
			if id, _ := u["toolCallId"].(string); u["sessionUpdate"] == "tool_call" && len(id) > 15 && id[:15] == "agentd-changes-" {
				out = append(out, u)
			}
		}
		return out
	}
	cases := []struct {
		prompt       string
		path         string
		old, new     any
		noneExpected bool
	}{
		{prompt: `/tool write {"path":"f.txt","content":"new\n"}`, path: "f.txt", old: "old\n", new: "new\n"},
		{prompt: "/bash echo made > made.txt", path: "made.txt", old: nil, new: "made\n"},
		{prompt: "just talk", noneExpected: true},
	}
	for _, tc := range cases {
		result(t, c.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": tc.prompt}}}))
		got := changes()
		if tc.noneExpected {
			if len(got) != 0 {
				t.Errorf("%s: changes sent: %v", tc.prompt, got)
			}
			continue
		}
		if len(got) != 1 || got[0]["kind"] != "edit" || got[0]["status"] != "completed" {
			t.Fatalf("%s: changes %v", tc.prompt, got)
		}
		content := got[0]["content"].([]any)
		d := content[0].(map[string]any)
		if len(content) != 1 || d["type"] != "diff" || d["path"] != filepath.Join(cwd, tc.path) || d["oldText"] != tc.old || d["newText"] != tc.new {
			t.Errorf("%s: diff %v", tc.prompt, content)
		}
	}
}
