package acp

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// editorFake is an editor's side of fs and terminal: open buffers that
// differ from the disk, and terminals that run real processes.
type editorFake struct {
	mu        sync.Mutex
	buffers   map[string]string
	writes    []string
	terminals map[string]*exec.Cmd
	outputs   map[string]*bytes.Buffer
	created   []string
}

func (e *editorFake) methods() map[string]func(map[string]any) any {
	return map[string]func(map[string]any) any{
		"fs/read_text_file": func(p map[string]any) any {
			e.mu.Lock()
			defer e.mu.Unlock()
			return map[string]any{"content": e.buffers[p["path"].(string)]}
		},
		"fs/write_text_file": func(p map[string]any) any {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.buffers[p["path"].(string)] = p["content"].(string)
			e.writes = append(e.writes, p["path"].(string))
			return map[string]any{}
		},
		"terminal/create": func(p map[string]any) any {
			var args []string
			for _, a := range p["args"].([]any) {
				args = append(args, a.(string))
			}
			cmd := exec.Command(p["command"].(string), args...)
			cmd.Dir = p["cwd"].(string)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				panic(err)
			}
			e.mu.Lock()
			defer e.mu.Unlock()
			id := fmt.Sprintf("term-%d", len(e.terminals)+1)
			e.terminals[id], e.outputs[id] = cmd, &out
			e.created = append(e.created, strings.Join(args, " "))
			return map[string]any{"terminalId": id}
		},
		"terminal/wait_for_exit": func(p map[string]any) any {
			e.mu.Lock()
			cmd := e.terminals[p["terminalId"].(string)]
			e.mu.Unlock()
			_ = cmd.Wait()
			return map[string]any{"exitCode": cmd.ProcessState.ExitCode()}
		},
		"terminal/output": func(p map[string]any) any {
			e.mu.Lock()
			defer e.mu.Unlock()
			return map[string]any{"output": e.outputs[p["terminalId"].(string)].String(), "truncated": false}
		},
		"terminal/release": func(map[string]any) any { return map[string]any{} },
	}
}

func TestEditorFilesAndTerminal(t *testing.T) {
	cwd := t.TempDir()
	file := filepath.Join(cwd, "a.txt")
	if err := os.WriteFile(file, []byte("on disk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ed := &editorFake{buffers: map[string]string{file: "unsaved buffer\nsecond line\n"}, terminals: map[string]*exec.Cmd{}, outputs: map[string]*bytes.Buffer{}}
	c := startAgent(t, nil)
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

	if end := prompt(`/tool read {"path":"a.txt"}`); !strings.Contains(fmt.Sprint(end["content"]), "unsaved buffer") {
		t.Fatalf("read went to the disk: %v", end)
	}
	end := prompt(`/tool edit {"path":"a.txt","edits":[{"oldText":"second","newText":"2nd"}]}`)
	if end["status"] != "completed" {
		t.Fatalf("edit: %v", end)
	}
	ed.mu.Lock()
	buf := ed.buffers[file]
	ed.mu.Unlock()
	if buf != "unsaved buffer\n2nd line\n" {
		t.Fatalf("buffer after edit %q", buf)
	}
	if disk, _ := os.ReadFile(file); string(disk) != "on disk\n" {
		t.Fatalf("edit wrote the disk: %q", disk)
	}
	if end := prompt(`/tool edit {"path":"a.txt","edits":[{"oldText":"absent","newText":"x"}]}`); end["status"] != "failed" {
		t.Fatalf("edit of absent text: %v", end)
	}

	end = prompt("/bash echo from-terminal")
	if end["status"] != "completed" || !strings.Contains(fmt.Sprint(end["content"]), "from-terminal") || !strings.Contains(fmt.Sprint(end["content"]), "term-1") {
		t.Fatalf("bash in the terminal: %v", end)
	}
	ed.mu.Lock()
	created := ed.created
	ed.mu.Unlock()
	if len(created) != 1 || created[0] != "-c echo from-terminal" {
		t.Fatalf("terminals %q", created)
	}
}

func TestNoEditorCapabilitiesKeepsBuiltins(t *testing.T) {
	cwd := t.TempDir()
	if err := os.WriteFile(filepath.Join(cwd, "a.txt"), []byte("on disk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startAgent(t, nil)
	sid := c.newSession(cwd)
	result(t, c.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": `/tool read {"path":"a.txt"}`}}}))
	for _, u := range c.takeUpdates() {
		if u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed" && strings.Contains(fmt.Sprint(u["content"]), "on disk") {
			return
		}
	}
	t.Fatal("the built-in read did not read the disk")
}
