package pipeline

import (
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
)

// TestAdopt: outcomes another process recorded (a cluster node that owned
// a session before this one) answer replays here without running
// anything; a command that was in flight there answers interrupted; and a
// command in flight here keeps its own answer.
func TestAdopt(t *testing.T) {
	j := NewMemJournal()
	old := newHarness(t, j, nil)
	rename := Command{Type: "set_session_name", ID: "r1", SessionID: "s1", IdempotencyKey: "k1"}
	if r := old.p.Do(rename); !r.Success {
		t.Fatalf("set_session_name: %+v", r)
	}
	prompt := Command{Type: "prompt", ID: "p1", SessionID: "s1"}
	old.p.Submit(prompt, nil)
	<-old.started
	// The old owner dies with p1 running: what it left in its journal.
	j.mu.Lock()
	recs := Recover(j.recs, time.Now())
	j.mu.Unlock()

	h := newHarness(t, nil, nil)
	here := Command{Type: "prompt", ID: "p2", SessionID: "s1"}
	h.p.Submit(here, nil)
	<-h.started
	recs = append(recs, Record{Op: OpFinish, Command: "prompt", ID: "p2", Scope: "session:s1", Fingerprint: Fingerprint(nil, here),
		Response: &Response{ID: "p2", Command: "prompt", Success: true}, At: time.Now(), Expires: time.Now().Add(time.Hour)})
	if n := h.p.Adopt(recs); n != 2 {
		t.Fatalf("Adopt filed %d outcomes, want 2 (r1 and p1; p2 runs here)", n)
	}

	if r := h.p.Do(rename); !r.Success || !r.Replayed {
		t.Fatalf("replay of r1 by id: %+v", r)
	}
	byKey := rename
	byKey.ID = ""
	if r := h.p.Do(byKey); !r.Success || !r.Replayed {
		t.Fatalf("replay of r1 by idempotency key: %+v", r)
	}
	if r := h.p.Do(prompt); r.Err == nil || r.Err.Code != fault.Interrupted || !r.Replayed {
		t.Fatalf("replay of p1, in flight on the old owner: %+v", r)
	}
	if n := h.count("set_session_name") + h.count("prompt"); n != 1 {
		t.Fatalf("%d runs here, want 1 (p2 only)", n)
	}
	close(h.release)
	close(old.release)
	if r := h.p.Do(here); !r.Success || string(r.Data) != `"released"` {
		t.Fatalf("p2, run here: %+v", r)
	}
}
