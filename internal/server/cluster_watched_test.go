package server

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/session"
)

// A status tracked on a node that does not run the session starts from
// the owner's reading (sent as JSON) and goes on from the events after
// it, numbering its state changes after the owner's; an event the reading
// had taken in already changes nothing.
func TestStatusTrackerFromAReading(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	reading := Status{State: StateCompleted, Seq: 10, Updated: at, Run: &RunProgress{Started: at, Ended: at, Turns: 2, Outcome: session.OutcomeCompleted}}
	hist := []Transition{{Version: 7, Seq: 4, Old: StateIdle, New: StateRunning}, {Version: 8, Seq: 9, Old: StateRunning, New: StateCompleted}}
	b, err := json.Marshal(struct {
		S Status
		H []Transition
	}{reading, hist})
	if err != nil {
		t.Fatal(err)
	}
	var sent struct {
		S Status
		H []Transition
	}
	if err := json.Unmarshal(b, &sent); err != nil {
		t.Fatal(err)
	}
	tr := NewStatusTracker(sent.S, sent.H)
	if st := tr.Status(); st.State != StateCompleted || st.Seq != 10 || st.Run == nil || st.Run.Turns != 2 {
		t.Fatalf("seeded status %+v", st)
	}
	rev := tr.StatusRev()
	tr.Observe(session.Event{Type: session.EventStateChanged, Seq: 9, State: session.StateRunning, Previous: session.StateIdle})
	if tr.StatusRev() != rev || tr.Status().State != StateCompleted {
		t.Fatalf("an event the reading had taken in changed the status: %+v", tr.Status())
	}
	steps := []struct {
		ev      session.Event
		state   string
		version int
	}{
		{session.Event{Type: session.EventStateChanged, Seq: 12, Time: at, State: session.StateRunning, Previous: session.StateIdle}, StateRunning, 9},
		{session.Event{Type: session.EventStateChanged, Seq: 15, Time: at.Add(time.Second), State: session.StateIdle, Previous: session.StateRunning, Outcome: session.OutcomeCancelled}, StateCancelled, 10},
	}
	for _, s := range steps {
		tr.Observe(s.ev)
		if st := tr.Status(); st.State != s.state || st.Seq != s.ev.Seq {
			t.Errorf("after seq %d: status %s at %d, want %s at %d", s.ev.Seq, st.State, st.Seq, s.state, s.ev.Seq)
		}
		got, ok := tr.TransitionAt(s.ev.Seq)
		if !ok || got.Version != s.version || got.New != s.state {
			t.Errorf("transition at %d: %+v (found %v), want version %d to %s", s.ev.Seq, got, ok, s.version, s.state)
		}
	}
	if tr.StatusRev() == rev {
		t.Error("the status changed and its revision did not")
	}
	if end, _ := tr.TransitionAt(15); end.Run == nil || end.Run.Outcome != session.OutcomeCancelled || end.Run.Started != at {
		t.Errorf("the run's end carries %+v", end.Run)
	}
	if n := len(tr.History()); n != 4 {
		t.Errorf("history of %d transitions, want 4", n)
	}
}
