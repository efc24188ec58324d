package acp

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/sandbox"
)

// The editor writes and runs commands with its own rights, so in a
// confined session (workspace-write) nothing goes to it that the
// sandbox would refuse: a write or edit outside the workspace is refused
// as the built-in tool refuses it, never sent as fs/write_text_file; a
// read outside is refused too; bash never goes out as terminal/create
// but runs here, with the built-in tool. Inside the workspace the
// editor's fs serves as before; full access keeps every editor path.
func TestEditorRequestsHeldToTheSandbox(t *testing.T) {
	for _, mode := range []sandbox.Mode{sandbox.WorkspaceWrite, sandbox.FullAccess} {
		t.Run(string(mode), func(t *testing.T) {
			cwd, outside := t.TempDir(), t.TempDir()
			realCwd, _ := sandbox.RealPath(cwd)
			out := filepath.Join(outside, "escaped.txt")
			in := filepath.Join(cwd, "in.txt")
			ed := &editorFake{buffers: map[string]string{out: "secret buffer\n"}, terminals: map[string]*exec.Cmd{}, outputs: map[string]*bytes.Buffer{}}
			ts := &testSessions{p: faux.New(faux.Options{}), dir: t.TempDir()}
			c := startAgentWith(t, Options{Sessions: ts, SessionsDir: ts.dir, Version: "test",
				Sandbox: func(string) sandbox.Policy {
					return sandbox.Policy{Mode: mode, Writable: []string{realCwd}}
				}})
			c.serve = ed.methods()
			c.call("initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{
				"fs": map[string]any{"readTextFile": true, "writeTextFile": true}, "terminal": true}})
			sid := result(t, c.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))["sessionId"].(string)
			prompt := func(text string) map[string]any {
				t.Helper()
				result(t, c.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": text}}}))
				for _, u := range c.takeUpdates() {
					if u["sessionUpdate"] == "tool_call_update" && (u["status"] == "completed" || u["status"] == "failed") {
						return u
					}
				}
				t.Fatalf("%s: no tool call end", text)
				return nil
			}
			confined := mode != sandbox.FullAccess
			want := map[bool]string{true: "failed", false: "completed"}[confined]
			if end := prompt(fmt.Sprintf(`/tool edit {"path":%q,"edits":[{"oldText":"secret","newText":"s"}]}`, out)); end["status"] != want {
				t.Fatalf("edit outside: %v", end)
			}
			if end := prompt(fmt.Sprintf(`/tool read {"path":%q}`, out)); end["status"] != want {
				t.Fatalf("read outside: %v", end)
			}
			if end := prompt(fmt.Sprintf(`/tool write {"path":%q,"content":"x"}`, out)); end["status"] != want {
				t.Fatalf("write outside: %v", end)
			} else if confined && !strings.Contains(fmt.Sprint(end["content"]), "sandbox") {
				t.Fatalf("the refusal does not name the sandbox: %v", end)
			}
			if end := prompt(fmt.Sprintf(`/tool write {"path":%q,"content":"x"}`, in)); end["status"] != "completed" {
				t.Fatalf("write inside: %v", end)
			}
			if end := prompt("/bash echo ran-somewhere"); end["status"] != "completed" || !strings.Contains(fmt.Sprint(end["content"]), "ran-somewhere") {
				t.Fatalf("bash: %v", end)
			}
			ed.mu.Lock()
			writes, created := ed.writes, ed.created
			ed.mu.Unlock()
			for _, w := range writes {
				if confined && w == out {
					t.Errorf("a write outside the workspace went to the editor: %v", writes)
				}
			}
			if confined && len(created) != 0 {
				t.Errorf("bash went to the editor's terminal in a confined session: %v", created)
			}
			if !confined && len(created) != 1 {
				t.Errorf("full access: terminals %v", created)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("the file outside exists: %v", err)
			}
		})
	}
}
