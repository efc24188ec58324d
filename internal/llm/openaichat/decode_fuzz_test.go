package openaichat

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/llmtest"
)

// FuzzChunk streams one event of arbitrary data, as a server would send
// it, followed by a text chunk and the end. Whatever the data, the stream
// ends (with an error or an answer) without a panic; when the data is
// JSON the stream goes on past it, and the text chunk after it arrives
// intact.
func FuzzChunk(f *testing.F) {
	for _, s := range []string{
		`{"id":"c1","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`,
		`{"choices":[{"delta":{"reasoning_content":"r","content":"t"}}],"usage":{"prompt_tokens":12.0,"completion_tokens":"3"}}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":{"a":[1,{"b":null}]}}}]}}]}`,
		`{"choices":[{"index":1,"delta":{"content":"other"}},{"delta":{"refusal":"no"}}]}`,
		`{"error":{"message":"overloaded","code":529,"metadata":{"raw":"upstream"}}}`,
		`{"choices":[{"delta":{"reasoning_details":[{"type":"reasoning.encrypted","data":"x","id":"call_1"}]}}]}`,
		`{"choices":[{"delta":{"content":"\u00e9\ud83d\ude00\"\\"}}]}`,
		`[1,2,3]`, `"x"`, `{"choices":{}}`, `{"choices":[{"delta":[]}]}`, `{`, `{"a":1}}`, `nul`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if bytes.ContainsAny(data, "\r\n") {
			return // one event of one line
		}
		var body bytes.Buffer
		body.WriteString("data: ")
		body.Write(data)
		body.WriteString("\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"after\"}}]}\n\ndata: [DONE]\n\n")
		p := New(&http.Client{Transport: llmtest.Replay(body.Bytes())})
		m := &llm.Model{ID: "m", API: llm.APIOpenAICompletions, Provider: "openai", BaseURL: "https://api.openai.com/v1", MaxTokens: 100}
		s := p.Stream(context.Background(), m, hello(), &llm.StreamOptions{APIKey: "k"})
		var text string
		for s.Next() {
			if ev := s.Event(); ev.Type == llm.EventTextDelta {
				text += ev.Delta
			}
		}
		err := s.Err()
		s.Close()
		if err != nil || !json.Valid(data) {
			return
		}
		if !bytes.HasSuffix([]byte(text), []byte("after")) {
			t.Fatalf("after a JSON chunk the stream's text is %q, without the next chunk's", text)
		}
	})
}
