package openairesponses

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
)

func user(blocks ...llm.Content) llm.Message {
	return llm.Message{Role: llm.RoleUser, Content: blocks}
}

func assistant(provider, model string, api llm.API, stop llm.StopReason, blocks ...llm.Content) llm.Message {
	return llm.Message{Role: llm.RoleAssistant, Provider: provider, Model: model, API: api, StopReason: stop, Content: blocks}
}

func result(id, name string, isError bool, blocks ...llm.Content) llm.Message {
	return llm.Message{Role: llm.RoleToolResult, ToolCallID: id, ToolName: name, IsError: isError, Content: blocks}
}

func thinking(text, sig string) llm.Content {
	return llm.Content{Type: llm.ContentThinking, Thinking: text, ThinkingSignature: sig}
}

func signedText(text, sig string) llm.Content {
	return llm.Content{Type: llm.ContentText, Text: text, TextSignature: sig}
}

const png = "iVBORw0KGgo="

// TestConvertHistory records the input items sent for conversations that
// exercise replay, cross-provider history and pairing repairs; see the
// golden files under testdata/requests/.
func TestConvertHistory(t *testing.T) {
	const (
		rs1    = `{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"Look first."}],"encrypted_content":"gAAAAA-enc-1"}`
		rsNoEn = `{"id":"rs_2","type":"reasoning","summary":[{"type":"summary_text","text":"Hmm."}]}`
	)
	gpt5 := &llm.Model{ID: "gpt-5-mini", API: llm.APIOpenAIResponses, Provider: "openai", Reasoning: true, Input: []string{"text", "image"}}
	textOnly := &llm.Model{ID: "gpt-oss-120b", API: llm.APIOpenAIResponses, Provider: "vllm", Reasoning: true, Input: []string{"text"}}
	tests := []struct {
		name  string
		model *llm.Model
		ctx   llm.Context
	}{
		{
			name:  "same-model",
			model: gpt5,
			ctx: llm.Context{
				SystemPrompt: "You are a coding agent.",
				Messages: []llm.Message{
					user(llm.Text("List the files.")),
					assistant("openai", "gpt-5-mini", llm.APIOpenAIResponses, llm.StopToolUse,
						thinking("Look first.", rs1),
						signedText("Sure.", "msg_aaa"),
						llm.ToolCall("call_1|fc_1", "ls", json.RawMessage(`{"dir":"."}`))),
					result("call_1|fc_1", "ls", false, llm.Text("a.go"), llm.Text("b.go")),
					assistant("openai", "gpt-5-mini", llm.APIOpenAIResponses, llm.StopStop,
						signedText("Two files.", `{"v":1,"id":"msg_bbb","phase":"final_answer"}`)),
					user(llm.Text("What is in this?"), llm.Image(png, "image/png")),
				},
			},
		},
		{
			name:  "cross-provider",
			model: gpt5,
			ctx: llm.Context{
				Messages: []llm.Message{
					user(llm.Text("Check the build.")),
					assistant("anthropic", "claude-sonnet-4-5", llm.APIAnthropicMessages, llm.StopToolUse,
						thinking("I should run make.", "EqQBCkYIBxgCKkD-anthropic-signature"),
						llm.Content{Type: llm.ContentThinking, ThinkingSignature: "redacted-payload", Redacted: true},
						thinking("   ", ""),
						llm.Text("Running make."),
						llm.ToolCall("toolu_01A.b/c", "bash", json.RawMessage(`{"command":"make"}`))),
					result("toolu_01A.b/c", "bash", true, llm.Text("make: *** [all] Error 1"), llm.Image(png, "image/png")),
					assistant("openai", "gpt-4.1", llm.APIOpenAIResponses, llm.StopToolUse,
						thinking("Other model's reasoning.", rs1),
						signedText("Retrying.", "msg_other"),
						llm.ToolCall("call_2|fc_2", "bash", json.RawMessage(`{"command":"make -k"}`))),
					result("call_2|fc_2", "bash", false, llm.Text("ok")),
				},
			},
		},
		{
			name:  "repairs",
			model: textOnly,
			ctx: llm.Context{
				SystemPrompt: "Be brief.",
				Messages: []llm.Message{
					user(llm.Text("Start."), llm.Image(png, "image/png")),
					user(llm.Image(png, "image/png")),
					// Errored turn: dropped, and its result with it.
					assistant("vllm", "gpt-oss-120b", llm.APIOpenAIResponses, llm.StopError,
						llm.ToolCall("call_e|fc_e", "ls", nil)),
					result("call_e|fc_e", "ls", false, llm.Text("stale")),
					// Aborted turn: dropped.
					assistant("vllm", "gpt-oss-120b", llm.APIOpenAIResponses, llm.StopAborted, llm.Text("Half")),
					// Reasoning without encrypted content cannot be replayed
					// with store=false; the call then loses its item id.
					assistant("vllm", "gpt-oss-120b", llm.APIOpenAIResponses, llm.StopToolUse,
						thinking("Hmm.", rsNoEn),
						llm.ToolCall("call_3|fc_3", "screenshot", nil),
						llm.ToolCall("call_4|fc_4", "ls", nil)),
					result("call_3|fc_3", "screenshot", false, llm.Image(png, "image/png")),
					// call_4 got no result before the user spoke.
					user(llm.Text("Stop.")),
					assistant("vllm", "gpt-oss-120b", llm.APIOpenAIResponses, llm.StopToolUse,
						llm.ToolCall("call_5|fc_5", "ls", nil)),
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := buildParams(tt.model, &tt.ctx, &llm.StreamOptions{Thinking: llm.ThinkingLow})
			if err != nil {
				t.Fatal(err)
			}
			body, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, body, "", "  "); err != nil {
				t.Fatal(err)
			}
			pretty.WriteByte('\n')
			golden(t, filepath.Join("testdata", "requests", tt.name+".json"), pretty.Bytes())
		})
	}
}

func TestSanitizeCallID(t *testing.T) {
	tests := []struct{ in, want string }{
		{"toolu_01ABC-x", "toolu_01ABC-x"},
		{"toolu_01A.b/c", "toolu_01A_b_c"},
		{"a b|c", "a_b_c"},
		{string(bytes.Repeat([]byte("x"), 80)), string(bytes.Repeat([]byte("x"), 64))},
		{"", ""},
	}
	for _, tt := range tests {
		if got := sanitizeCallID(tt.in); got != tt.want {
			t.Errorf("sanitizeCallID(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestTextSignature(t *testing.T) {
	tests := []struct {
		sig, id, phase string
	}{
		{"msg_1", "msg_1", ""},
		{`{"v":1,"id":"msg_2","phase":"commentary"}`, "msg_2", "commentary"},
		{`{"v":1,"id":"msg_3","phase":"bogus"}`, "msg_3", ""},
		{`{"v":2,"id":"msg_4"}`, `{"v":2,"id":"msg_4"}`, ""},
	}
	for _, tt := range tests {
		id, phase := parseTextSignature(tt.sig)
		if id != tt.id || phase != tt.phase {
			t.Errorf("parseTextSignature(%q) = %q, %q", tt.sig, id, phase)
		}
	}
	for _, tt := range []struct{ id, phase string }{{"msg_1", ""}, {"msg_2", "final_answer"}} {
		if id, phase := parseTextSignature(encodeTextSignature(tt.id, tt.phase)); id != tt.id || phase != tt.phase {
			t.Errorf("round trip of %q/%q gave %q/%q", tt.id, tt.phase, id, phase)
		}
	}
}
