package session

import (
	"fmt"
	"time"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// Errors of the conversation operations (Append, Step, EditMessage,
// TruncateAt) that callers branch on.
var (
	// ErrRunning: a step while a run is in progress.
	ErrRunning = fault.New(fault.Busy, "Generation already in progress: wait for the run to end or interrupt it")
	// ErrAppendWhileRunning: a message added while a run is in progress.
	ErrAppendWhileRunning = fault.New(fault.Busy, "Cannot add message while generation is in progress")
	// ErrNothingToRespond: a step on a conversation that is empty or ends
	// with the assistant's answer.
	ErrNothingToRespond = fault.New(fault.Invalid, "Nothing to respond to: the conversation is empty or ends with the assistant's answer; add a message first")
)

// Append adds m to the conversation without running the agent: a message
// a client writes (gptme's POST of a message), answered by the next Step.
// Roles user, assistant and custom may be appended. It fails with
// ErrAppendWhileRunning while a run is in progress. Tool calls the
// conversation ends with that never ran are settled first as not run
// ("the conversation moved on"), so the context stays valid; an assistant
// message with tool calls leaves them waiting for a person, as after a
// restart. The message is recorded and emitted as message_start and
// message_end.
func (s *Session) Append(m *llm.Message) error {
	if m == nil {
		return fault.New(fault.Invalid, "no message given")
	}
	switch m.Role {
	case llm.RoleUser, llm.RoleAssistant, llm.RoleCustom:
	default:
		return fault.Errorf(fault.Invalid, "a %s message cannot be added; add a user, assistant or custom message", m.Role)
	}
	if m.Timestamp == 0 {
		m.Timestamp = time.Now().UnixMilli()
	}
	if m.Content == nil {
		m.Content = []llm.Content{}
	}
	m, err := s.expand(m)
	if err != nil {
		return err
	}
	s.parkMu.Lock()
	defer s.parkMu.Unlock()
	release, err := s.claim(func() {})
	if err == errIdle {
		return ErrAppendWhileRunning
	}
	if err != nil {
		return err
	}
	s.settleLocked(reasonMovedOn, true)
	s.appendOutsideRun(m)
	release()
	s.reparkLocked()
	return nil
}

// StepOptions say how a Step confirms the tool calls it runs, on top of
// the policy (a deny rule still denies).
type StepOptions struct {
	// AutoConfirm confirms every tool call of this step's run without
	// asking, including the ones waiting for a person when the step
	// begins.
	AutoConfirm bool
	// AutoConfirmNext, when above 0, confirms the next N tool calls that
	// would ask, in this run and later ones (the grants' Next, recorded
	// in the transcript): the calls waiting when the step begins are the
	// first of them, and the count left replaces the session's.
	AutoConfirmNext int
}

// Step runs the agent on the conversation as it stands: it answers a
// conversation that ends with a user message, tool results or another
// non-assistant message; one that ends with tool calls that never ran
// (after a restart, an edit, an added assistant message) runs those calls
// first, through the permission gate (those waiting for a person keep
// waiting unless opts confirms them), then asks the model. Like Prompt it
// returns once the run is accepted; the run reports through events. It
// fails with ErrRunning while a run is in progress, ErrNothingToRespond
// when the conversation is empty or ends with the assistant's answer.
func (s *Session) Step(opts StepOptions) error {
	if opts.AutoConfirmNext < 0 {
		return fault.Errorf(fault.Invalid, "the count of calls to confirm must be 0 or more, got %d", opts.AutoConfirmNext)
	}
	s.parkMu.Lock()
	defer s.parkMu.Unlock()
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return ErrClosed
	case s.runDone != nil:
		s.mu.Unlock()
		return ErrRunning
	case !agent.CanRespond(s.agent.Messages()):
		s.mu.Unlock()
		return ErrNothingToRespond
	}
	sl := s.takeSlotLocked()
	parked := s.takeParkedLocked()
	s.runAuto = opts.AutoConfirm
	s.mu.Unlock()
	n := opts.AutoConfirmNext
	for _, p := range parked {
		if p.call.Name == interaction.AskUserName {
			continue // a question, not a confirmation
		}
		switch {
		case opts.AutoConfirm:
		case n > 0:
			n--
		default:
			continue
		}
		_ = s.broker.Answer(p.id, interaction.Response{Verdict: interaction.VerdictApprove})
	}
	if opts.AutoConfirmNext > 0 {
		g := s.gate.Grants()
		g.Next = n
		s.gate.Grant(g)
		_ = s.saveGrants()
	}
	s.launch(sl, s.agent.Resume)
	return nil
}

// EditMessage replaces the content of message index of Messages() on a
// new branch of the transcript's tree: the edited message becomes a child
// of the original's parent and the conversation continues from it; the
// original and everything after it stay on the old branch, where
// NavigateTree can return. User, assistant, tool-result and custom
// messages can be edited; a summary or a command the user ran cannot. It
// fails with a fault.Busy error while a run is in progress and
// fault.Invalid for an index out of range or content that is empty, and
// emits conversation_edited with the index. The model and thinking level
// stay as they are.
func (s *Session) EditMessage(index int, content []llm.Content) error {
	if len(content) == 0 {
		return fault.New(fault.Invalid, "the edited message needs content")
	}
	return s.edit(index, false, content)
}

// TruncateAt moves the conversation to just before message index of
// Messages(): that message and those after it leave the context (they
// stay in the transcript, on the branch left behind). Recorded with a
// CustomTruncate entry, so that the file reopens there. Errors and the
// event as EditMessage's, with Truncated set.
func (s *Session) TruncateAt(index int) error { return s.edit(index, true, nil) }

func (s *Session) edit(index int, truncate bool, content []llm.Content) error {
	s.parkMu.Lock()
	defer s.parkMu.Unlock()
	release, err := s.claim(func() {})
	if err != nil {
		return err
	}
	err = s.editLocked(index, truncate, content)
	release()
	if err == nil {
		s.emit(Event{Type: EventConversationEdited, Index: index, Truncated: truncate})
	}
	s.reparkLocked()
	return err
}

func (s *Session) editLocked(index int, truncate bool, content []llm.Content) error {
	s.mu.Lock()
	f, items := s.file, s.items
	s.mu.Unlock()
	if index < 0 || index >= len(items) {
		if len(items) == 0 {
			return fault.Errorf(fault.Invalid, "message index %d is out of range: the conversation has no messages", index)
		}
		return fault.Errorf(fault.Invalid, "message index %d is out of range: the conversation has %d messages (0 to %d)", index, len(items), len(items)-1)
	}
	e, ok := f.Entry(items[index].id)
	if !ok {
		return fault.Errorf(fault.Invalid, "message %d has no entry in the transcript", index)
	}
	what := "edited"
	if truncate {
		what = "truncated at"
	}
	switch {
	case e.Type == transcript.TypeCompaction:
		return fault.Errorf(fault.Invalid, "message %d summarises the compacted start of the conversation and cannot be %s", index, what)
	case truncate:
	case e.Type == transcript.TypeMessage && e.Message.Role != llm.RoleBashExecution:
	case e.Type == transcript.TypeCustomMessage:
	default:
		role := string(items[index].msg.Role)
		return fault.Errorf(fault.Invalid, "message %d is a %s message and cannot be edited", index, role)
	}
	// The calls the old leaf ends with stay on the old branch, unanswered.
	s.settleLocked(reasonMovedOn, false)
	parent := e.ParentID
	if _, ok := f.Entry(parent); !ok {
		parent = ""
	}
	if err := f.SetLeaf(parent); err != nil {
		return fmt.Errorf("moving to the parent of message %d: %w", index, err)
	}
	if err := s.keepModel(f, parent); err != nil {
		return err
	}
	var err error
	switch {
	case truncate:
		err = s.appendSetting(CustomTruncate, struct {
			Index   int    `json:"index"`
			EntryID string `json:"entryId"`
		}{index, e.ID})
	case e.Type == transcript.TypeMessage:
		m := e.Message.Clone()
		m.Content = append([]llm.Content(nil), content...)
		_, err = f.AppendMessage(m)
	default:
		_, err = f.AppendCustomMessage(e.CustomType, content, e.Display, e.Details)
	}
	if err != nil {
		return fmt.Errorf("recording the edit: %w", err)
	}
	return s.loadContext(f)
}

// keepModel records the session's model and thinking level on the branch
// at leaf when the path there says otherwise, so that the file reopens
// with them.
func (s *Session) keepModel(f *transcript.File, leaf string) error {
	s.mu.Lock()
	model, thinking := s.model, s.thinking
	s.mu.Unlock()
	c := transcript.Context{ThinkingLevel: llm.ThinkingOff}
	if leaf != "" {
		c = f.Context(leaf)
	}
	if c.Provider != model.Provider || c.ModelID != model.ID {
		if _, err := f.AppendModelChange(model.Provider, model.ID); err != nil {
			return fmt.Errorf("recording the model on the new branch: %w", err)
		}
	}
	if c.ThinkingLevel != thinking {
		if _, err := f.AppendThinkingLevelChange(thinking); err != nil {
			return fmt.Errorf("recording the thinking level on the new branch: %w", err)
		}
	}
	return nil
}
