package llm_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
)

// TestMessageRoundTripPiTranscripts decodes every message pi 0.73.1 put on
// the wire in the reference transcripts and checks agentd encodes it back
// byte for byte.
func TestMessageRoundTripPiTranscripts(t *testing.T) {
	// pi's own transcripts, kept with the rpc end-to-end tests.
	files, _ := filepath.Glob("../../cmd/agentd/testdata/rpc/pi-0.73.1/*.jsonl")
	if len(files) == 0 {
		t.Fatal("pi's reference transcripts are missing from cmd/agentd/testdata/rpc/pi-0.73.1")
	}
	seen := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var line map[string]json.RawMessage
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			for _, key := range []string{"message"} {
				raw, ok := line[key]
				if !ok || raw[0] != '{' {
					continue
				}
				var probe struct {
					Role string `json:"role"`
				}
				_ = json.Unmarshal(raw, &probe)
				if probe.Role != "user" && probe.Role != "assistant" && probe.Role != "toolResult" {
					continue
				}
				var m llm.Message
				if err := json.Unmarshal(raw, &m); err != nil {
					t.Fatalf("%s: decode %s: %v", filepath.Base(f), raw, err)
				}
				got, err := m.AppendJSON(nil)
				if err != nil {
					t.Fatal(err)
				}
				// pi leaks two streaming-internal fields into aborted
				// tool calls; agentd does not write them.
				want := piInternals.ReplaceAll(raw, nil)
				if !bytes.Equal(got, want) {
					t.Errorf("%s: re-encoded message differs\n got: %s\nwant: %s", filepath.Base(f), got, raw)
				}
				seen++
			}
		}
	}
	if seen < 20 {
		t.Fatalf("only %d messages checked", seen)
	}
}

var piInternals = regexp.MustCompile(`,"partialArgs":"(?:[^"\\]|\\.)*"|,"streamIndex":\d+`)

func TestMessageJSONShapes(t *testing.T) {
	zero := 0
	tests := []struct {
		name string
		msg  llm.Message
		want string
	}{
		{"user", llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text("hi <b> & \u2028"), llm.Image("AAAA", "image/png")}, Timestamp: 5},
			`{"role":"user","content":[{"type":"text","text":"hi <b> & \u2028"},{"type":"image","data":"AAAA","mimeType":"image/png"}],"timestamp":5}`},
		{"assistant", llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{
			{Type: llm.ContentThinking, Thinking: "hmm", ThinkingSignature: "sig"},
			llm.ToolCall("c1", "bash", json.RawMessage(`{"command":"ls"}`)),
		}, API: llm.APIAnthropicMessages, Provider: "anthropic", Model: "m", StopReason: llm.StopToolUse, Timestamp: 7,
			Usage: llm.Usage{Input: 1, Output: 2, TotalTokens: 3, Cost: llm.Cost{Input: 0.000042, Total: 1.5}}},
			`{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","thinkingSignature":"sig"},{"type":"toolCall","id":"c1","name":"bash","arguments":{"command":"ls"}}],"api":"anthropic-messages","provider":"anthropic","model":"m","usage":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"totalTokens":3,"cost":{"input":0.000042,"output":0,"cacheRead":0,"cacheWrite":0,"total":1.5}},"stopReason":"toolUse","timestamp":7}`},
		{"tool result", llm.Message{Role: llm.RoleToolResult, ToolCallID: "c1", ToolName: "bash", Content: []llm.Content{llm.Text("x\n")}, Details: json.RawMessage(`{"exit":0}`), IsError: true, Timestamp: 9},
			`{"role":"toolResult","toolCallId":"c1","toolName":"bash","content":[{"type":"text","text":"x\n"}],"details":{"exit":0},"isError":true,"timestamp":9}`},
		{"bash execution", llm.Message{Role: llm.RoleBashExecution, Command: "ls", Output: "a\n", ExitCode: &zero, Truncated: true, FullOutputPath: "/tmp/o", Timestamp: 3},
			`{"role":"bashExecution","command":"ls","output":"a\n","exitCode":0,"cancelled":false,"truncated":true,"fullOutputPath":"/tmp/o","timestamp":3}`},
		{"cancelled bash", llm.Message{Role: llm.RoleBashExecution, Command: "sleep 9", Cancelled: true, ExcludeFromContext: true, Timestamp: 3},
			`{"role":"bashExecution","command":"sleep 9","output":"","cancelled":true,"truncated":false,"excludeFromContext":true,"timestamp":3}`},
		{"custom", llm.Message{Role: llm.RoleCustom, CustomType: "note", Content: []llm.Content{llm.Text("x")}, Display: true, Details: json.RawMessage(`{"a":1}`), Timestamp: 4},
			`{"role":"custom","customType":"note","content":[{"type":"text","text":"x"}],"display":true,"details":{"a":1},"timestamp":4}`},
		{"branch summary", llm.Message{Role: llm.RoleBranchSummary, Summary: "s", FromID: "abcd1234", Timestamp: 5},
			`{"role":"branchSummary","summary":"s","fromId":"abcd1234","timestamp":5}`},
		{"compaction summary", llm.Message{Role: llm.RoleCompactionSummary, Summary: "s", TokensBefore: 1234, Timestamp: 6},
			`{"role":"compactionSummary","summary":"s","tokensBefore":1234,"timestamp":6}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.msg.AppendJSON(nil)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			var back llm.Message
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatal(err)
			}
			again, _ := back.AppendJSON(nil)
			if string(again) != tt.want {
				t.Fatalf("round trip changed it:\n%s", again)
			}
		})
	}
}

func TestMessageDecodeErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"content":[]}`, "without a role"},
		{`{"role":"wizard"}`, `unknown message role "wizard"`},
		{`{"role":"user","content":[{"text":"x"}]}`, "without a type"},
		{`{"role":"user","content":[{"type":"video"}]}`, `unknown content type "video"`},
		{`{"role":"assistant","content":[{"type":"toolCall","id":"a","name":"b","arguments":[1]}]}`, "must be a JSON object"},
		{`{"role":"user","content":7}`, "message content"},
		{`[1,2]`, "cannot unmarshal"},
	}
	for _, tt := range tests {
		var m llm.Message
		err := json.Unmarshal([]byte(tt.in), &m)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want error containing %q", tt.in, err, tt.want)
		}
	}
	var m llm.Message
	if err := json.Unmarshal([]byte(`{"role":"user","content":"plain","timestamp":3}`), &m); err != nil {
		t.Fatal(err)
	}
	if m.TextContent() != "plain" {
		t.Fatalf("string content: got %+v", m.Content)
	}
}

func TestInvalidUTF8IsReplaced(t *testing.T) {
	m := llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text("a\xffb")}}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(b) || !strings.Contains(string(b), `a\ufffdb`) {
		t.Fatalf("got %s", b)
	}
}

func FuzzMessageJSON(f *testing.F) {
	f.Add([]byte(`{"role":"user","content":"hi","timestamp":1}`))
	f.Add([]byte(`{"role":"assistant","content":[{"type":"toolCall","id":"a","name":"b","arguments":{"x":[1,{"y":"\u2028"}]}}],"usage":{"input":1}}`))
	f.Add([]byte(`{"role":"toolResult","toolCallId":"a","content":[{"type":"image","data":"AA","mimeType":"image/png"}],"details":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m llm.Message
		if json.Unmarshal(data, &m) != nil {
			return
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("decoded message does not encode: %v", err)
		}
		if !json.Valid(out) || bytes.ContainsAny(out, "\n\r") {
			t.Fatalf("encoding is not one valid JSON line: %q", out)
		}
		var again llm.Message
		if err := json.Unmarshal(out, &again); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		out2, _ := json.Marshal(again)
		if !bytes.Equal(out, out2) {
			t.Fatalf("not stable:\n%s\n%s", out, out2)
		}
	})
}
