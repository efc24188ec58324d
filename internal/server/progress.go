package server

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/todo"
)

// The states a session reports to clients that follow its progress
// rather than its events: the engine's own states, except that an idle
// session that has run says how its last run ended.
const (
	StateIdle       = string(session.StateIdle)
	StateRunning    = string(session.StateRunning)
	StateSuspended  = string(session.StateSuspended)
	StateCompacting = string(session.StateCompacting)
	StateRetrying   = string(session.StateRetrying)
	StateCompleted  = string(session.OutcomeCompleted)
	StateFailed     = string(session.OutcomeFailed)
	StateCancelled  = string(session.OutcomeCancelled)
)

// Terminal reports whether state is how a run ended.
func Terminal(state string) bool {
	return state == StateCompleted || state == StateFailed || state == StateCancelled
}

// RunProgress is what one run has done so far (or did, once it ended).
type RunProgress struct {
	Started    time.Time
	Ended      time.Time // zero while it runs
	Turns      int
	ToolCalls  int
	ToolErrors int
	Usage      llm.Usage
	// FilesChanged are the paths the run's write and edit calls changed,
	// in the order first changed.
	FilesChanged []string
	// LastText is the run's last assistant text.
	LastText string
	// Outcome is set once the run ended.
	Outcome session.Outcome
	// Error is the model error the run failed with or is retrying.
	Error *RunError
}

// RunError is a failed model request, as a client needs it to decide
// what to do.
type RunError struct {
	Kind     llm.ErrorKind
	Status   int
	Message  string
	Provider string
	// Retrying: the session retries on its own (Attempt of MaxAttempts,
	// after Delay).
	Retrying    bool
	Attempt     int
	MaxAttempts int
	Delay       time.Duration
}

// Step is where a run is in its plan (the todo tool's list). Without a
// plan, Index counts turns and Total is 0.
type Step struct {
	ID      string
	Title   string
	Index   int
	Total   int
	Percent float64
}

// Status is a reading of where a session is, for faces that report
// progress: its state, its current or last run, its plan, and what it is
// doing in words.
type Status struct {
	State string
	// Seq is the last event the status reflects.
	Seq     uint64
	Updated time.Time
	Run     *RunProgress // nil before the first run
	Step    Step
	Plan    todo.Snapshot
	// Activity says in words what the session is doing.
	Activity string
	// Pending counts the interactions waiting on a person.
	Pending int
}

// Transition is one change of a session's state: the session's history
// of versions, numbered from 1.
type Transition struct {
	Version int
	Seq     uint64
	Time    time.Time
	Old     string
	New     string
	Reason  string
	Percent float64
	// Run is the run's record at a terminal transition.
	Run *RunProgress
	// EntryID is the transcript's last entry at a terminal transition
	// (the conversation as that run left it).
	EntryID string
}

// maxTransitions bounds the history kept per session.
const maxTransitions = 512

// tracker derives a session's Status and history from its events. It is
// fed on the session's emitting goroutine, before the event is fanned
// out, so a codec encoding a live event reads the status as of that
// event.
type tracker struct {
	// mu is a leaf: taken under a session's emitMu (observe) and under
	// Hosted.subMu (a codec reading the status); nothing under it.
	mu      sync.Mutex
	st      Status
	history []Transition
	version int
	lastErr *RunError
	// state is the engine's state; st.State shows how the last run ended
	// while the engine is idle.
	state session.State
	// entryID returns the transcript's last entry id.
	entryID func() string
	// rev counts the changes of the status a client sees.
	rev atomic.Uint64
}

func newTracker(s *session.Session) *tracker {
	t := &tracker{state: s.State(), entryID: s.LeafID}
	t.st.State = string(t.state)
	if o := s.LastOutcome(); t.state == session.StateIdle && o != "" {
		t.st.State = string(o)
	}
	t.st.Plan = s.Todo()
	t.st.Seq = s.Seq()
	t.st.Updated = time.Now()
	t.history = historyOf(s.Messages())
	t.version = len(t.history)
	if n := len(t.history); n > 0 && t.state == session.StateIdle {
		t.st.State = t.history[n-1].New
		t.st.Run = t.history[n-1].Run
	}
	t.st.Step = stepOf(t.st.Plan, t.st.Run, t.st.State)
	t.st.Activity = activityOf(t.st.State)
	return t
}

// historyOf rebuilds the runs of a conversation loaded from its
// transcript: each user message starts a run, which ends with the last
// message before the next one; how it ended is read from its last
// assistant message. It is what a restart leaves of the history.
func historyOf(msgs []*llm.Message) []Transition {
	var out []Transition
	var run *RunProgress
	var last *llm.Message
	prev := StateIdle
	end := func() {
		if run == nil {
			return
		}
		outcome := session.OutcomeCompleted
		if last != nil {
			switch last.StopReason {
			case llm.StopError:
				outcome = session.OutcomeFailed
				run.Error = &RunError{Message: last.ErrorMessage, Provider: last.Provider}
			case llm.StopAborted:
				outcome = session.OutcomeCancelled
			}
			run.Ended = time.UnixMilli(last.Timestamp)
		}
		run.Outcome = outcome
		out = append(out, Transition{Time: run.Ended, Old: StateRunning, New: string(outcome), Reason: reasonOf(string(outcome), run), Run: run})
		prev = string(outcome)
		run = nil
	}
	for _, m := range msgs {
		switch m.Role {
		case llm.RoleUser:
			end()
			run = &RunProgress{Started: time.UnixMilli(m.Timestamp)}
			out = append(out, Transition{Time: run.Started, Old: prev, New: StateRunning, Reason: "A prompt started a run"})
		case llm.RoleAssistant:
			if run == nil {
				continue
			}
			last = m
			run.Turns++
			run.Usage.Add(m.Usage)
			if t := strings.TrimSpace(m.TextContent()); t != "" {
				run.LastText = t
			}
			for _, c := range m.Content {
				if c.Type == llm.ContentToolCall {
					run.ToolCalls++
					if p := changedPath(c.Name, c.Arguments); p != "" && !slices.Contains(run.FilesChanged, p) {
						run.FilesChanged = append(run.FilesChanged, p)
					}
				}
			}
		case llm.RoleToolResult:
			if run != nil && m.IsError {
				run.ToolErrors++
			}
		}
	}
	end()
	if len(out) > maxTransitions {
		out = out[len(out)-maxTransitions:]
	}
	for i := range out {
		out[i].Version = i + 1
		if out[i].New == StateCompleted {
			out[i].Percent = 100
		}
	}
	return out
}

// changedPath is the file a write or edit call changes.
func changedPath(tool string, args json.RawMessage) string {
	if tool != "write" && tool != "edit" {
		return ""
	}
	var a struct {
		Path     string `json:"path"`
		FilePath string `json:"file_path"`
	}
	_ = json.Unmarshal(args, &a)
	if a.Path != "" {
		return a.Path
	}
	return a.FilePath
}

// observe updates the status with ev.
func (t *tracker) observe(ev session.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.update(ev) {
		t.rev.Add(1)
	}
}

// update reports whether the progress a client sees changed (state,
// step, counts or activity); t.mu is held.
func (t *tracker) update(ev session.Event) (changed bool) {
	st := &t.st
	st.Seq, st.Updated = ev.Seq, ev.Time
	switch ev.Type {
	case session.EventStateChanged:
		t.state = ev.State
		old := st.State
		next := string(ev.State)
		if ev.State == session.StateIdle && ev.Outcome != "" {
			next = string(ev.Outcome)
		}
		if next == StateRunning && (old == StateIdle || Terminal(old)) {
			st.Run = &RunProgress{Started: ev.Time}
			t.lastErr = nil
		}
		var run *RunProgress
		entry := ""
		if Terminal(next) && st.Run != nil {
			st.Run.Ended, st.Run.Outcome = ev.Time, ev.Outcome
			if ev.Outcome == session.OutcomeFailed && st.Run.Error == nil {
				st.Run.Error = t.lastErr
			}
			if st.Run.Error != nil {
				st.Run.Error.Retrying = false
			}
			r := *st.Run
			r.FilesChanged = slices.Clone(r.FilesChanged)
			run = &r
			entry = t.entryID()
		}
		st.State = next
		st.Step = stepOf(st.Plan, st.Run, st.State)
		st.Activity = activityOf(next)
		t.version++
		t.history = append(t.history, Transition{Version: t.version, Seq: ev.Seq, Time: ev.Time, Old: old, New: next,
			Reason: t.reason(old, next, ev), Percent: st.Step.Percent, Run: run, EntryID: entry})
		if len(t.history) > maxTransitions {
			t.history = slices.Delete(t.history, 0, len(t.history)-maxTransitions)
		}
		return true
	case session.EventTodoUpdated:
		if ev.Todo != nil {
			st.Plan = *ev.Todo
			st.Step = stepOf(st.Plan, st.Run, st.State)
			return true
		}
	case session.EventAutoRetryStart:
		e := t.lastErr
		if e == nil {
			e = &RunError{Message: ev.ErrorMessage}
		}
		e.Retrying, e.Attempt, e.MaxAttempts, e.Delay = true, ev.Attempt, ev.MaxAttempts, time.Duration(ev.DelayMs)*time.Millisecond
		t.lastErr = e
		if st.Run != nil {
			st.Run.Error = e
		}
		st.Activity = fmt.Sprintf("Retrying after a provider error (attempt %d of %d)", ev.Attempt, ev.MaxAttempts)
		return true
	case session.EventAutoRetryEnd:
		if ev.Success && st.Run != nil {
			st.Run.Error = nil
		}
	case session.EventCompactionStart:
		st.Activity = "Compacting the context"
		return true
	case session.EventInteractionRequested, session.EventInteractionResolved:
		if ev.Type == session.EventInteractionRequested {
			st.Pending++
			if ev.Interaction != nil {
				st.Activity = waitingFor(ev.Interaction.Request)
			}
		} else if st.Pending > 0 {
			st.Pending--
		}
		return true
	}
	if ev.Agent == nil || st.Run == nil {
		return false
	}
	a := ev.Agent
	run := st.Run
	switch a.Type {
	case agent.EventTurnEnd:
		run.Turns++
		st.Step = stepOf(st.Plan, run, st.State)
		return true
	case agent.EventMessageStart:
		if a.Message != nil && a.Message.Role == llm.RoleAssistant {
			st.Activity = "Waiting for the model"
			return true
		}
	case agent.EventMessageUpdate:
		if a.Update != nil {
			act := ""
			switch a.Update.Type {
			case llm.EventTextStart:
				act = "Writing"
			case llm.EventThinkingStart:
				act = "Thinking"
			case llm.EventToolCallStart:
				act = "Preparing a tool call"
			}
			if act != "" && act != st.Activity {
				st.Activity = act
				return true
			}
		}
	case agent.EventMessageEnd:
		m := a.Message
		if m == nil || m.Role != llm.RoleAssistant {
			return false
		}
		run.Usage.Add(m.Usage)
		if txt := strings.TrimSpace(m.TextContent()); txt != "" {
			run.LastText = txt
		}
		if a.Err != nil && m.StopReason == llm.StopError {
			t.lastErr = &RunError{Kind: a.Err.Kind, Status: a.Err.Status, Message: a.Err.Explained(), Provider: m.Provider}
		} else if m.StopReason == llm.StopError {
			t.lastErr = &RunError{Message: m.ErrorMessage, Provider: m.Provider}
		}
		return true
	case agent.EventToolExecutionStart:
		run.ToolCalls++
		st.Activity = "Running " + describeCall(a.ToolName, a.Args)
		return true
	case agent.EventToolExecutionEnd:
		if a.IsError {
			run.ToolErrors++
		} else if p := changedPath(a.ToolName, a.Args); p != "" && !slices.Contains(run.FilesChanged, p) {
			run.FilesChanged = append(run.FilesChanged, p)
		}
		return true
	}
	return false
}

// reason says in words why the state changed.
func (t *tracker) reason(old, next string, ev session.Event) string {
	switch next {
	case StateRunning:
		switch old {
		case StateSuspended:
			return "The input it waited for arrived; the run goes on"
		case StateRetrying:
			return "Retrying the model request"
		case StateCompacting:
			return "The context was compacted; the run goes on"
		}
		return "A prompt started a run"
	case StateSuspended:
		return t.st.Activity
	case StateCompacting:
		return "Compacting the context to make room"
	case StateRetrying:
		if e := t.lastErr; e != nil {
			return "The model request failed (" + e.Message + "); the session retries"
		}
		return "The model request failed; the session retries"
	case StateIdle:
		return "Ready"
	}
	return reasonOf(next, t.st.Run)
}

func reasonOf(state string, run *RunProgress) string {
	switch state {
	case StateCompleted:
		if run != nil {
			return fmt.Sprintf("The run completed after %d turn%s and %d tool call%s", run.Turns, plural(run.Turns), run.ToolCalls, plural(run.ToolCalls))
		}
		return "The run completed"
	case StateFailed:
		if run != nil && run.Error != nil && run.Error.Message != "" {
			return "The run failed: " + run.Error.Message
		}
		return "The run failed"
	case StateCancelled:
		return "The run was cancelled"
	}
	return ""
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func activityOf(state string) string {
	switch state {
	case StateIdle:
		return "Ready"
	case StateRunning:
		return "Working"
	case StateSuspended:
		return "Waiting for input"
	case StateCompacting:
		return "Compacting the context"
	case StateRetrying:
		return "Retrying after a provider error"
	case StateCompleted:
		return "Done"
	case StateFailed:
		return "Failed"
	case StateCancelled:
		return "Cancelled"
	}
	return state
}

func waitingFor(r interaction.Request) string {
	if r.Kind == interaction.KindApproval && r.Tool != nil {
		return "Waiting for approval to run " + describeCall(r.Tool.ToolName, r.Tool.Args)
	}
	q := r.Title
	if q == "" {
		q = r.Message
	}
	if q == "" {
		return "Waiting for an answer"
	}
	return "Waiting for an answer: " + clipRunes(q, 120)
}

// describeCall names a tool call by what it acts on: bash's command, a
// file tool's path.
func describeCall(name string, args json.RawMessage) string {
	var a struct {
		Command  string `json:"command"`
		Path     string `json:"path"`
		FilePath string `json:"file_path"`
		Pattern  string `json:"pattern"`
	}
	_ = json.Unmarshal(args, &a)
	for _, v := range []string{a.Command, a.Path, a.FilePath, a.Pattern} {
		if v = strings.TrimSpace(v); v != "" {
			return name + ": " + clipRunes(strings.Join(strings.Fields(v), " "), 120)
		}
	}
	return name
}

func clipRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return ClipUTF8(s, n) + "…"
}

// stepOf places a run in its plan: the first item in progress (or else
// pending) is the current step; completed items count whole, the one in
// progress half. Without a plan the step is the turn, and only a
// completed run is at 100%.
func stepOf(plan todo.Snapshot, run *RunProgress, state string) Step {
	if n := len(plan.Items); n > 0 {
		done, cur := 0.0, -1
		for i, it := range plan.Items {
			switch it.Status {
			case todo.Completed:
				done++
			case todo.InProgress:
				done += 0.5
				if cur < 0 || plan.Items[cur].Status != todo.InProgress {
					cur = i
				}
			default:
				if cur < 0 {
					cur = i
				}
			}
		}
		s := Step{Total: n, Percent: round1(100 * done / float64(n))}
		if cur < 0 {
			s.Index, s.ID, s.Title = n-1, fmt.Sprintf("step_%d", plan.Items[n-1].ID), plan.Items[n-1].Content
			s.Percent = 100
		} else {
			s.Index, s.ID, s.Title = cur, fmt.Sprintf("step_%d", plan.Items[cur].ID), plan.Items[cur].Content
		}
		if state == StateCompleted {
			s.Percent = 100
		}
		return s
	}
	s := Step{ID: "idle", Title: "Ready"}
	if run != nil {
		turn := run.Turns + 1
		if Terminal(state) {
			turn = max(run.Turns, 1)
		}
		s.Index, s.ID, s.Title = turn-1, fmt.Sprintf("turn_%d", turn), fmt.Sprintf("Turn %d", turn)
	}
	if state == StateCompleted {
		s.Percent = 100
	}
	return s
}

func round1(f float64) float64 { return float64(int(f*10+0.5)) / 10 }

// Status reads where the session is.
func (h *Hosted) Status() Status {
	t := h.track
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.st
	if st.Run != nil {
		r := *st.Run
		r.FilesChanged = slices.Clone(r.FilesChanged)
		if r.Error != nil {
			e := *r.Error
			r.Error = &e
		}
		st.Run = &r
	}
	st.Plan.Items = slices.Clone(st.Plan.Items)
	return st
}

// StatusRev changes whenever Status does (beyond its Seq): a cheap test
// of whether a client's view of the progress is stale.
func (h *Hosted) StatusRev() uint64 { return h.track.rev.Load() }

// History lists the session's state changes, oldest first: those of
// this process, after those rebuilt from the transcript when it was
// loaded.
func (h *Hosted) History() []Transition {
	t := h.track
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.history)
}

// TransitionAt is the state change recorded for event seq, for a face
// encoding a replayed state_changed.
func (h *Hosted) TransitionAt(seq uint64) (Transition, bool) {
	t := h.track
	t.mu.Lock()
	defer t.mu.Unlock()
	i, ok := slices.BinarySearchFunc(t.history, seq, func(tr Transition, seq uint64) int {
		switch {
		case tr.Seq < seq:
			return -1
		case tr.Seq > seq:
			return 1
		}
		return 0
	})
	if !ok {
		return Transition{}, false
	}
	return t.history[i], true
}
