package openaichat

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/llmtest"
)

// A delta handed out in an event is the decoder's own copy, never a slice
// of the wire chunk it came in: whoever keeps the event (an event log, a
// client's queue) must not keep the whole chunk alive with it, nor see it
// change when the next chunk reuses the buffer. Each chunk here carries a
// 64 KiB field besides its few bytes of delta; keeping every event of 64
// chunks must cost far less than the chunks, and each kept delta must
// still read as it came.
func TestDeltasDoNotPinChunks(t *testing.T) {
	pad := strings.Repeat("p", 64<<10)
	tests := []struct {
		name  string
		delta string // the choices[0].delta object, %d is the chunk's number
		typ   llm.EventType
		want  string // the event's delta, %d is the chunk's number
	}{
		{"text", `{"content":"t%03d"}`, llm.EventTextDelta, "t%03d"},
		{"text with escapes", `{"content":"t\"%03d\n"}`, llm.EventTextDelta, "t\"%03d\n"},
		{"refusal", `{"refusal":"r%03d"}`, llm.EventTextDelta, "r%03d"},
		{"reasoning", `{"reasoning_content":"k%03d"}`, llm.EventThinkingDelta, "k%03d"},
		{"tool call arguments", `{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":"a%03d"}}]}`, llm.EventToolCallDelta, "a%03d"},
		{"tool call arguments as an object", `{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":{"n":%d}}}]}`, llm.EventToolCallDelta, `{"n":%d}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const chunks = 64
			var body strings.Builder
			for i := range chunks {
				fmt.Fprintf(&body, "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":%s}],\"pad\":%q}\n\n", fmt.Sprintf(tt.delta, i), pad)
			}
			body.WriteString("data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
			raw := []byte(body.String())
			p := New(&http.Client{Transport: llmtest.Replay(raw)})
			m := &llm.Model{ID: "m", API: llm.APIOpenAICompletions, Provider: "openai", BaseURL: "https://api.openai.com/v1", MaxTokens: 100}
			kept := llmtest.KeptDeltas(t, p, m, hello(), tt.typ, chunks)
			for i, d := range kept {
				if want := fmt.Sprintf(tt.want, i); d != want {
					t.Fatalf("delta %d reads %q after the stream, want %q", i, d, want)
				}
			}
		})
	}
}
