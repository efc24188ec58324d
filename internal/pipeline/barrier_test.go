package pipeline

import (
	"context"
	"testing"
)

// A barrier runs after the commands its lane had and before those
// submitted after it, in that session's lane only, with no lifecycle
// event; once the pipeline shuts down it is refused.
func TestBarrier(t *testing.T) {
	h := newHarness(t, nil, nil)
	p := h.p
	first := make(chan Response, 1)
	p.Submit(Command{ID: "p1", Type: "prompt", SessionID: "s"}, func(r Response) { first <- r })
	<-h.started // p1 holds the lane
	passed := make(chan struct{})
	if !p.Barrier("s", func() { close(passed) }) {
		t.Fatal("the barrier was refused")
	}
	after := make(chan Response, 1)
	p.Submit(Command{ID: "n1", Type: "set_session_name", SessionID: "s"}, func(r Response) { after <- r })
	// Another session's lane is not held up.
	other := make(chan Response, 1)
	p.Submit(Command{ID: "o1", Type: "get_messages", SessionID: "other"}, func(r Response) { other <- r })
	<-other
	select {
	case <-passed:
		t.Fatal("the barrier passed while the command before it ran")
	default:
	}
	close(h.release)
	<-first
	<-passed
	<-after
	if n := len(h.phases("")); n != 0 {
		t.Errorf("the barrier emitted %d lifecycle events", n)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p.Barrier("s", func() { t.Error("a barrier ran after the shutdown") }) {
		t.Error("a barrier was accepted after the shutdown")
	}
}

// Laned says which commands wait in a lane: not control commands, not
// those their handler's Bypass lets past, not invalid ones.
func TestLaned(t *testing.T) {
	h := newHarness(t, nil, nil)
	tests := []struct {
		cmd  Command
		want bool
	}{
		{Command{Type: "prompt", SessionID: "s"}, true},
		{Command{Type: "set_session_name", SessionID: "s"}, true},
		{Command{Type: "list_sessions"}, true},
		{Command{Type: "abort", SessionID: "s"}, false},
		{Command{Type: "get_state", SessionID: "s"}, false},
		{Command{Type: "prompt"}, false}, // no session: refused
		{Command{Type: "nosuch"}, false}, // unknown
	}
	for _, tc := range tests {
		if got := h.p.Laned(tc.cmd); got != tc.want {
			t.Errorf("Laned(%s %q) = %v, want %v", tc.cmd.Type, tc.cmd.SessionID, got, tc.want)
		}
	}
}
