package server

import (
	"context"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/todo"
)

func runPrompt(t *testing.T, h *Hosted, text string) {
	t.Helper()
	if err := h.Session().Prompt(session.UserMessage(text, nil), ""); err != nil {
		t.Fatal(err)
	}
	if err := h.Session().Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestStatusFollowsARun(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, Limits{})
	ctx := context.Background()
	h, err := s.Create(ctx, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st := h.Status(); st.State != StateIdle || st.Run != nil || st.Step.Percent != 0 {
		t.Fatalf("fresh status %+v", st)
	}
	rev := h.StatusRev()
	runPrompt(t, h, `plan it
/tool todo {"todos":[{"content":"read","status":"completed"},{"content":"write","status":"in_progress"},{"content":"test","status":"pending"},{"content":"ship","status":"pending"}]}
/tool write {"path":"a.txt","content":"x"}`)

	st := h.Status()
	if st.State != StateCompleted {
		t.Fatalf("state %q", st.State)
	}
	if h.StatusRev() == rev {
		t.Fatal("the status revision did not move")
	}
	r := st.Run
	if r == nil || r.Turns != 2 || r.ToolCalls != 2 || r.Outcome != session.OutcomeCompleted || r.Ended.IsZero() {
		t.Fatalf("run %+v", r)
	}
	// write is not among the test session's tools: the call fails, so
	// it changed nothing.
	if r.ToolErrors != 1 || len(r.FilesChanged) != 0 {
		t.Fatalf("tool errors %d, files %v", r.ToolErrors, r.FilesChanged)
	}
	if !strings.Contains(r.LastText, "Tool todo returned") {
		t.Fatalf("last text %q", r.LastText)
	}
	if st.Plan.Total != 4 || st.Step.Total != 4 || st.Step.Index != 1 || st.Step.Title != "write" || st.Step.Percent != 100 {
		t.Fatalf("plan %+v step %+v", st.Plan, st.Step)
	}
	if got := h.Status().Plan.Items[1].Status; got != todo.InProgress {
		t.Fatalf("plan item %v", got)
	}

	hist := h.History()
	if len(hist) != 2 || hist[0].Old != StateIdle || hist[0].New != StateRunning || hist[1].New != StateCompleted || hist[1].Run == nil || hist[1].EntryID == "" {
		t.Fatalf("history %+v", hist)
	}
	if tr, ok := h.TransitionAt(hist[1].Seq); !ok || tr.Version != 2 || !strings.Contains(tr.Reason, "2 turns and 2 tool calls") {
		t.Fatalf("transition at %d: %+v %v", hist[1].Seq, tr, ok)
	}

	// A second run starts from completed.
	runPrompt(t, h, "again")
	hist = h.History()
	if len(hist) != 4 || hist[2].Old != StateCompleted || hist[3].Version != 4 {
		t.Fatalf("history after a second run %+v", hist)
	}

	// After a crash the history is rebuilt from the transcript.
	id := h.ID()
	crash(s)
	s2 := e.start(t, Limits{})
	h2, err := s2.Session(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	hist = h2.History()
	if len(hist) != 4 || hist[1].New != StateCompleted || hist[1].Run.Turns != 2 || hist[1].Run.ToolCalls != 2 || hist[3].Version != 4 {
		t.Fatalf("history after restart %+v", hist)
	}
	if st := h2.Status(); st.State != StateCompleted || st.Run == nil {
		t.Fatalf("status after restart %+v", st)
	}
}

func TestStepWithoutPlan(t *testing.T) {
	cases := []struct {
		run   *RunProgress
		state string
		want  Step
	}{
		{nil, StateIdle, Step{ID: "idle", Title: "Ready"}},
		{&RunProgress{}, StateRunning, Step{ID: "turn_1", Title: "Turn 1"}},
		{&RunProgress{Turns: 2}, StateRunning, Step{ID: "turn_3", Title: "Turn 3", Index: 2}},
		{&RunProgress{Turns: 2}, StateCompleted, Step{ID: "turn_2", Title: "Turn 2", Index: 1, Percent: 100}},
		{&RunProgress{Turns: 2}, StateFailed, Step{ID: "turn_2", Title: "Turn 2", Index: 1}},
	}
	for _, tc := range cases {
		if got := stepOf(todo.Snapshot{}, tc.run, tc.state); got != tc.want {
			t.Errorf("stepOf(%+v, %s) = %+v, want %+v", tc.run, tc.state, got, tc.want)
		}
	}
}
