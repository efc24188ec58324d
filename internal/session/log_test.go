package session

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/llm"
)

// textEvent is a message_end event whose message carries n bytes of text.
func textEvent(n int) Event {
	m := &llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text(strings.Repeat("t", n))}}
	return Event{Type: EventType(agent.EventMessageEnd), Agent: &agent.Event{Type: agent.EventMessageEnd, Message: m}}
}

func TestEventLogBounds(t *testing.T) {
	one := eventSize(textEvent(1000))
	tests := []struct {
		name     string
		max      int
		maxBytes int
		sizes    []int // text bytes of each event, seq 1..n
		oldest   uint64
	}{
		{"count", 4, 1 << 30, []int{0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 7},
		{"bytes", 100, 3 * one, []int{1000, 1000, 1000, 1000, 1000, 1000}, 4},
		{"a huge event is kept while newest", 100, 3 * one, []int{1000, 1000, 1 << 20}, 3},
		{"and dropped by the next", 100, 3 * one, []int{1000, 1000, 1 << 20, 1000}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newEventLog(tt.max, tt.maxBytes, 0)
			for i, n := range tt.sizes {
				ev := textEvent(n)
				ev.Seq = uint64(i + 1)
				l.add(ev)
			}
			last := uint64(len(tt.sizes))
			if _, ok := l.since(tt.oldest - 2); ok && tt.oldest > 1 {
				t.Fatalf("a cursor before seq %d was accepted", tt.oldest)
			}
			evs, ok := l.since(tt.oldest - 1)
			if !ok || len(evs) != int(last-tt.oldest+1) || evs[0].Seq != tt.oldest || evs[len(evs)-1].Seq != last {
				t.Fatalf("since %d: ok %v, %d events", tt.oldest-1, ok, len(evs))
			}
		})
	}
}

// The ring grows, wraps and drops in any mix and still returns the
// newest events in order, with its byte count right.
func TestEventLogRing(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const max, maxBytes = 50, 40 << 10
	l := newEventLog(max, maxBytes, 0)
	var kept []Event
	keptBytes := 0
	for seq := uint64(1); seq <= 2000; seq++ {
		ev := textEvent(r.IntN(4 << 10))
		ev.Seq = seq
		size := eventSize(ev)
		for len(kept) > 0 && (len(kept) >= max || keptBytes+size > maxBytes) {
			keptBytes -= eventSize(kept[0])
			kept = kept[1:]
		}
		kept = append(kept, ev)
		keptBytes += size
		l.add(ev)
		if l.bytes != keptBytes || l.entries.n != len(kept) || l.bytes > maxBytes {
			t.Fatalf("seq %d: %d events of %d bytes, want %d of %d", seq, l.entries.n, l.bytes, len(kept), keptBytes)
		}
		got, ok := l.since(kept[0].Seq - 1)
		if !ok || len(got) != len(kept) {
			t.Fatalf("seq %d: since: ok %v, %d events", seq, ok, len(got))
		}
		for i := range got {
			if got[i].Seq != kept[i].Seq {
				t.Fatalf("seq %d: event %d has seq %d, want %d", seq, i, got[i].Seq, kept[i].Seq)
			}
		}
	}
	if len(l.entries.buf) > max || len(l.whole.buf) > max {
		t.Fatalf("rings of %d and %d slots for at most %d events", len(l.entries.buf), len(l.whole.buf), max)
	}
}
