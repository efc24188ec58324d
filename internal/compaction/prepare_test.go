package compaction

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
)

func settings(keep int64) Settings {
	return Settings{Enabled: true, ReserveTokens: DefaultReserveTokens, KeepRecentTokens: keep}
}

// toolTurn adds a turn: a user message, then steps assistant messages,
// each calling one tool whose result is size tokens, then a final answer.
func toolTurn(c *conv, turn, steps, size int) {
	c.add(user(fmt.Sprintf("turn %d: %s", turn, tokens(10))))
	for s := range steps {
		id := fmt.Sprintf("t%d_%d", turn, s)
		c.add(asst("", call(id, "read", map[string]string{"path": fmt.Sprintf("f%d_%d.go", turn, s)})))
		c.add(result(id, "read", tokens(size)))
	}
	c.add(asst("done " + tokens(5)))
}

func TestPrepareCutsAtTurnBoundary(t *testing.T) {
	c := &conv{}
	for turn := range 6 {
		c.add(user(tokens(1000)))
		c.add(asst(fmt.Sprintf("answer %d %s", turn, tokens(1000))))
	}
	// Walking back, the assistant of turn 5 (1003 tokens) and its user
	// message (1000) reach the 2000-token budget: cut at that user message,
	// a turn boundary.
	p, err := Prepare(c.items, nil, settings(2000))
	if err != nil {
		t.Fatal(err)
	}
	if p.FirstKeptEntryID != c.id(10) || p.SplitTurn || len(p.TurnPrefix) != 0 {
		t.Fatalf("kept from %s split=%v, want %s not split", p.FirstKeptEntryID, p.SplitTurn, c.id(10))
	}
	if !slices.Equal(p.ToSummarize, messagesOf(c.items[:10])) {
		t.Errorf("ToSummarize has %d messages, want the first 10", len(p.ToSummarize))
	}
	if want := ContextTokens(messagesOf(c.items)); p.TokensBefore != want {
		t.Errorf("TokensBefore = %d, want %d", p.TokensBefore, want)
	}
}

func TestPrepareNeverCutsAtToolResult(t *testing.T) {
	tests := []struct {
		name              string
		keep              int64
		wantKept          int // index of the first kept item
		wantSplit         bool
		wantTurnPrefixLen int
	}{
		// Items: 0 user, then (assistant call, result) pairs at 1..20 (each
		// result 500 tokens), 21 final assistant. The result at 20 alone
		// exceeds 400: the nearest cut point at or after it is the final
		// assistant.
		{"budget reached at a result moves forward", 400, 21, true, 21},
		// 900 is reached at the result at index 18; the next cut point is
		// the assistant at 19, which keeps its call's result.
		{"keeps call and result together", 900, 19, true, 19},
		// 1016 is reached at the call at index 17 itself.
		{"cuts at a call", 1016, 17, true, 17},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &conv{}
			toolTurn(c, 0, 10, 500)
			p, err := Prepare(c.items, nil, settings(tt.keep))
			if err != nil {
				t.Fatal(err)
			}
			kept := indexOf(c.items, p.FirstKeptEntryID)
			if kept != tt.wantKept || p.SplitTurn != tt.wantSplit || len(p.TurnPrefix) != tt.wantTurnPrefixLen {
				t.Fatalf("kept from %d split=%v prefix=%d, want %d %v %d", kept, p.SplitTurn, len(p.TurnPrefix), tt.wantKept, tt.wantSplit, tt.wantTurnPrefixLen)
			}
			if c.items[kept].Message.Role == llm.RoleToolResult {
				t.Fatal("kept part begins with a tool result")
			}
		})
	}
}

func TestPrepareSplitTurn(t *testing.T) {
	c := &conv{}
	toolTurn(c, 0, 2, 100) // items 0..5: an earlier, small turn
	toolTurn(c, 1, 8, 800) // items 6..23: one huge turn
	p, err := Prepare(c.items, nil, settings(2000))
	if err != nil {
		t.Fatal(err)
	}
	if !p.SplitTurn {
		t.Fatal("not a split turn")
	}
	kept := indexOf(c.items, p.FirstKeptEntryID)
	if got := c.items[kept].Message.Role; got != llm.RoleAssistant {
		t.Fatalf("kept part begins with %s, want assistant", got)
	}
	if !slices.Equal(p.ToSummarize, messagesOf(c.items[:6])) {
		t.Errorf("ToSummarize = %d messages, want the 6 of the earlier turn", len(p.ToSummarize))
	}
	if !slices.Equal(p.TurnPrefix, messagesOf(c.items[6:kept])) || p.TurnPrefix[0] != c.items[6].Message {
		t.Errorf("TurnPrefix = %d messages, want items 6..%d starting with the turn's user message", len(p.TurnPrefix), kept-1)
	}
	// The files of both the history and the turn prefix are tracked.
	if !slices.Contains(p.ReadFiles, "f0_0.go") || !slices.Contains(p.ReadFiles, "f1_0.go") || slices.Contains(p.ReadFiles, "f1_7.go") {
		t.Errorf("ReadFiles = %v", p.ReadFiles)
	}
}

func TestPrepareSplitTurnOnly(t *testing.T) {
	// pi's own example: a single turn bigger than the budget, nothing before.
	c := &conv{}
	toolTurn(c, 0, 8, 800)
	p, err := Prepare(c.items, nil, settings(2000))
	if err != nil {
		t.Fatal(err)
	}
	if !p.SplitTurn || len(p.ToSummarize) != 0 || len(p.TurnPrefix) == 0 || p.TurnPrefix[0].Role != llm.RoleUser {
		t.Fatalf("split=%v history=%d prefix=%d", p.SplitTurn, len(p.ToSummarize), len(p.TurnPrefix))
	}
}

func TestPrepareCutAtTurnStarterIsNotSplit(t *testing.T) {
	for _, m := range []*llm.Message{bash("make", tokens(1500)), custom(tokens(1500)), {Role: llm.RoleBranchSummary, Summary: tokens(1500)}} {
		t.Run(string(m.Role), func(t *testing.T) {
			c := &conv{}
			c.add(user(tokens(3000))).add(asst(tokens(10))).add(m).add(asst(tokens(600)))
			p, err := Prepare(c.items, nil, settings(2000))
			if err != nil {
				t.Fatal(err)
			}
			if p.FirstKeptEntryID != c.id(2) || p.SplitTurn || len(p.TurnPrefix) != 0 || len(p.ToSummarize) != 2 {
				t.Fatalf("kept=%s split=%v prefix=%d history=%d", p.FirstKeptEntryID, p.SplitTurn, len(p.TurnPrefix), len(p.ToSummarize))
			}
		})
	}
}

func TestPrepareKeepsEntriesBeforeCut(t *testing.T) {
	c := &conv{}
	c.add(user(tokens(3000))).add(asst(tokens(10))).other().other().add(user(tokens(2500))).add(asst(tokens(10)))
	p, err := Prepare(c.items, nil, settings(2000))
	if err != nil {
		t.Fatal(err)
	}
	// The model change and label before the kept user message stay with it,
	// and the cut (at a user message) is not a split turn, whatever entry the
	// kept part now begins with.
	if p.FirstKeptEntryID != c.id(2) || p.SplitTurn || len(p.ToSummarize) != 2 {
		t.Fatalf("kept=%s split=%v history=%d", p.FirstKeptEntryID, p.SplitTurn, len(p.ToSummarize))
	}
}

func TestPrepareHugeTrailingToolResult(t *testing.T) {
	// pi finds no cut point at or after the result and keeps everything; agentd
	// cuts before the call.
	c := &conv{}
	c.add(user(tokens(3000))).add(asst(tokens(100))).add(user("go")).add(asst("", call("c1", "bash", map[string]string{"command": "cat big"}))).add(result("c1", "bash", tokens(30000)))
	p, err := Prepare(c.items, nil, settings(20000))
	if err != nil {
		t.Fatal(err)
	}
	if p.FirstKeptEntryID != c.id(3) || !p.SplitTurn || len(p.ToSummarize) != 2 || len(p.TurnPrefix) != 1 {
		t.Fatalf("kept=%s split=%v history=%d prefix=%d", p.FirstKeptEntryID, p.SplitTurn, len(p.ToSummarize), len(p.TurnPrefix))
	}
}

func TestPrepareDoesNotCutBetweenCallAndLateResult(t *testing.T) {
	// A bash message recorded between a call and its result is not a place
	// to cut, though its role would allow it.
	c := &conv{}
	c.add(user(tokens(3000)))
	c.add(asst("", call("c1", "bash", map[string]string{"command": "sleep"})))
	c.add(bash("ls", tokens(2500)))
	c.add(result("c1", "bash", tokens(10)))
	c.add(asst(tokens(10)))
	p, err := Prepare(c.items, nil, settings(2000))
	if err != nil {
		t.Fatal(err)
	}
	if p.FirstKeptEntryID != c.id(4) {
		t.Fatalf("kept from %s, want %s (after the result)", p.FirstKeptEntryID, c.id(4))
	}
}

// A conversation that fits in what would be kept is compacted as pi does
// it: everything is kept (from the first message, with the entries
// without a message before it), nothing is left to summarise, and the
// summary request still goes to the model.
func TestPrepareShortConversationKeepsEverything(t *testing.T) {
	small := &conv{}
	small.add(user(tokens(100))).add(asst(tokens(100)))
	oneBig := &conv{}
	oneBig.other().add(user(tokens(50000)))
	for _, tt := range []struct {
		name string
		c    *conv
	}{{"smaller than kept part", small}, {"one message bigger than kept part", oneBig}} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Prepare(tt.c.items, nil, DefaultSettings())
			if err != nil {
				t.Fatal(err)
			}
			if p.FirstKeptEntryID != tt.c.id(0) || len(p.ToSummarize) != 0 || p.SplitTurn {
				t.Fatalf("kept from %s (want %s), %d to summarise, split %v", p.FirstKeptEntryID, tt.c.id(0), len(p.ToSummarize), p.SplitTurn)
			}
			rec := newRecorder()
			rec.history.Push(faux.Response{Text: "note"})
			res, err := Summarize(context.Background(), rec.stream, faux.Model(), llm.StreamOptions{}, p, "")
			if err != nil {
				t.Fatal(err)
			}
			if res.Summary != "note" || res.FirstKeptEntryID != tt.c.id(0) || len(rec.reqs) != 1 {
				t.Errorf("summary %q, kept from %s, %d requests", res.Summary, res.FirstKeptEntryID, len(rec.reqs))
			}
		})
	}
}

func TestPrepareNothingToCompact(t *testing.T) {
	small := &conv{}
	small.add(user(tokens(100))).add(asst(tokens(100)))
	onlyResults := &conv{}
	onlyResults.add(result("x", "read", tokens(30000)))
	tests := []struct {
		name  string
		items []Item
		want  error
	}{
		{"empty", nil, ErrNothingToCompact},
		{"no cut point", onlyResults.items, ErrNothingToCompact},
		{"already compacted", append(slices.Clone(small.items), Item{EntryID: "c", Message: compactionMsg("s")}), ErrAlreadyCompacted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Prepare(tt.items, nil, DefaultSettings())
			if !errors.Is(err, tt.want) || !errors.Is(err, ErrNothingToCompact) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
	if ErrNothingToCompact.Error() != "Nothing to compact (session too small)" || ErrAlreadyCompacted.Error() != "Already compacted" {
		t.Error("error texts differ from pi's")
	}
}

func TestPrepareAfterPreviousCompaction(t *testing.T) {
	// e1..e4 were summarised by the compaction at e7, which kept e5 and e6.
	c := &conv{}
	c.add(user("old")).add(asst("old")).add(user("old")).add(asst("old"))
	c.add(user(tokens(2000))).add(asst(tokens(2000), call("w", "write", map[string]string{"path": "new.go"})))
	c.add(compactionMsg("earlier summary"))
	c.add(result("w", "write", "ok")).add(user(tokens(3000))).add(asst(tokens(10)))
	prev := &Previous{
		EntryID:          c.id(6),
		Summary:          "earlier summary\n\n<read-files>\nold.go\n</read-files>\n\n<modified-files>\nnew.go\n</modified-files>\n",
		FirstKeptEntryID: c.id(4),
		Details:          &Details{ReadFiles: []string{"old.go", "new.go"}, ModifiedFiles: []string{"gone.go"}},
	}

	p, err := Prepare(c.items, prev, settings(2000))
	if err != nil {
		t.Fatal(err)
	}
	// The span starts at the kept boundary; the compaction is neither
	// summarised nor a cut point.
	want := []*llm.Message{c.items[4].Message, c.items[5].Message, c.items[7].Message}
	if p.FirstKeptEntryID != c.id(8) || !slices.Equal(p.ToSummarize, want) {
		t.Fatalf("kept=%s history=%d messages", p.FirstKeptEntryID, len(p.ToSummarize))
	}
	if p.PreviousSummary != "earlier summary" {
		t.Errorf("PreviousSummary = %q, want the file lists stripped", p.PreviousSummary)
	}
	if !slices.Equal(p.ReadFiles, []string{"old.go"}) || !slices.Equal(p.ModifiedFiles, []string{"gone.go", "new.go"}) {
		t.Errorf("files = %v / %v", p.ReadFiles, p.ModifiedFiles)
	}
	// The context is the summary and everything since the boundary.
	ctxMsgs := append([]*llm.Message{compactionMsg(prev.Summary)}, messagesOf(c.items[4:6])...)
	ctxMsgs = append(ctxMsgs, messagesOf(c.items[7:])...)
	if wantTokens := ContextTokens(ctxMsgs); p.TokensBefore != wantTokens {
		t.Errorf("TokensBefore = %d, want %d", p.TokensBefore, wantTokens)
	}

	t.Run("span only", func(t *testing.T) {
		q, err := Prepare(c.items[4:], prev, settings(2000))
		if err != nil || q.FirstKeptEntryID != p.FirstKeptEntryID || !slices.Equal(q.ToSummarize, p.ToSummarize) || q.TokensBefore != p.TokensBefore {
			t.Fatalf("passing the span alone differs: %v", err)
		}
	})
	t.Run("kept entry missing", func(t *testing.T) {
		lost := *prev
		lost.FirstKeptEntryID = "gone"
		q, err := Prepare(c.items, &lost, settings(2000))
		if err != nil || !slices.Equal(q.ToSummarize, []*llm.Message{c.items[7].Message}) {
			t.Fatalf("want the span to start after the compaction, got %d messages (%v)", len(q.ToSummarize), err)
		}
	})
	t.Run("extension details kept out", func(t *testing.T) {
		ext := *prev
		ext.Details = nil
		q, err := Prepare(c.items, &ext, settings(2000))
		if err != nil {
			t.Fatal(err)
		}
		if q.PreviousSummary != prev.Summary || !slices.Equal(q.ModifiedFiles, []string{"new.go"}) || len(q.ReadFiles) != 0 {
			t.Errorf("summary %q files %v / %v", q.PreviousSummary, q.ReadFiles, q.ModifiedFiles)
		}
	})
	t.Run("compaction marker stops the kept entries", func(t *testing.T) {
		d := &conv{}
		d.add(user(tokens(3000))).add(asst(tokens(10))).add(nil).other().add(user(tokens(2500)))
		marker := *prev
		marker.EntryID, marker.FirstKeptEntryID = d.id(2), d.id(0)
		q, err := Prepare(d.items, &marker, settings(2000))
		if err != nil || q.FirstKeptEntryID != d.id(3) {
			t.Fatalf("kept from %s (%v), want %s: not before the compaction", q.FirstKeptEntryID, err, d.id(3))
		}
	})
}

func TestFileTracking(t *testing.T) {
	c := &conv{}
	c.add(user(tokens(10)))
	c.add(asst("", call("1", "read", map[string]string{"path": "a.go"}), call("2", "read", map[string]string{"path": "b.go"}),
		call("3", "edit", map[string]string{"path": "b.go", "oldText": "x", "newText": "y"}),
		call("4", "write", map[string]string{"path": "c.go", "content": "package c"}),
		call("5", "bash", map[string]string{"command": "cat d.go", "path": "d.go"}),
		call("6", "read", map[string]any{"path": 7}), call("7", "read", map[string]string{"file": "e.go"}),
		call("8", "read", map[string]string{"path": "a.go"})))
	for i := 1; i <= 8; i++ {
		c.add(result(fmt.Sprint(i), "read", "ok"))
	}
	c.add(user(tokens(30000)))
	p, err := Prepare(c.items, nil, DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.ReadFiles, []string{"a.go"}) || !slices.Equal(p.ModifiedFiles, []string{"b.go", "c.go"}) {
		t.Errorf("files = %v / %v, want [a.go] / [b.go c.go]", p.ReadFiles, p.ModifiedFiles)
	}
}

func TestParseDetails(t *testing.T) {
	tests := []struct {
		raw  string
		want *Details
	}{
		{``, nil},
		{`null`, nil},
		{`{"custom":true}`, nil},
		{`[1,2]`, nil},
		{`{"readFiles":["a","b"],"modifiedFiles":[]}`, &Details{ReadFiles: []string{"a", "b"}, ModifiedFiles: []string{}}},
		{`{"readFiles":["a",3,null,""],"modifiedFiles":"x"}`, &Details{ReadFiles: []string{"a"}, ModifiedFiles: []string{}}},
		{`{"readFiles":"x"}`, nil},
		{`{"readFiles":["a",3]}`, &Details{ReadFiles: []string{"a"}, ModifiedFiles: []string{}}},
	}
	for _, tt := range tests {
		got := ParseDetails([]byte(tt.raw))
		if (got == nil) != (tt.want == nil) || got != nil && (!slices.Equal(got.ReadFiles, tt.want.ReadFiles) || !slices.Equal(got.ModifiedFiles, tt.want.ModifiedFiles)) {
			t.Errorf("ParseDetails(%s) = %+v, want %+v", tt.raw, got, tt.want)
		}
	}
}

func TestStripFileLists(t *testing.T) {
	tests := []struct{ in, want string }{
		{"summary", "summary"},
		{"summary\n\n<read-files>\na\n</read-files>", "summary"},
		{"summary\n\n<read-files>\na\n</read-files>\n\n<modified-files>\nb\n</modified-files>\n", "summary"},
		{"summary\n\n<modified-files>\nb\n</modified-files>", "summary"},
		{"mentions </read-files> in passing", "mentions </read-files> in passing"},
		{"broken\n</read-files>", "broken\n</read-files>"},
	}
	for _, tt := range tests {
		if got := stripFileLists(tt.in); got != tt.want {
			t.Errorf("stripFileLists(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// randomPath builds a random, tool-heavy conversation, with the odd
// message-less entry, out-of-order results and messages recorded between a
// call and its result.
func randomPath(r *rand.Rand) *conv {
	c := &conv{}
	size := func() string { return tokens(r.IntN(1500) + 1) }
	nextID := 0
	for range r.IntN(30) + 1 {
		switch r.IntN(10) {
		case 0:
			c.add(bash("cmd", size()))
		case 1:
			c.add(custom(size()))
		case 2:
			c.add(&llm.Message{Role: llm.RoleBranchSummary, Summary: size()})
		default:
			c.add(user(size()))
		}
		if r.IntN(8) == 0 {
			c.other()
		}
		for range r.IntN(6) {
			var calls []llm.Content
			var ids []string
			for range r.IntN(4) {
				nextID++
				id := fmt.Sprintf("call%d", nextID)
				ids = append(ids, id)
				name := []string{"read", "write", "edit", "bash"}[r.IntN(4)]
				calls = append(calls, call(id, name, map[string]string{"path": fmt.Sprintf("f%d.go", r.IntN(20))}))
			}
			c.add(asst(size(), calls...))
			if r.IntN(3) == 0 {
				r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
			}
			for k, id := range ids {
				if k > 0 && r.IntN(10) == 0 {
					c.add(bash("interleaved", size()))
				}
				if r.IntN(15) == 0 {
					c.other()
				}
				c.add(result(id, "tool", size()))
			}
		}
		if r.IntN(2) == 0 {
			c.add(asst(size()))
		}
	}
	return c
}

func TestPrepareProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	compacted := 0
	for n := range 3000 {
		c := randomPath(r)
		keep := int64(r.IntN(25000))
		p, err := Prepare(c.items, nil, settings(keep))
		if errors.Is(err, ErrNothingToCompact) {
			continue
		}
		if err != nil {
			t.Fatalf("case %d: %v", n, err)
		}
		compacted++
		k := indexOf(c.items, p.FirstKeptEntryID)
		if k < 0 {
			t.Fatalf("case %d: kept entry %s not on the path", n, p.FirstKeptEntryID)
		}
		kept := c.items[k:]
		msgs := messagesOf(kept)
		if len(msgs) == 0 {
			t.Fatalf("case %d: nothing kept", n)
		}
		if msgs[0].Role == llm.RoleToolResult {
			t.Fatalf("case %d: kept part begins with a tool result", n)
		}
		// Every kept result's call is kept too.
		keptCalls := map[string]bool{}
		for _, m := range msgs {
			for _, tc := range m.ToolCalls() {
				keptCalls[tc.ID] = true
			}
			if m.Role == llm.RoleToolResult && !keptCalls[m.ToolCallID] {
				t.Fatalf("case %d: result of %s kept without its call", n, m.ToolCallID)
			}
		}
		// The plan partitions the conversation, in order.
		all := append(append(slices.Clone(p.ToSummarize), p.TurnPrefix...), msgs...)
		if !slices.Equal(all, messagesOf(c.items)) {
			t.Fatalf("case %d: summarised + prefix + kept is not the conversation", n)
		}
		if p.SplitTurn != (len(p.TurnPrefix) > 0) {
			t.Fatalf("case %d: SplitTurn=%v with %d prefix messages", n, p.SplitTurn, len(p.TurnPrefix))
		}
		if p.SplitTurn && (!startsTurn(p.TurnPrefix[0].Role) || msgs[0].Role == llm.RoleUser) {
			t.Fatalf("case %d: split turn prefix starts with %s, kept with %s", n, p.TurnPrefix[0].Role, msgs[0].Role)
		}
		if !slices.IsSorted(p.ReadFiles) || !slices.IsSorted(p.ModifiedFiles) {
			t.Fatalf("case %d: file lists not sorted", n)
		}
		for _, f := range p.ReadFiles {
			if slices.Contains(p.ModifiedFiles, f) {
				t.Fatalf("case %d: %s both read-only and modified", n, f)
			}
		}
	}
	if compacted < 1000 {
		t.Errorf("only %d of 3000 random conversations were compacted; the generator is too tame", compacted)
	}
}

func BenchmarkPrepare(b *testing.B) {
	// 2,000 messages: 100 turns of a user message, 9 tool calls with their
	// results and a final answer, about 400k tokens in all.
	build := func(usage bool) []Item {
		c := &conv{}
		for turn := range 100 {
			toolTurn(c, turn, 9, 400)
		}
		if len(c.items) != 2000 {
			b.Fatalf("%d messages", len(c.items))
		}
		if usage {
			for _, it := range c.items {
				if it.Message.Role == llm.RoleAssistant {
					it.Message.Usage = llm.Usage{Input: 150000, Output: 500}
				}
			}
		}
		return c.items
	}
	for _, tt := range []struct {
		name  string
		usage bool
	}{{"usage", true}, {"no-usage", false}} {
		b.Run(tt.name, func(b *testing.B) {
			items := build(tt.usage)
			s := DefaultSettings()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Prepare(items, nil, s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
