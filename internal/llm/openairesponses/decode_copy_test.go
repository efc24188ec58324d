package openairesponses

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
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
		added string // an output_item.added event's item, or none
		delta string // the delta event, %d is its number, %q the padding
		typ   llm.EventType
	}{
		{"text", "", `{"type":"response.output_text.delta","output_index":0,"content_index":0,"delta":"t%03d","pad":%q}`, llm.EventTextDelta},
		{"reasoning", "", `{"type":"response.reasoning_text.delta","output_index":0,"content_index":0,"delta":"k%03d","pad":%q}`, llm.EventThinkingDelta},
		{"tool call arguments", `{"type":"function_call","id":"fc_1","call_id":"call_1","name":"f","arguments":""}`,
			`{"type":"response.function_call_arguments.delta","output_index":0,"delta":"a%03d","pad":%q}`, llm.EventToolCallDelta},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const chunks = 64
			var body strings.Builder
			if tt.added != "" {
				fmt.Fprintf(&body, "data: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":%s}\n\n", tt.added)
			}
			for i := range chunks {
				fmt.Fprintf(&body, "data: %s\n\n", fmt.Sprintf(tt.delta, i, pad))
			}
			body.WriteString("data: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\"}}\n\n")
			raw := []byte(body.String())
			p := New(&http.Client{Transport: llmtest.Replay(raw)})
			m := &llm.Model{ID: "m", API: llm.APIOpenAIResponses, Provider: "openai", BaseURL: "http://llm.invalid/v1", MaxTokens: 100}
			llmtest.KeptDeltas(t, p, m, hello(), tt.typ, chunks)
		})
	}
}
