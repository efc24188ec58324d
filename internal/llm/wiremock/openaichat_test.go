package wiremock

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The golden tests of every wire share one -update flag; whichever test
// file of the package is initialised first defines it.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite the golden files under testdata/")
	}
}

func chatUpdateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// chatRequest is the body agentd sends, as far as the mock looks at it.
func chatRequest(includeUsage bool) *Request {
	body := map[string]any{"model": "gpt-4o-mini", "stream": true}
	if includeUsage {
		body["stream_options"] = map[string]any{"include_usage": true}
	}
	return &Request{Method: "POST", Path: PathChatCompletions, JSON: body}
}

// TestChatWireGolden keeps recorded examples of what the mock streams for
// representative scripts in testdata/openai-completions. Run with -update
// after a deliberate change and review the diff.
func TestChatWireGolden(t *testing.T) {
	tests := []struct {
		name         string
		script       Script
		includeUsage bool
	}{
		{name: "text", includeUsage: true, script: Script{
			ResponseID: "chatcmpl-mock1", Text: []string{"Hello", "!", " How can I help?"},
			Usage: &Usage{Input: 12, Output: 6, CacheRead: 1024},
		}},
		{name: "thinking", includeUsage: true, script: Script{
			ResponseID: "chatcmpl-mock2", Thinking: []string{"The user", " wants 6*7."}, Text: []string{"42"},
			Usage: &Usage{Input: 20, Output: 30, Reasoning: 25},
		}},
		{name: "tool-calls", includeUsage: true, script: Script{
			ResponseID: "chatcmpl-mock3", Text: []string{"Reading both."},
			ToolCalls: []ToolCall{
				{ID: "call_a1", Name: "read", Args: []string{`{"path":`, `"a.txt"}`}},
				{ID: "call_b2", Name: "read", Args: []string{`{"path":"b.txt"}`}},
			},
			Usage: &Usage{Input: 100, Output: 40},
		}},
		{name: "tool-call-first", includeUsage: true, script: Script{
			ResponseID: "chatcmpl-mock4",
			ToolCalls:  []ToolCall{{ID: "call_x", Name: "bash", Args: []string{`{"command":"ls"}`}}},
		}},
		{name: "length-no-usage", includeUsage: false, script: Script{
			ResponseID: "chatcmpl-mock5", Text: []string{"Once upon"}, Stop: "length", Usage: &Usage{Input: 5, Output: 2},
		}},
		{name: "stream-error", includeUsage: true, script: Script{
			ResponseID: "gen-mock6", Text: []string{"partial"},
			StreamError: &StreamError{Type: "server_error", Message: "Provider disconnected unexpectedly"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frames := chatWire{}.Frames(&tt.script, chatRequest(tt.includeUsage))
			checkChatFrames(t, frames)
			got := strings.Join(frames, "")
			path := filepath.Join("testdata", "openai-completions", tt.name+".sse")
			if chatUpdateGolden() {
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
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("%s differs from the golden file (-want +got):\n%s", path, diff)
			}
		})
	}
}

// checkChatFrames checks the framing every chat stream must have: each
// frame is whole data-only events, each event one JSON chunk (or [DONE]).
func checkChatFrames(t *testing.T, frames []string) {
	t.Helper()
	for i, f := range frames {
		if !strings.HasSuffix(f, "\n\n") {
			t.Fatalf("frame %d does not end an event: %q", i, f)
		}
		for _, ev := range strings.Split(strings.TrimSuffix(f, "\n\n"), "\n\n") {
			data, ok := strings.CutPrefix(ev, "data: ")
			if !ok || strings.Contains(data, "\n") {
				t.Fatalf("frame %d: not a single data line: %q", i, ev)
			}
			if data != "[DONE]" && !json.Valid([]byte(data)) {
				t.Fatalf("frame %d: invalid JSON: %s", i, data)
			}
		}
	}
}

func TestChatWireUsageOnlyWhenAsked(t *testing.T) {
	sc := Script{ResponseID: "r", Text: []string{"hi"}, Usage: &Usage{Input: 1, Output: 1}}
	asked := strings.Join(chatWire{}.Frames(&sc, chatRequest(true)), "")
	if !strings.Contains(asked, `"usage":null`) || !strings.Contains(asked, `"choices":[],"usage":{"prompt_tokens":1`) {
		t.Errorf("usage chunk missing when asked for:\n%s", asked)
	}
	for _, r := range []*Request{chatRequest(false), nil} {
		if got := strings.Join(chatWire{}.Frames(&sc, r), ""); strings.Contains(got, "usage") {
			t.Errorf("usage sent without stream_options.include_usage:\n%s", got)
		}
	}
	sc.NoUsageInStream = true
	if got := strings.Join(chatWire{}.Frames(&sc, chatRequest(true)), ""); strings.Contains(got, "usage") {
		t.Errorf("usage sent by a server that ignores include_usage:\n%s", got)
	}
}

func TestChatWireFramesCountDeltas(t *testing.T) {
	sc := Script{ResponseID: "r", Thinking: []string{"a", "b"}, Text: []string{"c"},
		ToolCalls: []ToolCall{{ID: "1", Name: "x", Args: []string{"{", "}"}}, {ID: "2", Name: "y"}}}
	frames := chatWire{}.Frames(&sc, chatRequest(true))
	// 2 thinking + 1 text + 2 argument deltas, then the end.
	if len(frames) != 6 {
		t.Fatalf("got %d frames, want 6:\n%s", len(frames), strings.Join(frames, "---\n"))
	}
	if !strings.Contains(frames[0], `"role":"assistant"`) || !strings.Contains(frames[0], `"reasoning_content":"a"`) {
		t.Errorf("first frame should carry the role and the first delta: %s", frames[0])
	}
	last := frames[len(frames)-1]
	for _, want := range []string{`"id":"2"`, `"finish_reason":"tool_calls"`, `"choices":[]`, "data: [DONE]\n\n"} {
		if !strings.Contains(last, want) {
			t.Errorf("last frame lacks %s: %s", want, last)
		}
	}
}

func TestChatWireErrorBody(t *testing.T) {
	tests := []struct {
		script Script
		want   string
	}{
		{Script{ErrorType: "rate_limit_error", ErrorMessage: "Rate limit reached"},
			`{"error":{"message":"Rate limit reached","type":"rate_limit_error","param":null,"code":null}}`},
		{Script{ErrorType: "context_length_exceeded", ErrorMessage: "This model's maximum context length is 128000 tokens."},
			`{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":null,"code":"context_length_exceeded"}}`},
		{Script{ErrorMessage: "payload too big"},
			`{"error":{"message":"payload too big","type":null,"param":null,"code":null}}`},
	}
	for _, tt := range tests {
		if got := string(chatWire{}.ErrorBody(&tt.script)); got != tt.want {
			t.Errorf("ErrorBody(%q) = %s, want %s", tt.script.ErrorType, got, tt.want)
		}
	}
}
