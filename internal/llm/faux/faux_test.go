package faux

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
)

// run drains one stream and returns its events, final message and error.
func run(t *testing.T, ctx context.Context, p *Provider, m *llm.Model, c *llm.Context, o *llm.StreamOptions) ([]llm.Event, *llm.Message, *llm.Error) {
	t.Helper()
	s := p.Stream(ctx, m, c, o)
	defer s.Close()
	var evs []llm.Event
	for s.Next() {
		evs = append(evs, s.Event())
	}
	checkSequence(t, evs)
	return evs, s.Result().Clone(), s.Err()
}

// checkSequence asserts the event grammar every stream must follow.
func checkSequence(t *testing.T, evs []llm.Event) {
	t.Helper()
	if len(evs) < 2 || evs[0].Type != llm.EventStart {
		t.Fatalf("stream must start with start and end with done/error: %v", types(evs))
	}
	last := evs[len(evs)-1].Type
	if last != llm.EventDone && last != llm.EventError {
		t.Fatalf("last event %s", last)
	}
}

func types(evs []llm.Event) []llm.EventType {
	out := make([]llm.EventType, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func count(evs []llm.Event, typ llm.EventType) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func user(text string) llm.Message {
	return llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text(text)}}
}

func ctxOf(msgs ...llm.Message) *llm.Context { return &llm.Context{Messages: msgs} }

func TestModel(t *testing.T) {
	m := Model()
	if m.Provider != "faux" || m.API != llm.APIFaux || m.ID != "echo" || !strings.Contains(m.Name, "offline") {
		t.Errorf("model = %+v", *m)
	}
	if !m.Reasoning || m.ContextWindow != 128000 || m.Cost != (llm.ModelCost{}) {
		t.Errorf("model = %+v", *m)
	}
	if m.ClampThinking(llm.ThinkingXHigh) != llm.ThinkingXHigh {
		t.Error("faux model should accept xhigh")
	}
	m.Name = "changed"
	if Model().Name == "changed" {
		t.Error("Model returned shared data")
	}
}

func TestEcho(t *testing.T) {
	toolTurn := llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.ToolCall("c1", "bash", json.RawMessage(`{"command":"ls"}`))}}
	long := strings.Repeat("x", 250)
	tests := []struct {
		name     string
		ctx      *llm.Context
		thinking llm.ThinkingLevel
		model    *llm.Model
		// wantText is the final text; wantThinking whether a thinking
		// block comes first.
		wantText     string
		wantThinking bool
		wantCalls    []llm.Content // id, name, arguments
		wantStop     llm.StopReason
		minDeltas    int
	}{
		{
			name:     "echo",
			ctx:      ctxOf(user("hello there, world")),
			wantText: "You said: hello there, world", wantStop: llm.StopStop, minDeltas: 4,
		},
		{
			name:     "echo answers the last user message",
			ctx:      ctxOf(user("first"), llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("You said: first")}}, user("second")),
			wantText: "You said: second", wantStop: llm.StopStop,
		},
		{
			name:     "no user message",
			ctx:      ctxOf(),
			wantText: "You said nothing: there is no user message.", wantStop: llm.StopStop,
		},
		{
			name:     "thinking level makes it think",
			ctx:      ctxOf(user("ponder this")),
			thinking: llm.ThinkingHigh,
			wantText: "You said: ponder this", wantThinking: true, wantStop: llm.StopStop,
		},
		{
			name:     "thinking off",
			ctx:      ctxOf(user("ponder this")),
			thinking: llm.ThinkingOff,
			wantText: "You said: ponder this", wantStop: llm.StopStop,
		},
		{
			name:     "non-reasoning model clamps thinking away",
			ctx:      ctxOf(user("ponder this")),
			thinking: llm.ThinkingHigh,
			model:    &llm.Model{ID: "plain", Provider: "faux", API: llm.APIFaux},
			wantText: "You said: ponder this", wantStop: llm.StopStop,
		},
		{
			name:     "/think marker",
			ctx:      ctxOf(user("/think\nponder this")),
			wantText: "You said: ponder this", wantThinking: true, wantStop: llm.StopStop,
		},
		{
			name:      "/bash calls bash",
			ctx:       ctxOf(user("list the files\n/bash ls -la \"my dir\"")),
			wantText:  "Calling bash.",
			wantCalls: []llm.Content{llm.ToolCall("faux_1_1", "bash", json.RawMessage(`{"command":"ls -la \"my dir\""}`))},
			wantStop:  llm.StopToolUse,
		},
		{
			name:      "/tool with arguments and thinking",
			ctx:       ctxOf(user(`/tool read {"path": "a.txt", "limit": 10}` + "\n/tool ls")),
			thinking:  llm.ThinkingLow,
			wantText:  "Calling read, ls.",
			wantCalls: []llm.Content{llm.ToolCall("faux_1_1", "read", json.RawMessage(`{"path":"a.txt","limit":10}`)), llm.ToolCall("faux_1_2", "ls", json.RawMessage(`{}`))},
			wantStop:  llm.StopToolUse, wantThinking: true,
		},
		{
			name:     "/tool with broken JSON explains instead of calling",
			ctx:      ctxOf(user(`/tool read {"path": `)),
			wantText: `the arguments of /tool read are not a JSON object: {"path":` + "\nYou said nothing.",
			wantStop: llm.StopStop,
		},
		{
			name: "tool result is summarised",
			ctx: ctxOf(user("/bash ls"), toolTurn,
				llm.Message{Role: llm.RoleToolResult, ToolCallID: "c1", ToolName: "bash", Content: []llm.Content{llm.Text("a.txt\nb.txt")}}),
			wantText: "Tool bash returned: a.txt\nb.txt", wantStop: llm.StopStop,
		},
		{
			name: "long tool results are cut at 200 characters, one line per result",
			ctx: ctxOf(user("go"), toolTurn,
				llm.Message{Role: llm.RoleToolResult, ToolName: "bash", Content: []llm.Content{llm.Text(long)}},
				llm.Message{Role: llm.RoleToolResult, ToolName: "read", Content: []llm.Content{llm.Text("ok")}}),
			wantText: "Tool bash returned: " + long[:200] + "...\nTool read returned: ok", wantStop: llm.StopStop,
		},
		{
			name:     "images are mentioned",
			ctx:      ctxOf(llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text("look"), llm.Image("aGk=", "image/png")}}),
			wantText: "You said: look [1 image(s) attached]", wantStop: llm.StopStop,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tt.model
			if m == nil {
				m = Model()
			}
			p := New(Options{})
			evs, msg, err := run(t, context.Background(), p, m, tt.ctx, &llm.StreamOptions{Thinking: tt.thinking})
			if err != nil {
				t.Fatalf("stream error: %v", err)
			}
			if got := msg.TextContent(); got != tt.wantText {
				t.Errorf("text = %q, want %q", got, tt.wantText)
			}
			if msg.StopReason != tt.wantStop {
				t.Errorf("stop = %s, want %s", msg.StopReason, tt.wantStop)
			}
			hasThinking := len(msg.Content) > 0 && msg.Content[0].Type == llm.ContentThinking && msg.Content[0].Thinking != ""
			if hasThinking != tt.wantThinking {
				t.Errorf("thinking block = %v, want %v (content %+v)", hasThinking, tt.wantThinking, msg.Content)
			}
			if n := count(evs, llm.EventTextDelta); n < tt.minDeltas {
				t.Errorf("%d text deltas, want at least %d", n, tt.minDeltas)
			}
			var ends []llm.Content
			for _, e := range evs {
				if e.Type == llm.EventToolCallEnd {
					ends = append(ends, *e.ToolCall)
				}
			}
			if len(ends) != len(tt.wantCalls) {
				t.Fatalf("%d toolcall_end events, want %d", len(ends), len(tt.wantCalls))
			}
			for i, want := range tt.wantCalls {
				got := ends[i]
				if got.ID != want.ID || got.Name != want.Name || string(got.Arguments) != string(want.Arguments) {
					t.Errorf("toolcall_end %d = %s %s %s, want %s %s %s", i, got.ID, got.Name, got.Arguments, want.ID, want.Name, want.Arguments)
				}
				if calls := msg.ToolCalls(); string(calls[i].Arguments) != string(want.Arguments) {
					t.Errorf("final arguments %s, want %s", calls[i].Arguments, want.Arguments)
				}
			}
			if len(tt.wantCalls) > 0 && count(evs, llm.EventToolCallDelta) == 0 {
				t.Error("tool arguments were not streamed as deltas")
			}
			if (msg.Usage.Input <= 0) != (len(tt.ctx.Messages) == 0) || msg.Usage.Output <= 0 || msg.Usage.TotalTokens != msg.Usage.Input+msg.Usage.Output {
				t.Errorf("usage = %+v", msg.Usage)
			}
			if msg.Provider != m.Provider || msg.Model != m.ID || msg.API != m.API || msg.ResponseID != "faux-1" {
				t.Errorf("message identity = %s %s %s %s", msg.Provider, msg.Model, msg.API, msg.ResponseID)
			}
		})
	}
}

func TestUsageEstimate(t *testing.T) {
	c := &llm.Context{SystemPrompt: "abcd", Messages: []llm.Message{user("hello")}} // 9 characters in
	_, msg, err := run(t, context.Background(), New(Options{}), Model(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	// "You said: hello" is 15 characters out.
	want := llm.Usage{Input: 3, Output: 4, TotalTokens: 7}
	if msg.Usage != want {
		t.Errorf("usage = %+v, want %+v", msg.Usage, want)
	}
}

func TestScripted(t *testing.T) {
	tests := []struct {
		name      string
		resp      Response
		wantText  string
		wantStop  llm.StopReason
		wantKind  llm.ErrorKind // empty: no error
		wantMsg   string        // errorMessage
		wantUsage *llm.Usage
		check     func(t *testing.T, evs []llm.Event, msg *llm.Message)
	}{
		{
			name:      "text with usage",
			resp:      Response{Text: "scripted answer", Usage: llm.Usage{Input: 10, Output: 5, CacheRead: 2}},
			wantText:  "scripted answer",
			wantStop:  llm.StopStop,
			wantUsage: &llm.Usage{Input: 10, Output: 5, CacheRead: 2, TotalTokens: 17},
		},
		{
			name:     "thinking, text and tool calls",
			resp:     Response{Thinking: "hmm", Text: "editing", ToolCalls: []ToolCall{{ID: "t1", Name: "edit", Args: `{"path":"a","old":"x","new":"y"}`}, {Name: "ls"}}},
			wantText: "editing",
			wantStop: llm.StopToolUse,
			check: func(t *testing.T, evs []llm.Event, msg *llm.Message) {
				want := []llm.ContentType{llm.ContentThinking, llm.ContentText, llm.ContentToolCall, llm.ContentToolCall}
				for i, c := range msg.Content {
					if i >= len(want) || c.Type != want[i] {
						t.Fatalf("content types %+v, want %v", msg.Content, want)
					}
				}
				calls := msg.ToolCalls()
				if calls[0].ID != "t1" || string(calls[0].Arguments) != `{"path":"a","old":"x","new":"y"}` {
					t.Errorf("call 0 = %+v", calls[0])
				}
				if calls[1].ID != "faux_1_2" || string(calls[1].Arguments) != `{}` {
					t.Errorf("call 1 = %+v", calls[1])
				}
			},
		},
		{
			name:     "stop reason length",
			resp:     Response{Text: "cut", Stop: llm.StopLength},
			wantText: "cut",
			wantStop: llm.StopLength,
		},
		{
			name:     "error after content",
			resp:     Response{Text: "partial answer", Err: &llm.Error{Kind: llm.ErrRateLimit, Status: 429, Message: "slow down", RetryAfter: time.Second}},
			wantText: "partial answer",
			wantStop: llm.StopError,
			wantKind: llm.ErrRateLimit,
			wantMsg:  "429 slow down",
		},
		{
			name:     "error without content",
			resp:     Response{Err: &llm.Error{Kind: llm.ErrContextOverflow, Status: 400, Message: "prompt is too long"}},
			wantStop: llm.StopError,
			wantKind: llm.ErrContextOverflow,
			wantMsg:  "400 prompt is too long",
		},
		{
			name:     "stop error without Err",
			resp:     Response{Text: "x", Stop: llm.StopError},
			wantText: "x",
			wantStop: llm.StopError,
			wantKind: llm.ErrServer,
			wantMsg:  "scripted error",
		},
		{
			name:     "aborted kind",
			resp:     Response{Text: "x", Err: &llm.Error{Kind: llm.ErrAborted, Message: "Request was aborted"}},
			wantText: "x",
			wantStop: llm.StopAborted,
			wantKind: llm.ErrAborted,
			wantMsg:  "Request was aborted",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New(Options{})
			p.Push(tt.resp)
			evs, msg, err := run(t, context.Background(), p, Model(), ctxOf(user("ignored")), nil)
			if msg.TextContent() != tt.wantText || msg.StopReason != tt.wantStop {
				t.Errorf("text %q stop %s, want %q %s", msg.TextContent(), msg.StopReason, tt.wantText, tt.wantStop)
			}
			if tt.wantKind == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
			} else {
				if err == nil || err.Kind != tt.wantKind {
					t.Fatalf("error = %v, want kind %s", err, tt.wantKind)
				}
				if msg.ErrorMessage != tt.wantMsg {
					t.Errorf("errorMessage = %q, want %q", msg.ErrorMessage, tt.wantMsg)
				}
			}
			if tt.wantUsage != nil && msg.Usage != *tt.wantUsage {
				t.Errorf("usage = %+v, want %+v", msg.Usage, *tt.wantUsage)
			}
			if tt.check != nil {
				tt.check(t, evs, msg)
			}
			if p.Pending() != 0 {
				t.Errorf("response not consumed")
			}
			// The script is used up: the next request echoes.
			_, next, _ := run(t, context.Background(), p, Model(), ctxOf(user("after")), nil)
			if next.TextContent() != "You said: after" {
				t.Errorf("after the script: %q", next.TextContent())
			}
		})
	}
}

func TestScriptIsFIFO(t *testing.T) {
	p := New(Options{})
	p.Push(Response{Text: "one"}, Response{Text: "two"})
	p.Push(Response{Text: "three"})
	for _, want := range []string{"one", "two", "three", "You said: four"} {
		_, msg, err := run(t, context.Background(), p, Model(), ctxOf(user("four")), nil)
		if err != nil || msg.TextContent() != want {
			t.Errorf("got %q %v, want %q", msg.TextContent(), err, want)
		}
	}
}

func TestScriptedErrorIsNotShared(t *testing.T) {
	e := &llm.Error{Kind: llm.ErrServer}
	p := New(Options{})
	p.Push(Response{Err: e})
	run(t, context.Background(), p, Model(), ctxOf(user("x")), nil)
	if e.Message != "" {
		t.Errorf("the caller's *llm.Error was modified: %+v", e)
	}
}

func TestAbort(t *testing.T) {
	tests := []struct {
		name       string
		opts       Options
		resp       *Response
		cancelWhen func(ev llm.Event, partial *llm.Message) bool
		cancelNow  bool          // cancel before streaming
		cancelIn   time.Duration // cancel from another goroutine after this long
		wantText   func(string) bool
		wantMsg    string
	}{
		{
			name: "mid-stream keeps partial text",
			resp: &Response{Text: "one two three four five six"},
			cancelWhen: func(ev llm.Event, partial *llm.Message) bool {
				return ev.Type == llm.EventTextDelta && strings.HasSuffix(partial.TextContent(), "two ")
			},
			wantText: func(s string) bool { return s == "one two " },
			wantMsg:  "Request was aborted",
		},
		{
			name:     "during a chunk delay",
			opts:     Options{ChunkDelay: 10 * time.Second},
			resp:     &Response{Text: "one two three"},
			cancelIn: 50 * time.Millisecond,
			wantText: func(s string) bool { return s == "one " },
			wantMsg:  "Request was aborted",
		},
		{
			name:     "during the first-token delay",
			resp:     &Response{Text: "never", Delay: 10 * time.Second},
			cancelIn: 50 * time.Millisecond,
			wantText: func(s string) bool { return s == "" },
			wantMsg:  "Request was aborted.",
		},
		{
			name:      "before the stream starts",
			cancelNow: true,
			wantText:  func(s string) bool { return s == "" },
			wantMsg:   "Request was aborted.",
		},
	}
	for _, tt := range tests {
		// In a synctest bubble the delays and cancelIn are the bubble's
		// clock: the cancel lands inside the delay every time, at once.
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := New(tt.opts)
				if tt.resp != nil {
					p.Push(*tt.resp)
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if tt.cancelNow {
					cancel()
				}
				if tt.cancelIn > 0 {
					time.AfterFunc(tt.cancelIn, cancel)
				}
				start := time.Now()
				s := p.Stream(ctx, Model(), ctxOf(user("x")), nil)
				var evs []llm.Event
				for s.Next() {
					evs = append(evs, s.Event())
					if tt.cancelWhen != nil && tt.cancelWhen(s.Event(), s.Partial()) {
						cancel()
					}
				}
				checkSequence(t, evs)
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("abort took %s", d)
				}
				msg := s.Result()
				if msg.StopReason != llm.StopAborted || s.Err() == nil || s.Err().Kind != llm.ErrAborted {
					t.Fatalf("stop %s err %v, want aborted", msg.StopReason, s.Err())
				}
				if !tt.wantText(msg.TextContent()) {
					t.Errorf("partial text = %q", msg.TextContent())
				}
				if msg.ErrorMessage != tt.wantMsg {
					t.Errorf("errorMessage = %q, want %q", msg.ErrorMessage, tt.wantMsg)
				}
				if evs[len(evs)-1].Reason != llm.StopAborted {
					t.Errorf("final event reason %s", evs[len(evs)-1].Reason)
				}
			})
		})
	}
}

// TestDelays runs in a synctest bubble: the delays pass on the bubble's
// clock, so the sum is measured exactly and no real time is spent.
func TestDelays(t *testing.T) { synctest.Test(t, testDelays) }

func testDelays(t *testing.T) {
	p := New(Options{ChunkDelay: 5 * time.Millisecond})
	p.Push(Response{Text: "a b c", Delay: 40 * time.Millisecond})
	start := time.Now()
	_, msg, err := run(t, context.Background(), p, Model(), ctxOf(user("x")), nil)
	if err != nil || msg.TextContent() != "a b c" {
		t.Fatalf("%q %v", msg.TextContent(), err)
	}
	// first delay + 3 chunk delays (b, c, finish)
	if d := time.Since(start); d < 55*time.Millisecond {
		t.Errorf("stream took %s, want at least 55ms", d)
	}
}

func TestRequests(t *testing.T) {
	p := New(Options{})
	c := &llm.Context{
		SystemPrompt: "be brief",
		Messages:     []llm.Message{user("hi")},
		Tools:        []llm.Tool{{Name: "bash", Description: "run", Parameters: json.RawMessage(`{"type":"object"}`)}},
	}
	run(t, context.Background(), p, Model(), c, nil)
	c.Messages[0].Content[0].Text = "changed"
	c.Tools[0].Parameters[0] = 'X'
	c.Messages = append(c.Messages, user("again"))
	run(t, context.Background(), p, Model(), c, nil)

	reqs := p.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	if reqs[0].SystemPrompt != "be brief" || reqs[0].Messages[0].TextContent() != "hi" || len(reqs[0].Messages) != 1 || string(reqs[0].Tools[0].Parameters) != `{"type":"object"}` {
		t.Errorf("first request changed after the fact: %+v", reqs[0])
	}
	if len(reqs[1].Messages) != 2 || reqs[1].Messages[0].TextContent() != "changed" {
		t.Errorf("second request = %+v", reqs[1])
	}
	reqs[0].Messages[0].Content[0].Text = "mine"
	if p.Requests()[0].Messages[0].TextContent() != "hi" {
		t.Error("Requests hands out the provider's own copy")
	}
}

func TestDeterministic(t *testing.T) {
	c := ctxOf(user("same input\n/bash echo hi"))
	o := &llm.StreamOptions{Thinking: llm.ThinkingMedium}
	evs1, msg1, _ := run(t, context.Background(), New(Options{}), Model(), c, o)
	evs2, msg2, _ := run(t, context.Background(), New(Options{}), Model(), c, o)
	if !reflect.DeepEqual(evs1, evs2) {
		t.Errorf("events differ:\n%v\n%v", types(evs1), types(evs2))
	}
	msg1.Timestamp, msg2.Timestamp = 0, 0
	if !reflect.DeepEqual(msg1, msg2) {
		t.Errorf("messages differ:\n%+v\n%+v", msg1, msg2)
	}
}

func TestConcurrentUse(t *testing.T) {
	p := New(Options{})
	for i := 0; i < 10; i++ {
		p.Push(Response{Text: "scripted"})
	}
	done := make(chan string)
	for i := 0; i < 20; i++ {
		go func() {
			msg, err := llm.Collect(p.Stream(context.Background(), Model(), ctxOf(user("x")), nil))
			if err != nil {
				done <- "error: " + err.Error()
				return
			}
			done <- msg.TextContent()
		}()
	}
	scripted, echoed := 0, 0
	for i := 0; i < 20; i++ {
		switch got := <-done; got {
		case "scripted":
			scripted++
		case "You said: x":
			echoed++
		default:
			t.Errorf("unexpected answer %q", got)
		}
	}
	if scripted != 10 || echoed != 10 || len(p.Requests()) != 20 {
		t.Errorf("scripted %d echoed %d requests %d", scripted, echoed, len(p.Requests()))
	}
}

func TestWords(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"one", []string{"one"}},
		{"You said: hi there", []string{"You ", "said: ", "hi ", "there"}},
		{"  lead\nnext  ", []string{"  lead\n", "next  "}},
	}
	for _, tt := range tests {
		if got := words(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("words(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if strings.Join(words(tt.in), "") != tt.in {
			t.Errorf("words(%q) does not join back", tt.in)
		}
	}
	for _, s := range []string{"", "{}", `{"a":"héllo wörld"}`, "ab"} {
		if strings.Join(thirds(s), "") != s || len(thirds(s)) > 3 {
			t.Errorf("thirds(%q) = %q", s, thirds(s))
		}
	}
}
