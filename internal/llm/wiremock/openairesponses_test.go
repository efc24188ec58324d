package wiremock

import (
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The -update flag rewrites golden files. Other wire tests in this package
// may define it too, so it is registered in init (which runs after every
// package-level flag.Bool) only when nobody has, and read by name.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite golden files under testdata/")
	}
}

func responsesUpdate() bool {
	f := flag.Lookup("update")
	if f == nil {
		return false
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return false
	}
	v, _ := g.Get().(bool)
	return v
}

// responsesRequest is the request body agentd's provider sends, as the
// mock decodes it.
func responsesRequest(t *testing.T, body string) *Request {
	t.Helper()
	r := &Request{Method: http.MethodPost, Path: PathResponses, Body: []byte(body)}
	if err := json.Unmarshal(r.Body, &r.JSON); err != nil {
		t.Fatalf("bad request fixture: %v", err)
	}
	return r
}

func TestResponsesWireGolden(t *testing.T) {
	const plainReq = `{"model":"gpt-4.1-mini","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"max_output_tokens":32000,"store":false,"stream":true}`
	const reasoningReq = `{"model":"gpt-5-mini","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"include":["reasoning.encrypted_content"],"max_output_tokens":32000,"reasoning":{"effort":"medium","summary":"auto"},"store":false,"stream":true}`
	const toolReq = `{"model":"gpt-4.1","input":[{"role":"user","content":[{"type":"input_text","text":"weather?"}]}],"max_output_tokens":1024,"store":false,"stream":true,"tools":[{"type":"function","name":"get_weather","description":"Weather for a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"strict":false}]}`

	tests := []struct {
		name string
		req  string
		s    Script
	}{
		{
			name: "text",
			req:  plainReq,
			s: Script{
				ResponseID: "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
				Text:       []string{"Hello", "! How can", " I help?"},
				Usage:      &Usage{Input: 30, CacheRead: 6, Output: 9},
			},
		},
		{
			name: "reasoning-text",
			req:  reasoningReq,
			s: Script{
				ResponseID: "resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b",
				Thinking:   []string{"**Greeting**\n\nThe user", " says hi."},
				Text:       []string{"Hi there!"},
				Usage:      &Usage{Input: 12, Output: 80, Reasoning: 64},
			},
		},
		{
			name: "tool-calls",
			req:  toolReq,
			s: Script{
				ResponseID: "resp_681b4c3cbe0c8191b0b5ba0a4d6b3d0c",
				ToolCalls: []ToolCall{
					{ID: "call_5XBwW2bbz3iHB0a5QZgBHxJt", Name: "get_weather", Args: []string{`{"ci`, `ty":"Pa`, `ris"}`}},
					{ID: "call_7sTLqV0Cc1bA9EYUb0HcRk4m", Name: "get_weather", Args: []string{`{"city":`, `"Tokyo"}`}},
				},
				Usage: &Usage{Input: 60, Output: 40},
			},
		},
		{
			name: "length",
			req:  plainReq,
			s: Script{
				ResponseID: "resp_max_tokens",
				Text:       []string{"Once upon", " a time"},
				Stop:       "length",
				Usage:      &Usage{Input: 10, Output: 16},
			},
		},
		{
			name: "stream-error",
			req:  plainReq,
			s: Script{
				ResponseID:  "resp_failed",
				Text:        []string{"Partial"},
				StreamError: &StreamError{Type: "server_error", Message: "The server had an error processing your request."},
				Usage:       &Usage{Input: 10, Output: 1},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Join(responsesWire{}.Frames(&tt.s, responsesRequest(t, tt.req)), "")
			responsesGolden(t, filepath.Join("testdata", "openai-responses", tt.name+".sse"), got)
			checkResponsesFrames(t, got)
		})
	}
}

// checkResponsesFrames verifies what every recorded stream must satisfy:
// each frame's event name equals its data's type and sequence numbers run
// from 0 without gaps.
func checkResponsesFrames(t *testing.T, stream string) {
	t.Helper()
	frames := strings.Split(strings.TrimSuffix(stream, "\n\n"), "\n\n")
	for i, f := range frames {
		event, data, ok := strings.Cut(f, "\n")
		if !ok || !strings.HasPrefix(event, "event: ") || !strings.HasPrefix(data, "data: ") {
			t.Fatalf("frame %d is not an event frame: %q", i, f)
		}
		var obj struct {
			Type string `json:"type"`
			Seq  *int   `json:"sequence_number"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &obj); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if obj.Type != strings.TrimPrefix(event, "event: ") {
			t.Errorf("frame %d: event %q carries type %q", i, event, obj.Type)
		}
		if obj.Seq == nil || *obj.Seq != i {
			t.Errorf("frame %d: sequence_number %v", i, obj.Seq)
		}
	}
}

// TestResponsesReferenceStream checks the hand-written stream that follows
// the API reference's event examples (replayed by the provider's tests).
func TestResponsesReferenceStream(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "openai-responses", "reference-stream.sse"))
	if err != nil {
		t.Fatal(err)
	}
	checkResponsesFrames(t, string(raw))
}

func TestResponsesWireErrorBody(t *testing.T) {
	tests := []struct {
		s    Script
		want string
	}{
		{
			Script{Status: 429, ErrorMessage: "Rate limit reached for gpt-4.1 in organization org-x on tokens per min (TPM): Limit 30000, Used 30000, Requested 900."},
			`{"error":{"message":"Rate limit reached for gpt-4.1 in organization org-x on tokens per min (TPM): Limit 30000, Used 30000, Requested 900.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
		},
		{
			Script{Status: 400, ErrorType: "context_length_exceeded", ErrorMessage: "Your input exceeds the context window of this model. Please adjust your input and try again."},
			`{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":null,"code":"context_length_exceeded"}}`,
		},
		{
			Script{Status: 500, ErrorType: "server_error", ErrorMessage: "boom"},
			`{"error":{"message":"boom","type":"server_error","param":null,"code":null}}`,
		},
		{
			Script{Status: 401},
			`{"error":{"message":"Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
		},
	}
	for _, tt := range tests {
		if got := string(responsesWire{}.ErrorBody(&tt.s)); got != tt.want {
			t.Errorf("status %d:\n got %s\nwant %s", tt.s.Status, got, tt.want)
		}
	}
}

func responsesGolden(t *testing.T, path, got string) {
	t.Helper()
	if responsesUpdate() {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the rendered stream (run with -update to accept):\n%s", path, responsesFirstDiff(string(want), got))
	}
}

// responsesFirstDiff shows the first differing line of two streams.
func responsesFirstDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return "line " + strconv.Itoa(i+1) + ":\nwant " + w + "\n got " + g
		}
	}
	return "(no line differs)"
}
