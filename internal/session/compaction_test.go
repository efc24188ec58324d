package session_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// summariser answers summary requests (they carry no tools) with a fixed
// summary and everything else by echoing.
func summariser(usage int64) wiremock.Handler {
	return func(r *wiremock.Request) wiremock.Script {
		if _, hasTools := r.JSON["tools"]; !hasTools {
			return wiremock.Script{Text: []string{"## Goal\nSUMMARY OF EARLIER WORK"}}
		}
		return wiremock.Script{Text: []string{"re: " + lastUserText(r) + " " + strings.Repeat("padding ", 40)}, Usage: &wiremock.Usage{Input: usage, Output: 50}}
	}
}

func smallKeep(c *session.Config) {
	c.Compaction.KeepRecentTokens = 60
}

func TestManualCompaction(t *testing.T) {
	h := newHarness(t, smallKeep)
	h.srv.Handle(summariser(100))
	for _, p := range []string{"one", "two", "three", "four"} {
		h.prompt(p)
		h.wait()
	}
	before := len(h.s.Messages())
	res, err := h.s.Compact(context.Background(), "focus on the numbers")
	if err != nil {
		t.Fatal(err)
	}
	msgs := h.s.Messages()
	if res.Summary == "" || !strings.Contains(res.Summary, "SUMMARY OF EARLIER WORK") || len(msgs) >= before || msgs[0].Role != llm.RoleCompactionSummary {
		t.Fatalf("compaction %+v; %d -> %d messages", res, before, len(msgs))
	}
	// The summary request carried the custom instructions.
	var sumReq string
	for _, r := range h.srv.Requests() {
		if _, ok := r.JSON["tools"]; !ok {
			sumReq = string(r.Body)
		}
	}
	if !strings.Contains(sumReq, "focus on the numbers") {
		t.Fatal("custom instructions not sent")
	}
	start := h.waitEvent(is("compaction_start"))
	end := h.waitEvent(is("compaction_end"))
	if start.Reason != "manual" || end.Compaction == nil || end.WillRetry || end.Aborted {
		t.Fatalf("events %+v %+v", start, end)
	}
	// The next prompt sends the summary, not the compacted messages.
	h.prompt("five")
	h.wait()
	body := string(h.srv.LastRequest(t).Body)
	if !strings.Contains(body, "SUMMARY OF EARLIER WORK") || strings.Contains(body, `"one"`) {
		t.Fatalf("request after compaction: %s", body)
	}
	// A reload builds the same context from the transcript.
	f, err := transcript.Open(h.s.File())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := len(f.Context(f.Leaf()).Messages); got != len(h.s.Messages()) {
		t.Fatalf("reloaded context %d messages, live %d", got, len(h.s.Messages()))
	}
	// Compaction is refused while a run is in progress.
	h.srv.Enqueue(wiremock.Script{Text: []string{"slow", "answer"}, Delay: 300 * time.Millisecond})
	h.prompt("six")
	if _, err := h.s.Compact(context.Background(), ""); err == nil {
		t.Fatal("compaction ran during a run")
	}
	h.wait()
}

// A compact command on a conversation that fits in what would be kept
// succeeds, as pi's does: the model writes the note, every message is
// kept after it, the transcript reloads to the same context, and a second
// compact right after says "Already compacted".
func TestCompactShortConversation(t *testing.T) {
	h := newHarness(t, func(*session.Config) {})
	h.srv.Handle(summariser(100))
	h.prompt("small")
	h.wait()
	before := h.s.Messages()
	res, err := h.s.Compact(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	msgs := h.s.Messages()
	if !strings.Contains(res.Summary, "SUMMARY OF EARLIER WORK") || len(msgs) != len(before)+1 || msgs[0].Role != llm.RoleCompactionSummary {
		t.Fatalf("compaction %+v; %d -> %d messages", res, len(before), len(msgs))
	}
	for i, m := range before {
		if msgs[i+1] != m {
			t.Fatalf("message %d was not kept", i)
		}
	}
	f, err := transcript.Open(h.s.File())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := len(f.Context(f.Leaf()).Messages); got != len(msgs) {
		t.Fatalf("reloaded context %d messages, live %d", got, len(msgs))
	}
	if _, err := h.s.Compact(context.Background(), ""); err == nil || err.Error() != "Already compacted" {
		t.Fatalf("second compact: %v, want Already compacted", err)
	}
}

func TestAutomaticCompaction(t *testing.T) {
	h := newHarness(t, func(c *session.Config) {
		smallKeep(c)
		c.Model.ContextWindow = 20000 // threshold 20000-16384 = 3616 tokens
	})
	h.srv.Handle(summariser(1000))
	h.prompt("one")
	h.wait()
	h.prompt("two")
	h.wait()
	if len(h.srv.Requests()) != 2 {
		t.Fatal("compacted below the threshold")
	}
	h.srv.Handle(summariser(5000))
	h.prompt("three")
	h.wait()
	start := h.waitEvent(is("compaction_start"))
	if start.Reason != "threshold" {
		t.Fatalf("reason %q", start.Reason)
	}
	if msgs := h.s.Messages(); msgs[0].Role != llm.RoleCompactionSummary {
		t.Fatalf("context not compacted: first %s", msgs[0].Role)
	}
	// Compaction happens after the run, before the session is idle.
	types := strings.Join(h.types(), " ")
	if !strings.HasSuffix(types, "agent_end state_changed:compacting compaction_start compaction_end state_changed:running state_changed:idle/completed") {
		t.Fatalf("events %s", types)
	}
}

func TestOverflowCompactsAndRetries(t *testing.T) {
	h := newHarness(t, smallKeep)
	h.srv.Handle(summariser(100))
	for _, p := range []string{"one", "two", "three"} {
		h.prompt(p)
		h.wait()
	}
	h.srv.Enqueue(wiremock.Script{Status: 400, ErrorType: "invalid_request_error", ErrorMessage: "This model's maximum context length is 128000 tokens"})
	h.prompt("four")
	h.wait()
	end := h.waitEvent(is("compaction_end"))
	if end.Reason != "overflow" || !end.WillRetry {
		t.Fatalf("compaction_end %+v", end)
	}
	text, _ := h.s.LastAssistantText()
	if !strings.HasPrefix(text, "re: four") {
		t.Fatalf("retry after compaction answered %q", text)
	}
	msgs := h.s.Messages()
	for _, m := range msgs {
		if m.StopReason == llm.StopError {
			t.Fatal("the overflow error stayed in the context")
		}
	}
}
