package llmtest

import (
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
)

// CheckGrammar fails the test unless events follow the stream grammar
// every provider must keep: start first, then well-nested block events
// (each *_start before its deltas and its *_end, no block reopened), and
// exactly one done or error at the end, with every block closed at done.
func CheckGrammar(t testing.TB, events []llm.Event) {
	t.Helper()
	types := make([]string, len(events))
	for i, ev := range events {
		types[i] = string(ev.Type)
	}
	if len(events) < 2 || events[0].Type != llm.EventStart {
		t.Fatalf("stream must begin with start: %v", types)
	}
	last := events[len(events)-1].Type
	if last != llm.EventDone && last != llm.EventError {
		t.Fatalf("stream must end with done or error: %v", types)
	}
	open := map[int]string{}
	for _, ev := range events[1 : len(events)-1] {
		kind, step, _ := strings.Cut(string(ev.Type), "_")
		switch step {
		case "start":
			if _, dup := open[ev.ContentIndex]; dup {
				t.Fatalf("block %d started twice: %v", ev.ContentIndex, types)
			}
			open[ev.ContentIndex] = kind
		case "delta", "end":
			if open[ev.ContentIndex] != kind {
				t.Fatalf("%s for block %d which is not an open %s block: %v", ev.Type, ev.ContentIndex, kind, types)
			}
			if step == "end" {
				open[ev.ContentIndex] = "closed"
			}
		default:
			t.Fatalf("unexpected event %s in the middle: %v", ev.Type, types)
		}
	}
	if last == llm.EventDone {
		for i, k := range open {
			if k != "closed" {
				t.Fatalf("block %d still open at done: %v", i, types)
			}
		}
	}
}
