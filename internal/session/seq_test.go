package session_test

import (
	"sync"
	"testing"

	"github.com/agentd-dev/agentd/internal/session"
)

// A session reloaded by a host continues numbering where the host says,
// reserves seqs ahead before using them, and refuses cursors it cannot
// answer: older than its log, or beyond its last event.
func TestSeqContinuesAndReserves(t *testing.T) {
	var mu sync.Mutex
	var reserved []uint64
	h := newHarness(t, func(c *session.Config) {
		c.FirstSeq = 1000
		c.EventLogSize = 8
		c.ReserveSeq = func(next uint64) uint64 {
			mu.Lock()
			defer mu.Unlock()
			reserved = append(reserved, next)
			return next + 4 // small blocks, so the test crosses several
		}
	})
	if got := h.s.Seq(); got != 1000 {
		t.Fatalf("Seq before any event = %d, want 1000", got)
	}
	if evs, ok := h.s.EventsSince(1000); !ok || len(evs) != 0 {
		t.Fatalf("EventsSince(head) on a fresh load = %v, %v; want nothing, ok", evs, ok)
	}
	for _, c := range []uint64{0, 999, 1001} {
		if _, ok := h.s.EventsSince(c); ok {
			t.Errorf("EventsSince(%d) before any event: ok, want too old or future", c)
		}
	}
	h.prompt("hello")
	h.wait()
	head := h.s.Seq()
	if head <= 1000 {
		t.Fatalf("Seq after a run = %d, want above 1000", head)
	}
	h.mu.Lock()
	first := h.evs[0].Seq
	h.mu.Unlock()
	if first != 1001 {
		t.Errorf("first event seq = %d, want 1001", first)
	}
	mu.Lock()
	if len(reserved) == 0 || reserved[0] != 1001 {
		t.Errorf("reservations = %v, want the first at 1001", reserved)
	}
	for i, r := range reserved {
		if i > 0 && r != reserved[i-1]+5 {
			t.Errorf("reservations = %v, want one per block of 5", reserved)
			break
		}
	}
	if last := reserved[len(reserved)-1]; last+4 < head {
		t.Errorf("head %d beyond the last reservation %d", head, last+4)
	}
	mu.Unlock()
	if _, ok := h.s.EventsSince(head + 1); ok {
		t.Error("a cursor beyond the head must not be answered")
	}
	if _, ok := h.s.EventsSince(1000); ok && head-1000 > 8 {
		t.Error("a cursor older than the log must not be answered")
	}
	if evs, ok := h.s.EventsSince(head - 2); !ok || len(evs) != 2 {
		t.Errorf("EventsSince(head-2) = %d events, %v", len(evs), ok)
	}
}
