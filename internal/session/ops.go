package session

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/compaction"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/todo"
	"github.com/agentd-dev/agentd/internal/tool"
	"github.com/agentd-dev/agentd/internal/transcript"
)

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// ID is the session id (the transcript's).
func (s *Session) ID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.file.ID()
}

// File is the transcript's path, "" for an in-memory session.
func (s *Session) File() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.file.Path()
}

// Name is the session's display name, "" if none was set.
func (s *Session) Name() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.file.Name()
}

// SetName records a display name.
func (s *Session) SetName(name string) error {
	s.mu.Lock()
	f := s.file
	s.mu.Unlock()
	if _, err := f.AppendSessionInfo(name); err != nil {
		return fmt.Errorf("recording the session name: %w", err)
	}
	s.emit(Event{Type: EventSessionInfoChanged, Name: name})
	return nil
}

// Model is the model the next run uses.
func (s *Session) Model() *llm.Model {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.model
}

// SetModel switches the model for the next run. The thinking level is
// re-clamped to what the new model supports.
func (s *Session) SetModel(m *llm.Model) error {
	if m == nil {
		return fault.New(fault.Invalid, "no model given")
	}
	s.mu.Lock()
	f := s.file
	level := m.ClampThinking(s.thinking)
	changed := level != s.thinking
	s.mu.Unlock()
	// Recorded first: a change the file cannot keep is not made, as for
	// the other settings, so a refused change leaves nothing to undo.
	if _, err := f.AppendModelChange(m.Provider, m.ID); err != nil {
		return fmt.Errorf("recording the model change: %w", err)
	}
	s.mu.Lock()
	s.model, s.thinking = m, level
	s.mu.Unlock()
	s.agent.Update(func(c *agent.Config) { c.Model, c.Thinking = m, level })
	s.emit(Event{Type: EventModelChanged, Model: m})
	if changed {
		if _, err := f.AppendThinkingLevelChange(level); err != nil {
			return fmt.Errorf("recording the thinking level: %w", err)
		}
		s.emit(Event{Type: EventThinkingLevelChanged, ThinkingLevel: level})
	}
	return nil
}

// Thinking is the thinking level in force.
func (s *Session) Thinking() llm.ThinkingLevel {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.thinking
}

// SetThinking sets the thinking level, clamped to the model; it returns
// the level actually in force (the one before, when the change could not
// be recorded and so was not made).
func (s *Session) SetThinking(l llm.ThinkingLevel) (llm.ThinkingLevel, error) {
	s.mu.Lock()
	f := s.file
	level := s.model.ClampThinking(l)
	if l == llm.ThinkingOff {
		level = llm.ThinkingOff
	}
	was := s.thinking
	s.mu.Unlock()
	if level == was {
		return level, nil // as pi: nothing recorded, no event
	}
	if _, err := f.AppendThinkingLevelChange(level); err != nil {
		return was, fmt.Errorf("recording the thinking level: %w", err)
	}
	s.mu.Lock()
	s.thinking = level
	s.mu.Unlock()
	s.agent.Update(func(c *agent.Config) { c.Thinking = level })
	s.emit(Event{Type: EventThinkingLevelChanged, ThinkingLevel: level})
	return level, nil
}

// SetQueueModes sets how steering and follow-up messages are delivered
// (empty leaves a mode as it is).
func (s *Session) SetQueueModes(steering, followUp agent.QueueMode) {
	s.agent.Update(func(c *agent.Config) {
		if steering != "" {
			c.SteeringMode = steering
		}
		if followUp != "" {
			c.FollowUpMode = followUp
		}
	})
}

// SetAutoCompaction turns automatic compaction on or off.
func (s *Session) SetAutoCompaction(on bool) {
	s.mu.Lock()
	s.compact.Enabled = on
	s.mu.Unlock()
}

// SetAutoRetry turns automatic retry on or off.
func (s *Session) SetAutoRetry(on bool) {
	s.mu.Lock()
	s.retry.Enabled = on
	s.mu.Unlock()
}

// Settings reports the session's switchable settings.
type Settings struct {
	SteeringMode   agent.QueueMode
	FollowUpMode   agent.QueueMode
	AutoCompaction bool
	AutoRetry      bool
}

// Settings returns the current settings.
func (s *Session) Settings() Settings {
	c := s.agent.Config()
	s.mu.Lock()
	defer s.mu.Unlock()
	return Settings{SteeringMode: c.SteeringMode, FollowUpMode: c.FollowUpMode, AutoCompaction: s.compact.Enabled, AutoRetry: s.retry.Enabled}
}

// Messages returns the conversation in context (after any compaction).
func (s *Session) Messages() []*llm.Message { return s.agent.Messages() }

// PendingCount is the number of queued steering and follow-up messages.
func (s *Session) PendingCount() int { return s.agent.PendingCount() }

// ClearQueues empties the steering and follow-up queues and returns them.
func (s *Session) ClearQueues() (steering, followUp []*llm.Message) { return s.agent.ClearQueues() }

// LastAssistantText is the trimmed text of the last assistant message,
// skipping aborted ones without content, as pi's getLastAssistantText;
// ok is false when there is none or it has no text.
func (s *Session) LastAssistantText() (string, bool) {
	msgs := s.agent.Messages()
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Role != llm.RoleAssistant || (m.StopReason == llm.StopAborted && len(m.Content) == 0) {
			continue
		}
		text := strings.TrimSpace(m.TextContent())
		return text, text != ""
	}
	return "", false
}

// Stats are a session's counts, tokens and cost.
type Stats struct {
	SessionID         string
	SessionFile       string
	UserMessages      int
	AssistantMessages int
	ToolCalls         int
	ToolResults       int
	TotalMessages     int
	Tokens            llm.Usage // summed over assistant messages, cost included
	ContextTokens     int64     // estimated size of the context now
	ContextWindow     int64
	// ContextPercent is ContextTokens as a share of the window, 0-100.
	ContextPercent float64
	// ContextUnknown is set right after a compaction, until an answer
	// reports usage again (pi's contextUsage tokens/percent null).
	ContextUnknown bool
}

// Stats computes the session's statistics over the messages in context
// (after any compaction), as pi's getSessionStats does.
func (s *Session) Stats() Stats {
	s.mu.Lock()
	f, model := s.file, s.model
	s.mu.Unlock()
	msgs := s.agent.Messages()
	st := Stats{SessionID: f.ID(), SessionFile: f.Path(), ContextWindow: model.ContextWindow, TotalMessages: len(msgs)}
	st.ContextUnknown = contextUnknown(f.Branch(f.Leaf()))
	for _, m := range msgs {
		switch m.Role {
		case llm.RoleUser:
			st.UserMessages++
		case llm.RoleAssistant:
			st.AssistantMessages++
			st.ToolCalls += len(m.ToolCalls())
			st.Tokens.Add(m.Usage)
		case llm.RoleToolResult:
			st.ToolResults++
			st.Tokens.Add(spentBy(m))
		}
	}
	st.ContextTokens = compaction.ContextTokens(msgs)
	if st.ContextWindow > 0 {
		st.ContextPercent = float64(st.ContextTokens) * 100 / float64(st.ContextWindow)
	}
	return st
}

// contextUnknown reports whether the branch's latest compaction has no
// answer with usage after it, as pi's getContextUsage decides.
func contextUnknown(path []transcript.Entry) bool {
	last := -1
	for i, e := range path {
		if e.Type == transcript.TypeCompaction {
			last = i
		}
	}
	if last < 0 {
		return false
	}
	for i := len(path) - 1; i > last; i-- {
		e := path[i]
		if e.Type != transcript.TypeMessage || e.Message.Role != llm.RoleAssistant {
			continue
		}
		if m := e.Message; m.StopReason != llm.StopAborted && m.StopReason != llm.StopError {
			u := m.Usage
			return u.Input+u.Output+u.CacheRead+u.CacheWrite == 0
		}
	}
	return true
}

// Interactions lists the pending interactions.
func (s *Session) Interactions() []interaction.Request { return s.broker.Pending() }

// InteractionByID returns a pending interaction.
func (s *Session) InteractionByID(id string) (interaction.Request, bool) { return s.broker.Get(id) }

// Answer answers a pending interaction; the first answer wins and a late
// one gets an error saying how the interaction was resolved. Answering
// one of the requests the tool calls ending the conversation wait under
// when no run executes them (after a restart) starts the run that does,
// as Step would: the answered call is decided by the answer, the others
// keep waiting for theirs, and the model is asked when all have run.
func (s *Session) Answer(id string, r interaction.Response) error {
	s.parkMu.Lock()
	defer s.parkMu.Unlock()
	s.mu.Lock()
	var sl runSlot
	var took []parkedCall
	if !s.closed && slices.ContainsFunc(s.parked, func(p parkedCall) bool { return p.id == id }) {
		if s.runDone != nil {
			// A navigation is moving the conversation away from the call.
			s.mu.Unlock()
			return fault.New(fault.Busy, "the conversation is changing; look at its pending interactions again")
		}
		sl = s.takeSlotLocked()
		took = s.takeParkedLocked()
	}
	s.mu.Unlock()
	err := s.broker.Answer(id, r)
	if took == nil {
		return err
	}
	if err != nil {
		// Invalid: the request stays pending, still parked.
		s.mu.Lock()
		s.parked, s.runParked = took, nil
		s.mu.Unlock()
		s.dropSlot(sl)
		return err
	}
	s.launch(sl, s.agent.Resume)
	return nil
}

// Ask puts a question to the people watching the session and waits for
// the answer (the face's extension UI requests go through here too).
func (s *Session) Ask(ctx context.Context, r interaction.Request) (interaction.Response, error) {
	return s.broker.Ask(ctx, r)
}

// Todo returns the plan the model keeps with the todo tool.
func (s *Session) Todo() todo.Snapshot { return s.todos.Snapshot() }

// Gate is the session's permission gate (grants, policy).
func (s *Session) Gate() *interaction.Gate { return s.gate }

// appendOutsideRun records a message outside a run (a user bash command).
func (s *Session) appendOutsideRun(m *llm.Message) {
	s.agent.Append(m)
	s.record(m)
	s.emit(Event{Type: EventType(agent.EventMessageStart), Agent: &agent.Event{Type: agent.EventMessageStart, Message: m}})
	s.emit(Event{Type: EventType(agent.EventMessageEnd), Agent: &agent.Event{Type: agent.EventMessageEnd, Message: m}})
}

// RecordBash records a bash command the user ran into the context, so the
// model sees it on the next prompt. While a run is in progress it is held
// and recorded when the run ends, so it never lands between a tool call
// and its result.
func (s *Session) RecordBash(m *llm.Message) {
	if m.Timestamp == 0 {
		m.Timestamp = time.Now().UnixMilli()
	}
	s.mu.Lock()
	if s.runDone != nil {
		s.pendingBash = append(s.pendingBash, m)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.appendOutsideRun(m)
}

// ErrBashRunning is returned when a command is started while another
// one the user ran is still running.
var ErrBashRunning = fault.New(fault.Busy, "a bash command is already running; abort it first")

// DefaultBashTimeout bounds a command the user runs (Bash) when
// Config.BashTimeout is 0: long enough for a build or a test suite, short
// enough that a forgotten `tail -f` does not hold the session forever.
const DefaultBashTimeout = 10 * time.Minute

// bashTimeoutSeconds is Config.BashTimeout as RunBash takes it (0: none).
func bashTimeoutSeconds(d time.Duration) float64 {
	switch {
	case d == 0:
		return DefaultBashTimeout.Seconds()
	case d < 0:
		return 0
	}
	return d.Seconds()
}

// Bash runs a command the user typed (not the model), in the session's
// working directory, and records it into the context as a bashExecution
// message so the model sees it on the next prompt; exclude keeps it out
// of the model's context (pi's "!!"). AbortBash, ctx or Config.BashTimeout
// ends it and everything it started; a command that timed out is recorded
// as cancelled, its output ending with a line saying so.
func (s *Session) Bash(ctx context.Context, command string, exclude bool) (*llm.Message, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	if s.bashCancel != nil {
		s.mu.Unlock()
		return nil, ErrBashRunning
	}
	s.bashCancel = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.bashCancel = nil
		s.mu.Unlock()
	}()
	timeout := bashTimeoutSeconds(s.cfg.BashTimeout)
	run := tool.RunBash(ctx, s.cfg.BashEnv, command, timeout, nil)
	if run.StartError != "" {
		return nil, fault.New(fault.Failed, run.StartError) // why the shell did not start, for the client
	}
	output := run.Output
	if run.TimedOut {
		if output != "" && !strings.HasSuffix(output, "\n") {
			output += "\n"
		}
		output += "Command timed out after " + strconv.FormatFloat(timeout, 'f', -1, 64) + " seconds"
	}
	m := &llm.Message{Role: llm.RoleBashExecution, Command: command, Output: output, ExitCode: run.ExitCode,
		Cancelled: run.Aborted || run.TimedOut, Truncated: run.Truncation.Truncated, FullOutputPath: run.FullOutputPath,
		ExcludeFromContext: exclude, Timestamp: time.Now().UnixMilli()}
	if m.ExitCode == nil && !run.Aborted && !run.TimedOut && run.Signal == "" && run.Failure == "" {
		zero := 0
		m.ExitCode = &zero
	}
	s.RecordBash(m)
	return m, nil
}

// AbortBash cancels the command the user is running, if any; it reports
// whether there was one.
func (s *Session) AbortBash() bool {
	s.mu.Lock()
	c := s.bashCancel
	s.mu.Unlock()
	if c != nil {
		c()
	}
	return c != nil
}

// ExportHTML writes the session as a self-contained HTML page.
func (s *Session) ExportHTML(w io.Writer) error {
	s.mu.Lock()
	f := s.file
	s.mu.Unlock()
	return transcript.ExportHTML(w, f, transcript.ExportOptions{})
}

// CycleThinking moves to the next thinking level the model supports, as
// pi's cycle_thinking_level: off, minimal, low, medium, high (and xhigh
// where the model has it), then round again. ok is false for a model
// without reasoning.
func (s *Session) CycleThinking() (level llm.ThinkingLevel, ok bool, err error) {
	m := s.Model()
	if !m.Reasoning {
		return "", false, nil
	}
	levels := []llm.ThinkingLevel{llm.ThinkingOff, llm.ThinkingMinimal, llm.ThinkingLow, llm.ThinkingMedium, llm.ThinkingHigh}
	if m.ClampThinking(llm.ThinkingXHigh) == llm.ThinkingXHigh {
		levels = append(levels, llm.ThinkingXHigh)
	}
	cur := s.Thinking()
	next := levels[0]
	for i, l := range levels {
		if l == cur {
			next = levels[(i+1)%len(levels)]
		}
	}
	level, err = s.SetThinking(next)
	return level, err == nil, err
}

// CycleModel switches to the model after (or, backward, before) the
// current one in models. ok is false when there is nothing to cycle to.
func (s *Session) CycleModel(models []*llm.Model, backward bool) (next *llm.Model, ok bool, err error) {
	if len(models) <= 1 {
		return nil, false, nil
	}
	step := 1
	if backward {
		step = len(models) - 1
	}
	cur := s.Model()
	next = models[0]
	for i, m := range models {
		if m.Provider == cur.Provider && m.ID == cur.ID {
			next = models[(i+step)%len(models)]
		}
	}
	if err := s.SetModel(next); err != nil {
		return nil, false, err
	}
	return next, true, nil
}

// errIdle refuses to switch transcripts under a running agent.
var errIdle = fault.New(fault.Busy, "the agent is processing; abort it or wait for it to finish first")

// idle fails while a run is in progress: switching transcripts under a
// running agent would tear the conversation.
func (s *Session) idle() error {
	s.awaitRunTail()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runDone != nil {
		return errIdle
	}
	return nil
}

func (s *Session) changed() {
	s.mu.Lock()
	id, path := s.file.ID(), s.file.Path()
	s.mu.Unlock()
	s.emit(Event{Type: EventSessionChanged, SessionID: id, SessionFile: path})
}

// swap makes f the session's transcript in place of the current one,
// then runs then (if set) and announces the change. The tool calls the
// old transcript ends with stop waiting for a person (they stay
// unanswered in its file); those f ends with wait for one.
func (s *Session) swap(f *transcript.File, then func()) error {
	s.parkMu.Lock()
	s.settleLocked(reasonMovedOn, false)
	err := s.adopt(f)
	s.parkMu.Unlock()
	if err == nil {
		if then != nil {
			then()
		}
		s.changed()
	}
	s.repark()
	return err
}

// NewSession starts a fresh transcript in place of the current one.
// parent, if set, is recorded as the new session's parent.
func (s *Session) NewSession(parent string) error {
	if err := s.idle(); err != nil {
		return err
	}
	f, err := s.newFile(parent)
	if err != nil {
		return err
	}
	return s.swap(f, func() { s.agent.ClearQueues() })
}

// Switch loads another session file in place of the current one.
func (s *Session) Switch(path string) error {
	if err := s.idle(); err != nil {
		return err
	}
	f, err := transcript.Open(path, s.fileOptions()...)
	if err != nil {
		// The client named the file; what is wrong with it is its to see.
		return fault.Wrap(fault.Invalid, err, fmt.Sprintf("opening session %s: %v", path, err))
	}
	if err := s.swap(f, nil); err != nil {
		f.Close()
		return err
	}
	return nil
}

// ForkMessage is a user message a session can be forked from.
type ForkMessage struct {
	EntryID string
	Text    string
}

// ForkMessages lists the user messages of the current branch.
func (s *Session) ForkMessages() []ForkMessage {
	s.mu.Lock()
	f := s.file
	s.mu.Unlock()
	var out []ForkMessage
	for _, e := range f.Branch(f.Leaf()) {
		if e.Type == transcript.TypeMessage && e.Message.Role == llm.RoleUser {
			out = append(out, ForkMessage{EntryID: e.ID, Text: e.Message.TextContent()})
		}
	}
	return out
}

// Fork continues in a new session holding the conversation before the
// given user message; it returns that message's text so a client can
// edit and resend it.
func (s *Session) Fork(entryID string) (string, error) {
	if err := s.idle(); err != nil {
		return "", err
	}
	s.mu.Lock()
	f := s.file
	s.mu.Unlock()
	e, ok := f.Entry(entryID)
	if !ok || e.Type != transcript.TypeMessage || e.Message.Role != llm.RoleUser {
		return "", fault.Errorf(fault.Invalid, "entry %q is not a user message of this session", entryID)
	}
	nf, text, err := f.Fork(entryID, s.cfg.SessionsDir)
	if err != nil {
		return "", fmt.Errorf("forking: %w", err)
	}
	if err := s.swap(nf, nil); err != nil {
		nf.Close()
		return "", err
	}
	return text, nil
}

// Clone continues in a copy of the current branch in a new session.
func (s *Session) Clone() error {
	if err := s.idle(); err != nil {
		return err
	}
	s.mu.Lock()
	f := s.file
	s.mu.Unlock()
	nf, err := f.Clone(s.cfg.SessionsDir)
	if err != nil {
		return fmt.Errorf("cloning: %w", err)
	}
	if err := s.swap(nf, nil); err != nil {
		nf.Close()
		return err
	}
	return nil
}
