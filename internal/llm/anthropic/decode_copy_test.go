package anthropic_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/anthropic"
	"github.com/agentd-dev/agentd/internal/llm/llmtest"
)

// A delta handed out in an event is a string of its own, never a slice of
// the wire event it came in, so whoever keeps the event (an event log, a
// client's queue) does not keep the event's whole data alive. Each event
// here carries 64 KiB besides its few bytes of delta.
func TestDeltasDoNotPinChunks(t *testing.T) {
	pad := strings.Repeat("p", 64<<10)
	tests := []struct {
		name  string
		block string // content_block_start's content_block
		delta string // content_block_delta's delta, %d is the event's number
		typ   llm.EventType
	}{
		{"text", `{"type":"text","text":""}`, `{"type":"text_delta","text":"t%03d"}`, llm.EventTextDelta},
		{"thinking", `{"type":"thinking","thinking":""}`, `{"type":"thinking_delta","thinking":"k%03d"}`, llm.EventThinkingDelta},
		{"tool call arguments", `{"type":"tool_use","id":"toolu_1","name":"f","input":{}}`, `{"type":"input_json_delta","partial_json":"a%03d"}`, llm.EventToolCallDelta},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const chunks = 64
			var body strings.Builder
			ev := func(name, data string) { fmt.Fprintf(&body, "event: %s\ndata: %s\n\n", name, data) }
			ev("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"usage":{"input_tokens":1,"output_tokens":1}}}`)
			ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":`+tt.block+`}`)
			for i := range chunks {
				ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":%s,"pad":%q}`, fmt.Sprintf(tt.delta, i), pad))
			}
			ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
			ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}`)
			ev("message_stop", `{"type":"message_stop"}`)
			raw := []byte(body.String())
			p := anthropic.New(&http.Client{Transport: llmtest.Replay(raw)})
			m := &llm.Model{ID: "m", API: llm.APIAnthropicMessages, Provider: "anthropic", BaseURL: "http://llm.invalid", MaxTokens: 100}
			c := &llm.Context{Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Content{llm.Text("hi")}}}}
			llmtest.KeptDeltas(t, p, m, c, tt.typ, chunks)
		})
	}
}
