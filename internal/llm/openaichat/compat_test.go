package openaichat

import (
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// sse frames chunks as data-only events; "[DONE]" is passed as it is.
func sse(chunks ...string) []byte {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString("data: ")
		b.WriteString(c)
		b.WriteString("\n\n")
	}
	return []byte(b.String())
}

// delta is a chunk with one choice.
func delta(d string) string {
	return `{"id":"chatcmpl-compat","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + d + `,"finish_reason":null}]}`
}

func finish(reason string) string {
	return `{"id":"chatcmpl-compat","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"` + reason + `"}]}`
}

// TestCompatibleServers replays what OpenAI-compatible servers send where
// they differ from OpenAI.
func TestCompatibleServers(t *testing.T) {
	tests := []struct {
		name  string
		raw   []byte
		check func(t *testing.T, r result)
	}{
		{
			name: "tool call without id or index, arguments in one piece",
			raw: sse(delta(`{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}}]}`),
				finish("tool_calls"), "[DONE]"),
			check: func(t *testing.T, r result) {
				calls := r.msg.ToolCalls()
				if len(calls) != 1 || !strings.HasPrefix(calls[0].ID, "call_") || len(calls[0].ID) != 29 || string(calls[0].Arguments) != `{"command":"ls"}` {
					t.Fatalf("calls %+v", calls)
				}
				if end := toolEnd(r, 0); end == nil || end.ID != calls[0].ID {
					t.Fatalf("the generated id changed: end %+v, final %s", end, calls[0].ID)
				}
			},
		},
		{
			name: "two calls without ids in one chunk",
			raw: sse(delta(`{"tool_calls":[{"index":0,"function":{"name":"a","arguments":"{}"}},{"index":1,"function":{"name":"b","arguments":"{\"x\":1}"}}]}`),
				finish("tool_calls"), "[DONE]"),
			check: func(t *testing.T, r result) {
				calls := r.msg.ToolCalls()
				if len(calls) != 2 || calls[0].Name != "a" || calls[1].Name != "b" || calls[0].ID == calls[1].ID || string(calls[1].Arguments) != `{"x":1}` {
					t.Fatalf("calls %+v", calls)
				}
			},
		},
		{
			name: "one index reused for different calls",
			raw: sse(delta(`{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"a","arguments":"{\"n\":1}"}}]}`),
				delta(`{"tool_calls":[{"index":0,"id":"call_2","function":{"name":"b","arguments":"{\"n\":2}"}}]}`),
				finish("tool_calls"), "[DONE]"),
			check: func(t *testing.T, r result) {
				calls := r.msg.ToolCalls()
				if len(calls) != 2 || calls[0].ID != "call_1" || calls[1].ID != "call_2" || string(calls[1].Arguments) != `{"n":2}` {
					t.Fatalf("calls %+v", calls)
				}
			},
		},
		{
			name: "id and name after the first arguments",
			raw: sse(delta(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":"}}]}`),
				delta(`{"tool_calls":[{"index":0,"id":"call_late","function":{"name":"late","arguments":"1}"}}]}`),
				finish("tool_calls"), "[DONE]"),
			check: func(t *testing.T, r result) {
				calls := r.msg.ToolCalls()
				if len(calls) != 1 || calls[0].ID != "call_late" || calls[0].Name != "late" || string(calls[0].Arguments) != `{"a":1}` {
					t.Fatalf("calls %+v", calls)
				}
			},
		},
		{
			name: "arguments as a JSON object",
			raw:  sse(delta(`{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":{"path":"x"}}}]}`), finish("tool_calls"), "[DONE]"),
			check: func(t *testing.T, r result) {
				if calls := r.msg.ToolCalls(); len(calls) != 1 || string(calls[0].Arguments) != `{"path":"x"}` {
					t.Fatalf("calls %+v", calls)
				}
			},
		},
		{
			name: "null fields as the Python SDK prints them",
			raw: sse(delta(`{"role":"assistant","content":null,"function_call":null,"refusal":null,"tool_calls":[{"index":0,"id":"call_9","function":{"arguments":"","name":"f"},"type":"function"}]}`),
				delta(`{"content":null,"role":null,"tool_calls":[{"index":0,"id":null,"function":{"arguments":"{}","name":null},"type":null}]}`),
				finish("tool_calls"), "[DONE]"),
			check: func(t *testing.T, r result) {
				if calls := r.msg.ToolCalls(); len(calls) != 1 || calls[0].ID != "call_9" || calls[0].Name != "f" || len(r.msg.Content) != 1 {
					t.Fatalf("content %+v", r.msg.Content)
				}
			},
		},
		{
			name: "usage on the finish chunk",
			raw: sse(delta(`{"content":"hi"}`),
				`{"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`, "[DONE]"),
			check: func(t *testing.T, r result) {
				if u := r.msg.Usage; u.Input != 9 || u.Output != 2 {
					t.Fatalf("usage %+v", u)
				}
			},
		},
		{
			name: "cumulative usage on every chunk",
			raw: sse(`{"id":"x","choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"prompt_tokens":9,"completion_tokens":1}}`,
				`{"id":"x","choices":[{"index":0,"delta":{"content":"b"}}],"usage":{"prompt_tokens":9,"completion_tokens":2}}`,
				`{"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3}}`, "[DONE]"),
			check: func(t *testing.T, r result) {
				if u := r.msg.Usage; u.Input != 9 || u.Output != 3 {
					t.Fatalf("usage %+v", u)
				}
			},
		},
		{
			name: "DeepSeek cache accounting",
			raw: sse(delta(`{"content":"hi"}`), finish("stop"),
				`{"id":"x","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":5,"total_tokens":105,"prompt_cache_hit_tokens":64,"prompt_cache_miss_tokens":36}}`, "[DONE]"),
			check: func(t *testing.T, r result) {
				if u := r.msg.Usage; u.Input != 36 || u.CacheRead != 64 || u.Output != 5 {
					t.Fatalf("usage %+v", u)
				}
			},
		},
		{
			name: "cache writes reported by OpenRouter",
			raw: sse(delta(`{"content":"hi"}`), finish("stop"),
				`{"id":"x","choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":600,"cache_write_tokens":300}}}`, "[DONE]"),
			check: func(t *testing.T, r result) {
				if u := r.msg.Usage; u.Input != 100 || u.CacheRead != 600 || u.CacheWrite != 300 {
					t.Fatalf("usage %+v", u)
				}
			},
		},
		{
			name: "finish without [DONE]",
			raw:  sse(delta(`{"content":"hi"}`), finish("stop")),
			check: func(t *testing.T, r result) {
				if r.err != nil || r.msg.StopReason != llm.StopStop || r.msg.TextContent() != "hi" {
					t.Fatalf("stop %s err %v", r.msg.StopReason, r.err)
				}
			},
		},
		{
			name: "[DONE] without finish_reason",
			raw:  sse(delta(`{"content":"hi"}`), "[DONE]"),
			check: func(t *testing.T, r result) {
				if r.err != nil || r.msg.StopReason != llm.StopStop || r.msg.TextContent() != "hi" {
					t.Fatalf("stop %s err %v", r.msg.StopReason, r.err)
				}
			},
		},
		{
			name: "end without finish_reason or [DONE]",
			raw:  sse(delta(`{"content":"hi"}`)),
			check: func(t *testing.T, r result) {
				if r.err == nil || r.err.Kind != llm.ErrStream || r.msg.TextContent() != "hi" {
					t.Fatalf("err %+v", r.err)
				}
			},
		},
		{
			name: "reasoning field (Ollama, OpenRouter, LM Studio)",
			raw:  sse(delta(`{"role":"assistant","content":"","reasoning":"Hmm."}`), delta(`{"content":"ok","reasoning":null}`), finish("stop"), "[DONE]"),
			check: func(t *testing.T, r result) {
				c := r.msg.Content
				if len(c) != 2 || c[0].Thinking != "Hmm." || c[0].ThinkingSignature != "reasoning" || c[1].Text != "ok" {
					t.Fatalf("content %+v", c)
				}
			},
		},
		{
			name: "the same reasoning in two fields (chutes.ai)",
			raw:  sse(delta(`{"reasoning":"x","reasoning_content":"x"}`), delta(`{"content":"y"}`), finish("stop"), "[DONE]"),
			check: func(t *testing.T, r result) {
				c := r.msg.Content
				if len(c) != 2 || c[0].Thinking != "x" || c[0].ThinkingSignature != "reasoning_content" {
					t.Fatalf("content %+v", c)
				}
			},
		},
		{
			name: "reasoning and content in one chunk",
			raw:  sse(delta(`{"reasoning_content":"done thinking","content":"answer"}`), finish("stop"), "[DONE]"),
			check: func(t *testing.T, r result) {
				c := r.msg.Content
				if len(c) != 2 || c[0].Type != llm.ContentThinking || c[1].Text != "answer" {
					t.Fatalf("content %+v", c)
				}
			},
		},
		{
			name: "refusal",
			raw:  sse(delta(`{"role":"assistant","content":null,"refusal":"I can't help with that."}`), finish("stop"), "[DONE]"),
			check: func(t *testing.T, r result) {
				if r.msg.TextContent() != "I can't help with that." {
					t.Fatalf("content %+v", r.msg.Content)
				}
			},
		},
		{
			name: "SSE comments, CRLF line ends and an Azure filter chunk",
			raw: []byte(": OPENROUTER PROCESSING\r\n\r\n" +
				"data: {\"id\":\"\",\"object\":\"\",\"created\":0,\"model\":\"\",\"choices\":[],\"prompt_filter_results\":[{\"prompt_index\":0,\"content_filter_results\":{}}]}\r\n\r\n" +
				"data: " + delta(`{"content":"hi"}`) + "\r\n\r\n" +
				"data: " + finish("stop") + "\r\n\r\ndata: [DONE]\r\n\r\n"),
			check: func(t *testing.T, r result) {
				if r.err != nil || r.msg.TextContent() != "hi" || r.msg.ResponseID != "chatcmpl-compat" {
					t.Fatalf("message %+v err %v", r.msg, r.err)
				}
			},
		},
		{
			name: "OpenRouter encrypted reasoning for a tool call",
			raw: sse(delta(`{"tool_calls":[{"index":0,"id":"tool_0","type":"function","function":{"name":"f","arguments":"{}"}}],"reasoning_details":[{"type":"reasoning.encrypted","id":"tool_0","data":"ENC","format":"google-gemini-v1","index":0}]}`),
				finish("tool_calls"), "[DONE]"),
			check: func(t *testing.T, r result) {
				calls := r.msg.ToolCalls()
				if len(calls) != 1 || !jsonEqual(calls[0].ThoughtSignature, `{"type":"reasoning.encrypted","id":"tool_0","data":"ENC","format":"google-gemini-v1","index":0}`) {
					t.Fatalf("calls %+v", calls)
				}
			},
		},
		{
			name: "finish_reason error without an error object",
			raw:  sse(delta(`{"content":"par"}`), finish("error")),
			check: func(t *testing.T, r result) {
				if r.err == nil || r.msg.StopReason != llm.StopError || r.msg.TextContent() != "par" {
					t.Fatalf("err %+v", r.err)
				}
			},
		},
		{
			name: "error chunk in OpenAI's shape",
			raw:  sse(delta(`{"content":"par"}`), `{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`),
			check: func(t *testing.T, r result) {
				if r.err == nil || r.err.Kind != llm.ErrServer || r.msg.ErrorMessage != "server_error: The server had an error while processing your request." {
					t.Fatalf("err %+v message %q", r.err, r.msg.ErrorMessage)
				}
			},
		},
		{
			name: "choices other than the first are ignored",
			raw: sse(`{"id":"x","choices":[{"index":1,"delta":{"content":"no"}},{"index":0,"delta":{"content":"yes"}}]}`,
				`{"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"},{"index":1,"delta":{"content":"late"}}]}`, "[DONE]"),
			check: func(t *testing.T, r result) {
				if r.msg.TextContent() != "yes" {
					t.Fatalf("text %q", r.msg.TextContent())
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := runScript(t, wiremock.Script{Raw: tt.raw}, nil, nil)
			tt.check(t, r)
		})
	}
}

// toolEnd returns the call of the n-th toolcall_end event.
func toolEnd(r result, n int) *llm.Content {
	for _, ev := range r.events {
		if ev.Type == llm.EventToolCallEnd {
			if n == 0 {
				return ev.ToolCall
			}
			n--
		}
	}
	return nil
}
