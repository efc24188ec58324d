package llmtest_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/llmtest"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// The -update flag may be shared with the other wires' golden tests in
// this package, so it is defined only once, by whichever file gets there
// first.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite the golden files under testdata/")
	}
}

func updateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// anthropicGolden are representative scripts and the file holding what
// the mock answers for each.
var anthropicGolden = []struct {
	file string
	sc   wiremock.Script
}{
	{"text.sse", wiremock.Script{ResponseID: "msg_golden_text", Text: []string{"Hello", " world"},
		Usage: &wiremock.Usage{Input: 12, Output: 3, CacheRead: 100, CacheWrite: 20}}},
	{"thinking.sse", wiremock.Script{ResponseID: "msg_golden_thinking", Thinking: []string{"The user", " wants 6*7."},
		ThinkingSignature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3h", Text: []string{"42"}, Usage: &wiremock.Usage{Input: 30, Output: 20}}},
	{"tool-calls.sse", wiremock.Script{ResponseID: "msg_golden_tools", Text: []string{"Reading both."}, ToolCalls: []wiremock.ToolCall{
		{ID: "toolu_01A", Name: "read", Args: []string{`{"path":`, ` "a.txt"}`}},
		{ID: "toolu_01B", Name: "read", Args: []string{`{"path": "b.txt"}`}},
	}, Usage: &wiremock.Usage{Input: 200, Output: 60}}},
	{"redacted-thinking.sse", wiremock.Script{ResponseID: "msg_golden_redacted", RedactedThinking: "EmwKAhgBEgy3va3pzix/LafPsn4a",
		Text: []string{"Done."}, Stop: "length"}},
	{"stream-error.sse", wiremock.Script{ResponseID: "msg_golden_error", Text: []string{"Par", "tial"},
		StreamError: &wiremock.StreamError{Type: "overloaded_error", Message: "Overloaded"}}},
	{"http-error.json", wiremock.Script{ResponseID: "msg_golden_429", Status: http.StatusTooManyRequests, ErrorType: "rate_limit_error",
		ErrorMessage: "Number of request tokens has exceeded your per-minute rate limit"}},
}

func TestAnthropicGolden(t *testing.T) {
	srv := llmtest.NewServer(t)
	for _, g := range anthropicGolden {
		t.Run(g.file, func(t *testing.T) {
			srv.Enqueue(g.sc)
			resp, err := http.Post(srv.AnthropicURL()+wiremock.PathAnthropicMessages, "application/json",
				strings.NewReader(`{"model":"claude-golden","max_tokens":1024,"stream":true,"messages":[]}`))
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if g.sc.Status != 0 {
				if resp.StatusCode != g.sc.Status || !json.Valid(got) {
					t.Fatalf("status %d body %s", resp.StatusCode, got)
				}
			} else {
				if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
					t.Fatalf("content type %q", ct)
				}
				checkAnthropicStream(t, got)
			}
			path := filepath.Join("testdata", "anthropic", g.file)
			if updateGolden() {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("the mock's answer changed (run go test -update if that is intended):\ngot:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// checkAnthropicStream holds a stream to the API's framing: every event
// has a name and a JSON object whose type is that name; blocks open and
// close in order with matching indexes; message_start comes first and
// message_stop (or an error) last.
func checkAnthropicStream(t *testing.T, body []byte) {
	t.Helper()
	var names []string
	open := -1
	next := 0
	sc := bufio.NewScanner(bytes.NewReader(body))
	var event string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d struct {
				Type  string `json:"type"`
				Index *int   `json:"index"`
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
				t.Fatalf("event %s: %v", event, err)
			}
			if d.Type != event {
				t.Fatalf("event %q carries type %q", event, d.Type)
			}
			names = append(names, event)
			switch event {
			case "content_block_start":
				if open != -1 || d.Index == nil || *d.Index != next {
					t.Fatalf("block %v opened while %d is open, want index %d", d.Index, open, next)
				}
				open = *d.Index
				next++
			case "content_block_delta", "content_block_stop":
				if d.Index == nil || *d.Index != open {
					t.Fatalf("%s for block %v while %d is open", event, d.Index, open)
				}
				if event == "content_block_stop" {
					open = -1
				}
			}
		case line == "":
			event = ""
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
	if len(names) < 2 || names[0] != "message_start" {
		t.Fatalf("events %v", names)
	}
	switch last := names[len(names)-1]; last {
	case "message_stop":
		if names[len(names)-2] != "message_delta" {
			t.Fatalf("no message_delta before message_stop: %v", names)
		}
	case "error":
	default:
		t.Fatalf("stream ends with %s", last)
	}
}

func TestAnthropicErrorTypes(t *testing.T) {
	srv := llmtest.NewServer(t)
	for status, want := range map[int]string{400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
		404: "not_found_error", 413: "api_error", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"} {
		srv.Enqueue(wiremock.Script{Status: status})
		resp, err := http.Post(srv.AnthropicURL()+wiremock.PathAnthropicMessages, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
			RequestID string `json:"request_id"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil || body.Type != "error" || body.Error.Type != want || body.Error.Message != http.StatusText(status) || body.RequestID == "" {
			t.Errorf("%d: %+v %v", status, body, err)
		}
	}
}

// TestAnthropicReferenceStreams holds the streams written from the API
// reference (replayed by the provider's tests) to the same framing rules.
func TestAnthropicReferenceStreams(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "anthropic", "reference-*.sse"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no reference streams: %v", err)
	}
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(filepath.Base(f), func(t *testing.T) { checkAnthropicStream(t, body) })
	}
}
