package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm/llmtest"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// TestRPCSpecExampleSession replays the example session of the RPC spec
// (../shared/specs/pi-rpc-mode.md, "Example Session") against the
// Anthropic Messages wire mock: a prompt, an answer that lists files with
// a bash tool call, the tool's result, and the final answer.
func TestRPCSpecExampleSession(t *testing.T) {
	srv := llmtest.NewServer(t)
	srv.Enqueue(
		wiremock.Script{Text: []string{"I'll list", " the files for you."},
			ToolCalls: []wiremock.ToolCall{{ID: "call_123", Name: "bash", Args: []string{`{"command":`, `"ls -la"}`}}},
			Usage:     &wiremock.Usage{Input: 120, Output: 30}},
		wiremock.Script{Text: []string{"Here are the files", " in the current directory:\n..."}, Usage: &wiremock.Usage{Input: 200, Output: 20}},
	)
	home, cwd := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(cwd, "a.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeModels(t, home, map[string]any{"providers": map[string]any{"anthropic": map[string]any{
		"baseUrl": srv.AnthropicURL(), "apiKey": "SPEC_KEY",
	}}})
	cmd := exec.Command(agentdBin, "rpc", "--no-session", "--model", "anthropic/claude-sonnet-4-5")
	dieWithTest(cmd)
	cmd.Dir = cwd
	cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "SPEC_KEY=k", "AGENTD_DATA_DIR=" + t.TempDir()}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if _, err := io.WriteString(stdin, `{"type": "prompt", "message": "List files in the current directory"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	lines := make(chan map[string]any)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
		close(lines)
	}()
	var seq []string
	var frames []map[string]any
	timeout := time.After(60 * time.Second)
loop:
	for {
		select {
		case m, ok := <-lines:
			if !ok {
				t.Fatalf("agentd exited early after %v", seq)
			}
			frames = append(frames, m)
			k, _ := m["type"].(string)
			if k == "message_update" {
				k += ":" + m["assistantMessageEvent"].(map[string]any)["type"].(string)
			}
			if k == "message_start" || k == "message_end" {
				k += ":" + m["message"].(map[string]any)["role"].(string)
			}
			if n := len(seq); n > 0 && seq[n-1] == k && strings.HasSuffix(k, "_delta") {
				continue // runs of deltas count once
			}
			seq = append(seq, k)
			if k == "agent_end" {
				break loop
			}
		case <-timeout:
			t.Fatalf("no agent_end; got %v", seq)
		}
	}
	// The spec's stream, with the events it elides ("...") filled in as
	// pi 0.73 sends them: text_start/end around the text, toolcall deltas,
	// bash's progress updates.
	want := []string{
		"response", "agent_start", "turn_start", "message_start:user", "message_end:user",
		"message_start:assistant", "message_update:text_start", "message_update:text_delta", "message_update:text_end",
		"message_update:toolcall_start", "message_update:toolcall_delta", "message_update:toolcall_end", "message_end:assistant",
		"tool_execution_start", "tool_execution_update", "tool_execution_end", "message_start:toolResult", "message_end:toolResult",
		"turn_end", "turn_start", "message_start:assistant", "message_update:text_start", "message_update:text_delta",
		"message_update:text_end", "message_end:assistant", "turn_end", "agent_end",
	}
	got := strings.Join(seq, " ")
	got = strings.ReplaceAll(got, "tool_execution_update tool_execution_update", "tool_execution_update")
	for strings.Contains(got, "tool_execution_update tool_execution_update") {
		got = strings.ReplaceAll(got, "tool_execution_update tool_execution_update", "tool_execution_update")
	}
	if got != strings.Join(want, " ") {
		t.Fatalf("event sequence\n got %s\nwant %s", got, strings.Join(want, " "))
	}
	for _, f := range frames {
		switch f["type"] {
		case "message_end":
			m := f["message"].(map[string]any)
			if m["role"] == "assistant" && m["stopReason"] == "toolUse" {
				c := m["content"].([]any)
				text, call := c[0].(map[string]any), c[1].(map[string]any)
				if text["text"] != "I'll list the files for you." || call["id"] != "call_123" || call["name"] != "bash" ||
					call["arguments"].(map[string]any)["command"] != "ls -la" || m["api"] != "anthropic-messages" || m["model"] != "claude-sonnet-4-5" {
					t.Fatalf("assistant message %v", m)
				}
			}
		case "tool_execution_end":
			res := f["result"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"].(string)
			if f["toolCallId"] != "call_123" || f["isError"] != false || !strings.Contains(res, "a.txt") || !strings.HasPrefix(res, "total ") {
				t.Fatalf("tool_execution_end %v", f)
			}
		case "turn_end":
			if tr := f["toolResults"].([]any); len(tr) == 1 && tr[0].(map[string]any)["toolCallId"] != "call_123" {
				t.Fatalf("turn_end %v", f)
			}
		}
	}
	last := frames[len(frames)-1]["messages"].([]any)
	final := last[len(last)-1].(map[string]any)
	if final["stopReason"] != "stop" || final["content"].([]any)[0].(map[string]any)["text"] != "Here are the files in the current directory:\n..." {
		t.Fatalf("final message %v", final)
	}
	if key := srv.LastRequest(t).Header.Get("X-Api-Key"); key != "k" {
		t.Fatalf("api key %q", key)
	}
}
