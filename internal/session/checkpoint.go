package session

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/agentd-dev/agentd/internal/checkpoint"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/tool"
)

// checkpoints is a session's tracker, opened for the transcript it is on
// (a new_session or switch moves it to that transcript's own).
type checkpoints struct {
	// mu is a leaf: taken without the session's other locks (tracker
	// reads the id first), nothing locked under it.
	mu      sync.Mutex
	id      string
	tracker *checkpoint.Tracker
}

// readOnlyTools change no file: calls of every other tool (write, edit,
// bash, an MCP server's, an editor's) take a checkpoint first.
var readOnlyTools = map[string]bool{"read": true, "grep": true, "find": true, "ls": true}

// tracker is the checkpoint tracker of the transcript the session is on.
func (s *Session) tracker() (*checkpoint.Tracker, error) {
	if s.cfg.CheckpointDir == "" {
		return nil, fault.New(fault.Unavailable, "checkpoints are off for this session (no data dir to keep them in)")
	}
	id := s.ID()
	if id == "" || id != filepath.Base(id) || strings.HasPrefix(id, ".") {
		return nil, fault.Errorf(fault.Internal, "session id %q cannot name a checkpoint store", id)
	}
	c := &s.checkpoints
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tracker != nil && c.id == id {
		return c.tracker, nil
	}
	t, err := checkpoint.OpenTracker(filepath.Join(s.cfg.CheckpointDir, id), s.cfg.Cwd, s.cfg.CheckpointLimits)
	if err != nil {
		return nil, cpErr(err)
	}
	c.id, c.tracker = id, t
	return t, nil
}

// currentTurn is the user message the run is answering: its entry id and
// the start of its text.
func (s *Session) currentTurn() (id, prompt string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.items) - 1; i >= 0; i-- {
		if m := s.items[i].msg; m.Role == llm.RoleUser {
			return s.items[i].id, clipPrompt(m.TextContent(), 120)
		}
	}
	return "", ""
}

func clipPrompt(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// checkpointBefore snapshots the workspace before the first call of a
// turn that may change files. A snapshot that fails is logged and the
// call still runs: the turn then has no checkpoint to revert to.
func (s *Session) checkpointBefore(ctx context.Context, call tool.Call) {
	if s.cfg.CheckpointDir == "" || readOnlyTools[call.Name] {
		return
	}
	id, _ := s.currentTurn()
	prompt, _ := s.messageText(id)
	if id == "" {
		return
	}
	t, err := s.tracker()
	if err == nil {
		err = t.Begin(ctx, id, prompt)
	}
	if err != nil {
		s.log.Warn("checkpoint before a tool call", "tool", call.Name, "err", err)
	}
}

// checkpointEnd records the workspace after a run, for the diff of its
// turn.
func (s *Session) checkpointEnd() {
	c := &s.checkpoints
	c.mu.Lock()
	t := c.tracker
	c.mu.Unlock()
	if t == nil {
		return // no turn of this process changed files
	}
	if err := t.End(context.Background()); err != nil {
		s.log.Warn("checkpoint after a run", "err", err)
	}
}

// CheckpointTurn is a turn with a checkpoint, as Checkpoints lists it.
type CheckpointTurn struct {
	checkpoint.Turn
	// Index is the turn's user message in Messages(), -1 when the
	// conversation has moved off it (truncated, another branch).
	Index int `json:"index"`
}

// Checkpoints lists the turns that changed files, oldest first.
func (s *Session) Checkpoints() ([]CheckpointTurn, error) {
	t, err := s.tracker()
	if err != nil {
		return nil, err
	}
	turns := t.Turns()
	out := make([]CheckpointTurn, len(turns))
	for i, tr := range turns {
		out[i] = CheckpointTurn{Turn: tr, Index: s.messageIndex(tr.ID)}
	}
	return out, nil
}

// messageText is the whole text of the message with entryID in the
// context, and whether it is there.
func (s *Session) messageText(entryID string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range s.items {
		if it.id == entryID {
			return it.msg.TextContent(), true
		}
	}
	return "", false
}

func (s *Session) messageIndex(entryID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, it := range s.items {
		if it.id == entryID {
			return i
		}
	}
	return -1
}

// TurnDiff is what turn ("" for the last turn that changed files) did to
// the workspace: files with hunks, and what the snapshots left out.
func (s *Session) TurnDiff(ctx context.Context, turn string) (*checkpoint.TurnDiff, error) {
	t, err := s.tracker()
	if err != nil {
		return nil, err
	}
	d, err := t.Diff(ctx, turn)
	return d, cpErr(err)
}

// cpErr makes a store's failure (a missing object, a full disk) a
// fault a client sees with its reason.
func cpErr(err error) error {
	if err == nil || fault.As(err) != nil {
		return err
	}
	return fault.Wrap(fault.Failed, err, err.Error())
}

// LastRevert is the revert UndoRevert would undo, if any.
func (s *Session) LastRevert() (checkpoint.Revert, bool) {
	t, err := s.tracker()
	if err != nil {
		return checkpoint.Revert{}, false
	}
	return t.LastRevert()
}

// RevertResult is what a revert (or its undo) did.
type RevertResult struct {
	// Turn is the turn reverted to the state before (or whose revert was
	// undone).
	Turn string `json:"turn"`
	*checkpoint.Restored
	// Truncated: the conversation moved to just before the turn's
	// message (a revert), or back to where it was (an undo).
	Truncated bool `json:"truncated"`
	// Prompt is the turn's message text, for a client to offer again.
	Prompt string `json:"prompt,omitempty"`
}

// RevertTurn puts the workspace's files back as they were before turn
// ("" for the last turn that changed files) and, with truncate, moves
// the conversation to just before that turn's message (TruncateAt). The
// session must be idle. UndoRevert undoes it, until a later turn changes
// files.
func (s *Session) RevertTurn(ctx context.Context, turn string, truncate bool) (*RevertResult, error) {
	t, err := s.tracker()
	if err != nil {
		return nil, err
	}
	release, err := s.claim(func() {})
	if err != nil {
		return nil, err
	}
	leaf := s.LeafID()
	idx := -1
	if truncate {
		var id string
		if turn == "" {
			if ts := t.Turns(); len(ts) > 0 {
				id = ts[len(ts)-1].ID
			}
		} else {
			id = turn
		}
		if idx = s.messageIndex(id); idx < 0 && id != "" {
			release()
			return nil, fault.Errorf(fault.Conflict, "turn %q is not in the conversation as it is now, so it cannot be truncated there; revert without truncating", id)
		}
	}
	res, tr, err := t.Revert(ctx, turn, leaf, truncate && idx >= 0)
	release()
	if err != nil {
		return nil, cpErr(err)
	}
	out := &RevertResult{Turn: tr.ID, Restored: res, Prompt: tr.Prompt}
	if text, ok := s.messageText(tr.ID); ok {
		out.Prompt = text
	}
	if truncate && idx >= 0 {
		if err := s.TruncateAt(idx); err != nil {
			return out, err
		}
		out.Truncated = true
	}
	return out, nil
}

// Undo is the /undo command (gptme's, opencode's): the conversation goes
// back to just before its last message from the user, and the files the
// turn it started changed go back as they were (UndoRevert undoes that).
// A turn that changed no files only moves the conversation back.
func (s *Session) Undo(ctx context.Context) (*RevertResult, error) {
	id, prompt := s.currentTurn()
	if id == "" {
		return nil, fault.New(fault.Conflict, "there is nothing to undo: the conversation has no message from you")
	}
	if t, err := s.tracker(); err == nil {
		for _, tr := range t.Turns() {
			if tr.ID == id {
				return s.RevertTurn(ctx, id, true)
			}
		}
	}
	if err := s.TruncateAt(s.messageIndex(id)); err != nil {
		return nil, err
	}
	return &RevertResult{Turn: id, Restored: &checkpoint.Restored{Written: []string{}, Deleted: []string{}}, Truncated: true, Prompt: prompt}, nil
}

// UndoRevert undoes the last revert still undoable: the files are put
// back as they were just before it and, when it truncated the
// conversation, the conversation goes back to where it was.
func (s *Session) UndoRevert(ctx context.Context) (*RevertResult, error) {
	t, err := s.tracker()
	if err != nil {
		return nil, err
	}
	release, err := s.claim(func() {})
	if err != nil {
		return nil, err
	}
	res, r, err := t.UndoRevert(ctx)
	release()
	if err != nil {
		return nil, cpErr(err)
	}
	out := &RevertResult{Turn: r.Turn, Restored: res}
	if r.Truncated && r.Leaf != "" && r.Leaf != s.LeafID() {
		if _, err := s.NavigateTree(ctx, r.Leaf, NavigateOptions{}); err != nil {
			return out, err
		}
		out.Truncated = true
		// The conversation is back where it was: faces that show a log
		// (REST, the web UI) reload it as after an edit.
		s.emit(Event{Type: EventConversationEdited, Index: max(s.messageIndex(r.Turn), 0)})
	}
	return out, nil
}
