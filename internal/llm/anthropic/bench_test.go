package anthropic_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/anthropic"
	"github.com/agentd-dev/agentd/internal/llm/llmtest"
)

// recordedStream is a long answer as the API streams it: textDeltas text
// deltas, then a tool call whose arguments come in argDeltas pieces. It
// returns the stream and its number of wire events.
func recordedStream(textDeltas, argDeltas int) ([]byte, int) {
	var b strings.Builder
	n := 0
	ev := func(name, data string) {
		fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", name, data)
		n++
	}
	ev("message_start", `{"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":2048,"cache_creation_input_tokens":0,"cache_read_input_tokens":30000,"output_tokens":1}}}`)
	ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	ev("ping", `{"type": "ping"}`)
	for i := 0; i < textDeltas; i++ {
		ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"word %d and \"quoted\" text "}}`, i))
	}
	ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
	ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_bench","name":"write","input":{}}}`)
	ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}`)
	ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"path\": \"out.txt\", \"content\": \""}}`)
	for i := 0; i < argDeltas; i++ {
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"line of file content\\n"}}`)
	}
	ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"}"}}`)
	ev("content_block_stop", `{"type":"content_block_stop","index":1}`)
	ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":6000}}`)
	ev("message_stop", `{"type":"message_stop"}`)
	return []byte(b.String()), n
}

// BenchmarkDecode streams a recorded answer of 2000 text deltas and a
// 200-piece tool call through the real SDK and the decoder.
func BenchmarkDecode(b *testing.B) {
	body, wireEvents := recordedStream(2000, 200)
	p := anthropic.New(&http.Client{Transport: llmtest.Replay(body)})
	m := &llm.Model{ID: "claude-test", API: llm.APIAnthropicMessages, Provider: "anthropic", BaseURL: "http://memory",
		Cost: llm.ModelCost{Input: 3, Output: 15}, MaxTokens: 64000}
	c := hi()
	o := &llm.StreamOptions{APIKey: "k"}
	ctx := context.Background()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	events := 0
	for b.Loop() {
		s := p.Stream(ctx, m, c, o)
		for s.Next() {
			events++
		}
		if s.Err() != nil || len(s.Result().ToolCalls()) != 1 {
			b.Fatalf("stream failed: %v", s.Err())
		}
		s.Close()
	}
	runtime.ReadMemStats(&ms1)
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(events)/secs, "events/s")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(b.N*wireEvents), "allocs/event")
}
