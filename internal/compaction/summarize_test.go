package compaction

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
)

// recorder wraps stream functions, remembering the options of every
// request (faux records only the contexts) and sending split-turn prefix
// requests to their own provider, since the two requests of a split turn
// race and a single FIFO script could answer either.
type recorder struct {
	history, prefix *faux.Provider

	mu   sync.Mutex
	reqs []sent
}

type sent struct {
	ctx  llm.Context
	opts llm.StreamOptions
}

func newRecorder() *recorder {
	return &recorder{history: faux.New(faux.Options{}), prefix: faux.New(faux.Options{})}
}

func (r *recorder) stream(ctx context.Context, m *llm.Model, c *llm.Context, o *llm.StreamOptions) *llm.Stream {
	r.mu.Lock()
	r.reqs = append(r.reqs, sent{ctx: *c, opts: *o})
	r.mu.Unlock()
	if isPrefixRequest(c) {
		return r.prefix.Stream(ctx, m, c, o)
	}
	return r.history.Stream(ctx, m, c, o)
}

func (r *recorder) sent() []sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sent(nil), r.reqs...)
}

func isPrefixRequest(c *llm.Context) bool {
	return strings.Contains(userText(c), turnPrefixPrompt)
}

func userText(c *llm.Context) string {
	if len(c.Messages) == 0 {
		return ""
	}
	return c.Messages[0].TextContent()
}

// conversationPlan is a plan over a small conversation with one read and
// one edit.
func conversationPlan(t *testing.T) Plan {
	t.Helper()
	c := &conv{}
	c.add(user("Please fix the parser in parse.go"))
	c.add(asst("Reading it first.", call("c1", "read", map[string]string{"path": "parse.go"})))
	c.add(result("c1", "read", "package parse // SECRET-TOOL-OUTPUT"))
	c.add(asst("", call("c2", "edit", map[string]string{"path": "parse.go", "oldText": "a", "newText": "b"})))
	c.add(result("c2", "edit", "edited"))
	c.add(asst("Fixed."))
	c.add(user(tokens(25000)))
	p, err := Prepare(c.items, nil, DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSummarizeRequest(t *testing.T) {
	model := faux.Model()
	plan := conversationPlan(t)
	tests := []struct {
		name     string
		previous string
		custom   string
		want     []string // in the user message
		notWant  []string
	}{
		{
			name:    "first summary",
			want:    []string{"<transcript>", ">>> user\nPlease fix the parser in parse.go", ">>> assistant calls read\n{\"path\":\"parse.go\"}", ">>> result of read\npackage parse // SECRET-TOOL-OUTPUT", ">>> assistant\nFixed.", firstNotePrompt},
			notWant: []string{"<earlier-note>", updateNotePrompt, "The user asked for this compaction"},
		},
		{
			name:     "iterative",
			previous: "## Goal\nEarlier goal: port the lexer",
			want:     []string{"<earlier-note>\n## Goal\nEarlier goal: port the lexer\n</earlier-note>", updateNotePrompt},
			notWant:  []string{firstNotePrompt},
		},
		{
			name:   "custom instructions",
			custom: "  Focus on the parser bugs  ",
			want:   []string{"let them guide what the note emphasises:\nFocus on the parser bugs"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder()
			rec.history.Push(faux.Response{Text: "## Goal\nFix the parser", Thinking: "pondering"})
			p := plan
			p.PreviousSummary = tt.previous
			opts := llm.StreamOptions{APIKey: "k", Thinking: llm.ThinkingHigh}
			res, err := Summarize(context.Background(), rec.stream, model, opts, p, tt.custom)
			if err != nil {
				t.Fatal(err)
			}
			reqs := rec.sent()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.ctx.SystemPrompt != systemPrompt || len(r.ctx.Tools) != 0 || len(r.ctx.Messages) != 1 || r.ctx.Messages[0].Role != llm.RoleUser {
				t.Fatalf("request: system %q, %d tools, %d messages", r.ctx.SystemPrompt, len(r.ctx.Tools), len(r.ctx.Messages))
			}
			if r.opts.MaxTokens != 16384*4/5 || r.opts.Thinking != llm.ThinkingHigh || r.opts.APIKey != "k" {
				t.Errorf("options: max %d thinking %q key %q", r.opts.MaxTokens, r.opts.Thinking, r.opts.APIKey)
			}
			text := userText(&r.ctx)
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("request lacks %q", w)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(text, w) {
					t.Errorf("request has %q", w)
				}
			}
			// The kept message is not in the transcript.
			if strings.Contains(text, tokens(100)) {
				t.Error("the kept message was sent for summarising")
			}
			want := "## Goal\nFix the parser\n\n<modified-files>\nparse.go\n</modified-files>"
			if res.Summary != want {
				t.Errorf("summary = %q, want %q", res.Summary, want)
			}
			if res.FirstKeptEntryID != plan.FirstKeptEntryID || res.TokensBefore != plan.TokensBefore {
				t.Errorf("result %s/%d, plan %s/%d", res.FirstKeptEntryID, res.TokensBefore, plan.FirstKeptEntryID, plan.TokensBefore)
			}
			if len(res.Details.ReadFiles) != 0 || res.Details.ReadFiles == nil || len(res.Details.ModifiedFiles) != 1 {
				t.Errorf("details = %#v", res.Details)
			}
		})
	}
}

func TestSummarizeFileLists(t *testing.T) {
	rec := newRecorder()
	rec.history.Push(faux.Response{Text: "note"})
	plan := Plan{ToSummarize: []*llm.Message{user("hi")}, ReadFiles: []string{"a.go", "b.go"}, ModifiedFiles: []string{"c.go"}, Settings: DefaultSettings()}
	res, err := Summarize(context.Background(), rec.stream, faux.Model(), llm.StreamOptions{}, plan, "")
	if err != nil {
		t.Fatal(err)
	}
	want := "note\n\n<read-files>\na.go\nb.go\n</read-files>\n\n<modified-files>\nc.go\n</modified-files>"
	if res.Summary != want {
		t.Errorf("summary = %q, want %q", res.Summary, want)
	}
}

func TestSummarizeSplitTurn(t *testing.T) {
	history := []*llm.Message{user("earlier task"), asst("earlier answer")}
	prefix := []*llm.Message{user("huge task"), asst("", call("c1", "read", map[string]string{"path": "x.go"})), result("c1", "read", "x")}
	tests := []struct {
		name        string
		toSummarize []*llm.Message
		previous    string
		wantHistory string
		wantReqs    int
	}{
		{"history and prefix", history, "", "HISTORY NOTE", 2},
		{"prefix only", nil, "", noHistory, 1},
		{"prefix only keeps the earlier summary", nil, "EARLIER NOTE", "EARLIER NOTE", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder()
			rec.history.Push(faux.Response{Text: "HISTORY NOTE"})
			rec.prefix.Push(faux.Response{Text: "PREFIX NOTE"})
			plan := Plan{ToSummarize: tt.toSummarize, TurnPrefix: prefix, SplitTurn: true, PreviousSummary: tt.previous, ReadFiles: []string{"x.go"}, ModifiedFiles: []string{}, Settings: DefaultSettings()}
			res, err := Summarize(context.Background(), rec.stream, faux.Model(), llm.StreamOptions{}, plan, "")
			if err != nil {
				t.Fatal(err)
			}
			want := tt.wantHistory + turnHeading + "PREFIX NOTE\n\n<read-files>\nx.go\n</read-files>"
			if res.Summary != want {
				t.Errorf("summary = %q, want %q", res.Summary, want)
			}
			reqs := rec.sent()
			if len(reqs) != tt.wantReqs {
				t.Fatalf("%d requests, want %d", len(reqs), tt.wantReqs)
			}
			for _, r := range reqs {
				text := userText(&r.ctx)
				if isPrefixRequest(&r.ctx) {
					if r.opts.MaxTokens != 16384/2 || !strings.Contains(text, ">>> user\nhuge task") || strings.Contains(text, "earlier task") {
						t.Errorf("prefix request: max %d, text %q", r.opts.MaxTokens, text)
					}
				} else if r.opts.MaxTokens != 16384*4/5 || !strings.Contains(text, "earlier task") || strings.Contains(text, "huge task") {
					t.Errorf("history request: max %d, text %q", r.opts.MaxTokens, text)
				}
			}
		})
	}
}

func TestSummarizeErrors(t *testing.T) {
	boom := &llm.Error{Kind: llm.ErrServer, Status: 500, Message: "upstream exploded"}
	split := Plan{ToSummarize: []*llm.Message{user("a")}, TurnPrefix: []*llm.Message{user("b")}, SplitTurn: true, Settings: DefaultSettings()}
	plain := Plan{ToSummarize: []*llm.Message{user("a")}, Settings: DefaultSettings()}
	tests := []struct {
		name            string
		plan            Plan
		history, prefix *faux.Response
		want            string
		wantLLM         *llm.Error
	}{
		{"model error", plain, &faux.Response{Err: boom}, nil, "Summarization failed: 500 upstream exploded", boom},
		{"empty answer", plain, &faux.Response{Thinking: "hmm"}, nil, "Summarization failed: the model returned no summary text", nil},
		{"prefix error", split, &faux.Response{Text: "ok", Delay: 5 * time.Second}, &faux.Response{Err: boom}, "Turn prefix summarization failed: 500 upstream exploded", boom},
		{"nothing to summarise", Plan{}, nil, nil, ErrNothingToCompact.Error(), nil},
	}
	for _, tt := range tests {
		// In a synctest bubble the 5s delay is the bubble's clock: a
		// failure that did not cancel the other request would show as 5s
		// taken, without the test waiting for it.
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := newRecorder()
				if tt.history != nil {
					rec.history.Push(*tt.history)
				}
				if tt.prefix != nil {
					rec.prefix.Push(*tt.prefix)
				}
				start := time.Now()
				_, err := Summarize(context.Background(), rec.stream, faux.Model(), llm.StreamOptions{}, tt.plan, "")
				if err == nil || err.Error() != tt.want {
					t.Fatalf("err = %v, want %q", err, tt.want)
				}
				// A failure cancels the other request instead of waiting for it.
				if d := time.Since(start); d > 2*time.Second {
					t.Errorf("took %v", d)
				}
				if tt.wantLLM != nil {
					e, ok := llm.AsError(err)
					if !ok || e.Kind != tt.wantLLM.Kind || e.Status != tt.wantLLM.Status {
						t.Errorf("llm error = %#v", e)
					}
				}
				if errors.Is(err, context.Canceled) {
					t.Error("a model error reads as a cancellation")
				}
			})
		})
	}
}

func TestSummarizeCancel(t *testing.T) {
	plans := map[string]Plan{
		"single": {ToSummarize: []*llm.Message{user("a")}, Settings: DefaultSettings()},
		"split":  {ToSummarize: []*llm.Message{user("a")}, TurnPrefix: []*llm.Message{user("b")}, SplitTurn: true, Settings: DefaultSettings()},
	}
	for name, plan := range plans {
		// The bubble's clock: the cancel comes 50ms into the minute-long
		// delays, every time, and no real time passes.
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := newRecorder()
				rec.history.Push(faux.Response{Text: "late", Delay: time.Minute})
				rec.prefix.Push(faux.Response{Text: "late", Delay: time.Minute})
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(50*time.Millisecond, cancel)
				start := time.Now()
				_, err := Summarize(ctx, rec.stream, faux.Model(), llm.StreamOptions{}, plan, "")
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("err = %v, want context.Canceled", err)
				}
				if d := time.Since(start); d > 2*time.Second {
					t.Errorf("returned after %v", d)
				}
			})
		})
	}
	t.Run("already cancelled", func(t *testing.T) {
		rec := newRecorder()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := Summarize(ctx, rec.stream, faux.Model(), llm.StreamOptions{}, plans["single"], "")
		if !errors.Is(err, context.Canceled) || len(rec.sent()) != 0 {
			t.Fatalf("err = %v after %d requests", err, len(rec.sent()))
		}
	})
}

func TestSummarizeFitsContextWindow(t *testing.T) {
	// A conversation of about 400k tokens (1.6 MB) for a 32k-token model.
	var msgs []*llm.Message
	for i := range 200 {
		msgs = append(msgs, user("step "+tokens(500)))
		msgs = append(msgs, asst(tokens(200), call("c", "bash", map[string]string{"command": tokens(100)})))
		msgs = append(msgs, result("c", "bash", tokens(1200)))
		if i == 0 {
			msgs[0] = user("THE ORIGINAL TASK")
		}
	}
	msgs = append(msgs, asst("THE LATEST STATE"))
	model := faux.Model()
	model.ContextWindow, model.MaxTokens = 32000, 4096
	for _, level := range []llm.ThinkingLevel{llm.ThinkingOff, llm.ThinkingHigh} {
		t.Run(string(level), func(t *testing.T) {
			rec := newRecorder()
			rec.history.Push(faux.Response{Text: "note"})
			opts := llm.StreamOptions{Thinking: level}
			plan := Plan{ToSummarize: msgs, PreviousSummary: strings.Repeat("earlier ", 2000), Settings: DefaultSettings()}
			if _, err := Summarize(context.Background(), rec.stream, model, opts, plan, ""); err != nil {
				t.Fatal(err)
			}
			r := rec.sent()[0]
			if r.opts.MaxTokens != 4096 {
				t.Errorf("MaxTokens = %d, want the model's 4096", r.opts.MaxTokens)
			}
			answer := r.opts.MaxTokens
			if level != llm.ThinkingOff {
				answer += r.opts.ThinkingBudget(level)
			}
			text := userText(&r.ctx)
			size := int64(len(text) + len(r.ctx.SystemPrompt))
			if limit := (model.ContextWindow - answer) * 3; size > limit {
				t.Errorf("request is %d bytes, over %d", size, limit)
			}
			if size < (model.ContextWindow-answer)*3/2 {
				t.Errorf("request is only %d bytes: the budget is not used", size)
			}
			for _, w := range []string{"THE ORIGINAL TASK", "THE LATEST STATE", "messages left out here to fit the request", updateNotePrompt} {
				if !strings.Contains(text, w) {
					t.Errorf("request lacks %q", w)
				}
			}
		})
	}
}

func TestRenderTranscript(t *testing.T) {
	code := 2
	msgs := []*llm.Message{
		user("hello"),
		{Role: llm.RoleUser, Content: []llm.Content{llm.Text("look"), llm.Image("x", "image/png")}},
		{Role: llm.RoleAssistant, Content: []llm.Content{{Type: llm.ContentThinking, Thinking: "let me think"}, llm.Text("sure"), llm.ToolCall("1", "read", []byte(`{"path":"a"}`))}},
		{Role: llm.RoleToolResult, ToolName: "read", IsError: true, Content: []llm.Content{llm.Text("no such file")}},
		{Role: llm.RoleBashExecution, Command: "make", Output: "fail", ExitCode: &code},
		{Role: llm.RoleBashExecution, Command: "secret", Output: "hidden", ExcludeFromContext: true},
		{Role: llm.RoleBashExecution, Command: "sleep 9", Cancelled: true},
		custom("remember"),
		{Role: llm.RoleBranchSummary, Summary: "tried X"},
	}
	want := strings.Join([]string{
		">>> user\nhello",
		">>> user\nlook\n[image]",
		">>> assistant (reasoning)\nlet me think",
		">>> assistant\nsure",
		">>> assistant calls read\n{\"path\":\"a\"}",
		">>> result of read (failed)\nno such file",
		">>> user ran the shell command: make\nfail\n(exit code 2)",
		">>> user ran the shell command: sleep 9\n(cancelled)",
		">>> note (note)\nremember",
		">>> summary of a branch of the conversation the user left\ntried X",
	}, "\n\n")
	if got := renderTranscript(msgs, 0); got != want {
		t.Errorf("transcript:\n%s\nwant:\n%s", got, want)
	}
}

func TestClip(t *testing.T) {
	long := strings.Repeat("a", 1500) + strings.Repeat("é", 500) + strings.Repeat("z", 1000)
	got := clip(long, 2000)
	if !strings.HasPrefix(got, strings.Repeat("a", 1500)) || !strings.HasSuffix(got, strings.Repeat("z", 500)) {
		t.Errorf("clip kept the wrong ends: %.40q...%.40q", got[:40], got[len(got)-40:])
	}
	if !strings.Contains(got, "[... 1000 characters left out ...]") {
		t.Errorf("clip note missing: %q", got[1500:1560])
	}
	if clip("short", 2000) != "short" || clip("abc", -1) != "abc" || clip("abcdef", 0) != "[6 characters left out]" {
		t.Error("clip edge cases")
	}
	// Never splits a character.
	for limit := 1; limit < 40; limit++ {
		if s := clip(strings.Repeat("漢", 30), limit); !strings.HasPrefix(s, "漢") && !strings.HasPrefix(s, "\n") {
			t.Fatalf("clip(%d) = %q", limit, s)
		}
	}
}
