package session_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/piwire"
	"github.com/agentd-dev/agentd/internal/session"
)

// logRecorder keeps, for every event emitted, what the event log kept of
// it before deltas were stored compactly: its log copy, taken while it is
// emitted (later its live message has changed). A replay must give
// exactly that, encoded byte for byte the same by the pi faces, with a
// time within half a millisecond.
type logRecorder struct {
	mu     sync.Mutex
	want   map[uint64]session.Event
	deltas map[string]int // delta events by type
	last   uint64
}

func newLogRecorder(s *session.Session) *logRecorder {
	r := &logRecorder{want: map[uint64]session.Event{}, deltas: map[string]int{}}
	s.Subscribe(func(ev session.Event) {
		c := session.LogCopy(ev)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.want[ev.Seq], r.last = c, ev.Seq
		if a := ev.Agent; a != nil && a.Update != nil && strings.HasSuffix(string(a.Update.Type), "_delta") {
			r.deltas[string(a.Update.Type)]++
		}
	})
	return r
}

// check fails unless evs are the events after `after`, up to the last one
// emitted when they were taken (at least upTo), as the log kept them.
func (r *logRecorder) check(t *testing.T, after, upTo uint64, evs []session.Event) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(evs) < int(upTo-after) {
		t.Fatalf("after %d: %d events, want at least %d", after, len(evs), upTo-after)
	}
	for i, got := range evs {
		want, ok := r.want[got.Seq]
		if got.Seq != after+1+uint64(i) || !ok {
			t.Fatalf("after %d: event %d has seq %d", after, i, got.Seq)
		}
		for _, delta := range []bool{true, false} {
			if g, w := piwire.AppendEvent(nil, got, delta), piwire.AppendEvent(nil, want, delta); !bytes.Equal(g, w) {
				t.Fatalf("seq %d encodes as\n%s\nwant\n%s", got.Seq, g, w)
			}
		}
		if d := got.Time.Sub(want.Time); d > time.Millisecond/2 || d < -time.Millisecond/2 {
			t.Fatalf("seq %d: time off by %v", got.Seq, d)
		}
		got.Time, want.Time = time.Time{}, time.Time{}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("seq %d: replayed %+v, want %+v", got.Seq, got, want)
		}
	}
}

// longAnswer is a run of two model answers: thinking, text and a tool
// call whose arguments come in many pieces, then more text, with
// multi-byte characters and characters JSON escapes.
func longAnswer(srv *wiremock.Server, n int) {
	var thinking, text, more []string
	for i := range n {
		thinking = append(thinking, fmt.Sprintf("k%d ", i))
		text = append(text, fmt.Sprintf("é%d\n", i))
		more = append(more, fmt.Sprintf("\"%d\" ", i))
	}
	args := []string{`{"path":`, `"`}
	for range n / 4 {
		args = append(args, "./")
	}
	args = append(args, `"}`)
	srv.Enqueue(
		wiremock.Script{Thinking: thinking, Text: text, ToolCalls: []wiremock.ToolCall{{ID: "c1", Name: "ls", Args: args}}},
		wiremock.Script{Text: more},
	)
}

// A replay from any cursor gives the events a live client saw, in the
// form the log always gave them: delta for delta, thinking, text and
// tool-call arguments, across several messages, whatever seq the session
// started from, when the ring has wrapped, and when the byte bound has
// dropped the start of a message (the replay then starts at a delta in
// its middle).
func TestReplayFromEveryCursor(t *testing.T) {
	tests := []struct {
		name     string
		firstSeq uint64
		size     int
		bytes    int
		all      bool // the log keeps the whole run
	}{
		{"whole run", 0, 0, 0, true},
		{"seqs continued from a restart", 1<<32 + 7, 0, 0, true},
		{"ring wrapped", 70000, 50, 0, false},
		{"byte bound", 0, 0, 4000, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(c *session.Config) {
				c.SessionsDir, c.FirstSeq, c.EventLogSize, c.EventLogBytes = "", tt.firstSeq, tt.size, tt.bytes
			})
			r := newLogRecorder(h.s)
			longAnswer(h.srv, 60)
			h.prompt("go")
			h.wait()
			if r.deltas["thinking_delta"] != 60 || r.deltas["text_delta"] != 120 || r.deltas["toolcall_delta"] != 18 {
				t.Fatalf("deltas streamed: %v", r.deltas)
			}
			head := h.s.Seq()
			if _, ok := h.s.EventsSince(head + 1); ok {
				t.Fatal("a cursor beyond the last event was answered")
			}
			oldest := head + 1 // the first seq the log can replay
			for after := head; after >= tt.firstSeq; after-- {
				evs, ok := h.s.EventsSince(after)
				if !ok {
					break
				}
				r.check(t, after, head, evs)
				oldest = after + 1
			}
			if got := oldest == tt.firstSeq+1; got != tt.all {
				t.Fatalf("the log reaches back to seq %d of %d..%d", oldest, tt.firstSeq+1, head)
			}
			for after := tt.firstSeq; after+1 < oldest; after++ {
				if _, ok := h.s.EventsSince(after); ok {
					t.Fatalf("cursor %d answered, but %d was too old", after, oldest-1)
				}
			}
			if tt.size == 0 {
				return
			}
			// The oldest event kept is a delta in the middle of the last
			// message.
			r.mu.Lock()
			first := r.want[oldest]
			r.mu.Unlock()
			if first.Type != "message_update" || first.Agent.Update.Type != "text_delta" || head-oldest+1 != uint64(tt.size) {
				t.Fatalf("the log keeps %d events from a %s", head-oldest+1, first.Type)
			}
		})
	}
}

// A replay taken while a message is still streaming, after the log's
// bound has dropped the message's start, starts at a delta in its middle
// and ends with the last delta streamed so far.
func TestReplayMidStream(t *testing.T) {
	tests := []struct {
		name        string
		size, bytes int
	}{
		{"ring wrapped", 40, 0},
		{"byte bound", 0, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(c *session.Config) { c.SessionsDir, c.EventLogSize, c.EventLogBytes = "", tt.size, tt.bytes })
			r := newLogRecorder(h.s)
			var text []string
			for i := range 200 {
				text = append(text, fmt.Sprintf("w%d ", i))
			}
			h.srv.Enqueue(wiremock.Script{Text: text, HangAfter: 120})
			h.prompt("go")
			h.waitEvent(func(ev session.Event) bool {
				return ev.Type == "message_update" && ev.Agent.Update.Delta == "w119 "
			})
			head := h.s.Seq()
			after := head
			for ; ; after-- {
				evs, ok := h.s.EventsSince(after)
				if !ok {
					break
				}
				r.check(t, after, head, evs)
			}
			oldest := after + 2
			r.mu.Lock()
			first := r.want[oldest]
			r.mu.Unlock()
			if first.Type != "message_update" || first.Agent.Update.Type != "text_delta" {
				t.Fatalf("the oldest event kept is a %s", first.Type)
			}
			if kept := head - oldest + 1; tt.size > 0 && kept != uint64(tt.size) || kept < 40 {
				t.Fatalf("%d events kept", kept)
			}
			h.s.Abort()
			h.wait()
		})
	}
}

// Replays and subscriptions from a cursor, taken while the session
// streams, are each a complete run of seqs up to where the session was
// and hold what the log kept (run with -race).
func TestReplayWhileStreaming(t *testing.T) {
	h := newHarness(t, func(c *session.Config) { c.SessionsDir, c.EventLogSize = "", 300 })
	r := newLogRecorder(h.s)
	longAnswer(h.srv, 400)
	h.prompt("go")
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.wait()
	}()
	rng := rand.New(rand.NewPCG(3, 4))
	// At least one replay overlaps the stream and ten are made in all
	// (the rest after the run, on a machine too busy to fit ten in it).
	replays, during := 0, 0
	for running := true; running || replays < 10; {
		select {
		case <-done:
			running = false
		default:
		}
		head := h.s.Seq()
		after := head - min(head, uint64(rng.IntN(300)))
		if rng.IntN(2) == 0 {
			evs, ok := h.s.EventsSince(after)
			if ok {
				r.check(t, after, head, evs)
				replays++
				if running {
					during++
				}
			}
			continue
		}
		var mu sync.Mutex
		var live []session.Event
		missed, ok, unsubscribe := h.s.SubscribeAfter(after, func(ev session.Event) {
			mu.Lock()
			live = append(live, ev)
			mu.Unlock()
		})
		time.Sleep(time.Millisecond)
		unsubscribe()
		if !ok {
			continue
		}
		replays++
		if running {
			during++
		}
		r.check(t, after, head, missed)
		// The live events continue the replay without a gap.
		mu.Lock()
		next := after + uint64(len(missed)) + 1
		for _, ev := range live {
			if ev.Seq != next {
				t.Fatalf("after a replay up to %d, the live events go on with %d", next-1, ev.Seq)
			}
			next++
		}
		mu.Unlock()
	}
	if during == 0 {
		t.Fatalf("no replay during the run")
	}
	evs, _ := h.s.EventsSince(h.s.Seq() - 300)
	r.check(t, h.s.Seq()-300, h.s.Seq(), evs)
}
