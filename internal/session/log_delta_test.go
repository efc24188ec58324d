package session

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/llmtest"
	"github.com/agentd-dev/agentd/internal/llm/openaichat"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// streamedSession is a session whose model is the Chat Completions wire
// mock, streamed by the real decoder.
func streamedSession(t *testing.T, srv *wiremock.Server, mod func(*Config)) *Session {
	t.Helper()
	model := &llm.Model{ID: "mock-model", API: llm.APIOpenAICompletions, Provider: "mock", BaseURL: srv.OpenAIURL(),
		Input: []string{"text"}, ContextWindow: 1 << 20, MaxTokens: 4096}
	cfg := Config{Cwd: t.TempDir(), Model: model, Stream: openaichat.New(nil).Stream,
		Options: func(context.Context, *llm.Model) (llm.StreamOptions, error) {
			return llm.StreamOptions{APIKey: "k"}, nil
		}}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func pieces(n int, format string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(format, i%1000)
	}
	return out
}

// The event log keeps a streamed answer in a few bytes per delta beyond
// the delta's own text: thinking, text and tool-call argument deltas of
// four bytes each, streamed through the wire mock and the real decoder,
// cost the log at most 32 bytes apiece, the text included. The log's
// share is what the heap loses when the log is replaced by an empty one.
func TestEventLogKeepsLittlePerDelta(t *testing.T) {
	srv := llmtest.NewServer(t)
	args := append(append([]string{`{"p":"`}, pieces(600, "%03d,")...), `"}`)
	srv.Enqueue(
		wiremock.Script{Thinking: pieces(700, "k%03d"), Text: pieces(700, "%03d "),
			ToolCalls: []wiremock.ToolCall{{ID: "c1", Name: "nothing", Args: args}}},
		wiremock.Script{Text: pieces(500, "t%03d")},
	)
	s := streamedSession(t, srv, nil)
	if err := s.Prompt(UserMessage("go", nil), BehaviorNone); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	deltas := 0
	evs, _ := s.EventsSince(0)
	for _, ev := range evs {
		if ev.Type == EventType(agent.EventMessageUpdate) && strings.HasSuffix(string(ev.Agent.Update.Type), "_delta") {
			deltas++
		}
	}
	if deltas != 700+700+len(args)+500 {
		t.Fatalf("%d deltas logged", deltas)
	}
	evs = nil
	withLog := liveHeap()
	s.emitMu.Lock()
	s.events = newEventLog(0, 0, s.seq)
	s.emitMu.Unlock()
	perDelta := float64(int64(withLog)-int64(liveHeap())) / float64(deltas)
	t.Logf("the log kept %.1f bytes per delta", perDelta)
	// The figure is about 25–33 bytes, read off a heap that other parts
	// of the test also hold: the bound leaves room for that noise and
	// still catches a return to the hundreds a delta used to cost.
	if perDelta > 48 {
		t.Fatalf("the log keeps %.0f bytes per 4-byte delta, want at most 48", perDelta)
	}
}

func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Logging a delta allocates nothing (but for the log's occasional
// growth): no copy of its event, no copy of its text.
func TestLoggingADeltaDoesNotAllocate(t *testing.T) {
	s := streamedSession(t, llmtest.NewServer(t), nil)
	msg := &llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("")}}
	s.emit(Event{Type: EventType(agent.EventMessageStart), Agent: &agent.Event{Type: agent.EventMessageStart, Message: msg}})
	for _, typ := range []llm.EventType{llm.EventTextDelta, llm.EventThinkingDelta, llm.EventToolCallDelta} {
		ev := Event{Type: EventType(agent.EventMessageUpdate), Agent: &agent.Event{Type: agent.EventMessageUpdate, Message: msg,
			Update: &llm.Event{Type: typ, Delta: "abcd"}}}
		if n := testing.AllocsPerRun(10000, func() { s.emit(ev) }); n != 0 {
			t.Errorf("%s: %v allocations per logged delta", typ, n)
		}
	}
}

// A delta is kept compactly unless the compact entry cannot hold it: then
// it is kept whole, as any other event, and replayed all the same.
func TestDeltasTheEntryCannotHold(t *testing.T) {
	base := time.Now()
	delta := func(seq uint64, at time.Duration, index int, text string) Event {
		return Event{Seq: seq, Time: base.Add(at), Type: EventType(agent.EventMessageUpdate), Agent: &agent.Event{
			Type: agent.EventMessageUpdate, Update: &llm.Event{Type: llm.EventTextDelta, ContentIndex: index, Delta: text}}}
	}
	start := Event{Seq: 1, Time: base, Type: EventType(agent.EventTurnStart), Agent: &agent.Event{Type: agent.EventTurnStart}}
	tests := []struct {
		name  string
		ev    Event
		whole bool
	}{
		{"an ordinary delta", delta(2, 3*time.Millisecond, 1, "abcd"), false},
		{"at the largest content index", delta(2, 0, 0xffff, "abcd"), false},
		{"beyond it", delta(2, 0, 0x10000, "abcd"), true},
		{"the longest text", delta(2, 0, 0, strings.Repeat("x", 0xffff)), false},
		{"a longer one", delta(2, 0, 0, strings.Repeat("x", 0x10000)), true},
		{"65 s after the event before", delta(2, 65*time.Second, 0, "abcd"), false},
		{"66 s after", delta(2, 66*time.Second, 0, "abcd"), true},
		{"with something else set", func() Event { ev := delta(2, 0, 0, "abcd"); ev.Name = "x"; return ev }(), true},
		{"with an agent field set", func() Event { ev := delta(2, 0, 0, "abcd"); ev.Agent.ToolName = "x"; return ev }(), true},
		{"with content", func() Event { ev := delta(2, 0, 0, "abcd"); ev.Agent.Update.Content = "x"; return ev }(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newEventLog(0, 0, 0)
			l.add(start)
			l.add(tt.ev)
			if whole := l.whole.n == 2; whole != tt.whole {
				t.Fatalf("kept whole: %v, want %v", whole, tt.whole)
			}
			evs, ok := l.since(1)
			if !ok || len(evs) != 1 {
				t.Fatalf("since 1: %v, %d events", ok, len(evs))
			}
			checkReplayed(t, evs[0], logCopy(tt.ev))
		})
	}
}

// checkReplayed fails unless got is want, its time within half a
// millisecond.
func checkReplayed(t *testing.T, got, want Event) {
	t.Helper()
	if d := got.Time.Sub(want.Time); d > time.Millisecond/2 || d < -time.Millisecond/2 {
		t.Fatalf("seq %d: time off by %v", want.Seq, d)
	}
	got.Time, want.Time = time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("replayed\n%+v\nwant\n%+v", flat(got), flat(want))
	}
}

// flat shows an event with what its pointers point at.
func flat(ev Event) any {
	type view struct {
		Ev     Event
		Agent  agent.Event
		Update llm.Event
	}
	v := view{Ev: ev}
	if ev.Agent != nil {
		v.Agent = *ev.Agent
		v.Ev.Agent = nil
		if ev.Agent.Update != nil {
			v.Update = *ev.Agent.Update
			v.Agent.Update = nil
		}
	}
	return v
}

// The log keeps deltas of every kind mixed with whole events, dropping
// the oldest by either bound as a list of events with the same sizes
// would, and a replay from any cursor it can answer gives each event's
// log copy. Some deltas cannot be held by an entry (too long, or too long
// after the event before) and are kept whole; one stretch of large deltas
// passes through, and the text buffer shrinks back afterwards.
func TestEventLogMixedRing(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const size, maxBytes = 60, 6 << 10
	l := newEventLog(size, maxBytes, 100)
	type kept struct {
		ev   Event
		size int
	}
	var model []kept
	modelBytes := 0
	now := time.Now()
	kinds := []llm.EventType{llm.EventTextDelta, llm.EventThinkingDelta, llm.EventToolCallDelta}
	largest := 0 // the largest text buffer
	for seq := uint64(101); seq <= 4000; seq++ {
		gap := time.Duration(r.IntN(3000)) * time.Microsecond
		if r.IntN(100) == 0 {
			gap = 70 * time.Second
		}
		now = now.Add(gap)
		var ev Event
		compact := false
		switch pick := r.IntN(20); {
		case pick == 0 || seq == 101:
			ev = textEvent(r.IntN(2000))
		case pick == 1 && r.IntN(10) == 0:
			ev = Event{Type: EventType(agent.EventMessageUpdate), Agent: &agent.Event{Type: agent.EventMessageUpdate,
				Update: &llm.Event{Type: llm.EventToolCallDelta, ContentIndex: 2, Delta: strings.Repeat("{", 0x10000)}}}
		default:
			n := r.IntN(13)
			if seq >= 2000 && seq < 2050 {
				n = 30 << 10
			}
			text := strings.Repeat("é", n/2) + strings.Repeat("a", n%2)
			ev = Event{Type: EventType(agent.EventMessageUpdate), Agent: &agent.Event{Type: agent.EventMessageUpdate,
				Message: &llm.Message{}, Update: &llm.Event{Type: kinds[r.IntN(3)], ContentIndex: r.IntN(4), Delta: text}}}
			compact = gap < time.Minute
		}
		ev.Seq, ev.Time = seq, now
		evSize := eventSize(logCopy(ev))
		if compact {
			evSize = entryBytes + len(ev.Agent.Update.Delta)
		}
		for len(model) > 0 && (len(model) >= size || modelBytes+evSize > maxBytes) {
			modelBytes -= model[0].size
			model = model[1:]
		}
		model = append(model, kept{logCopy(ev), evSize})
		modelBytes += evSize
		l.add(ev)
		largest = max(largest, cap(l.text))
		if l.bytes != modelBytes || l.entries.n != len(model) {
			t.Fatalf("seq %d: %d events of %d bytes, want %d of %d", seq, l.entries.n, l.bytes, len(model), modelBytes)
		}
		if _, ok := l.since(model[0].ev.Seq - 2); ok {
			t.Fatalf("seq %d: a cursor before the oldest event %d was answered", seq, model[0].ev.Seq)
		}
		from := r.IntN(len(model) + 1)
		evs, ok := l.since(seq - uint64(len(model)-from))
		if !ok || len(evs) != len(model)-from {
			t.Fatalf("seq %d: since %d: %v, %d events", seq, seq-uint64(len(model)-from), ok, len(evs))
		}
		for i, ev := range evs {
			checkReplayed(t, ev, model[from+i].ev)
		}
	}
	if len(l.entries.buf) > size || len(l.whole.buf) > size {
		t.Fatalf("rings of %d and %d slots for at most %d events", len(l.entries.buf), len(l.whole.buf), size)
	}
	if c := cap(l.text); c > 16<<10 || largest < 30<<10 {
		t.Fatalf("%d bytes of text held in a buffer of %d (at most %d)", len(l.text)-l.textStart, c, largest)
	}
}

// The log is a run of consecutive seqs. An event that does not continue
// it (no caller emits one) starts the log over, so a cursor before it is
// too old rather than answered with a gap.
func TestEventLogSeqGap(t *testing.T) {
	l := newEventLog(0, 0, 0)
	for seq := uint64(1); seq <= 3; seq++ {
		l.add(Event{Seq: seq, Type: EventType(agent.EventTurnStart), Agent: &agent.Event{Type: agent.EventTurnStart}})
	}
	l.add(Event{Seq: 10, Type: EventType(agent.EventTurnEnd), Agent: &agent.Event{Type: agent.EventTurnEnd}})
	if evs, ok := l.since(9); !ok || len(evs) != 1 || evs[0].Seq != 10 {
		t.Fatalf("since 9: %v, %+v", ok, evs)
	}
	for _, after := range []uint64{0, 3, 8} {
		if _, ok := l.since(after); ok {
			t.Errorf("since %d was answered across the gap", after)
		}
	}
	if evs, ok := l.since(10); !ok || evs != nil {
		t.Fatalf("since the last event: %v, %v", ok, evs)
	}
}
