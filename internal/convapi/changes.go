package convapi

import (
	"context"
	"net/http"
	"time"

	"github.com/agentd-dev/agentd/internal/checkpoint"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
)

// A conversation's checkpoints on the REST face: the turns that changed
// files, a turn's diff, a revert and its undo. The work is the session's
// (session.TurnDiff, RevertTurn, UndoRevert, Undo); this is the wire.

// ChangedTurn is a turn that changed files.
type ChangedTurn struct {
	ID     string `json:"id" jsonschema:"the turn's id: the transcript entry id of the user message that started it"`
	Prompt string `json:"prompt" jsonschema:"the start of that message"`
	// MessageIndex is the message's index in the conversation, -1 when
	// the conversation has moved off it.
	MessageIndex int    `json:"message_index"`
	Started      string `json:"started" jsonschema:"RFC 3339 time of the checkpoint taken before the turn's first change"`
}

// ChangesResponse answers GET .../changes.
type ChangesResponse struct {
	Turns []ChangedTurn `json:"turns" jsonschema:"oldest first"`
	// Undo is the revert POST .../changes/undo would undo, null if none.
	Undo *UndoableRevert `json:"undo"`
}

// UndoableRevert is a revert that can still be undone.
type UndoableRevert struct {
	Turn      string `json:"turn"`
	Truncated bool   `json:"truncated" jsonschema:"the revert also truncated the conversation; undoing it goes back there"`
	Time      string `json:"time"`
}

// DiffHunk is one changed region of a file.
type DiffHunk struct {
	Header   string   `json:"header" jsonschema:"@@ -old_start,old_lines +new_start,new_lines @@"`
	OldStart int      `json:"old_start"`
	OldLines int      `json:"old_lines"`
	NewStart int      `json:"new_start"`
	NewLines int      `json:"new_lines"`
	Lines    []string `json:"lines" jsonschema:"each prefixed with a space, - or +"`
}

// ChangedFile is how a turn changed one path.
type ChangedFile struct {
	Path      string     `json:"path"`
	Status    string     `json:"status" enum:"added,modified,deleted"`
	Binary    bool       `json:"binary"`
	Additions int        `json:"additions"`
	Deletions int        `json:"deletions"`
	Hunks     []DiffHunk `json:"hunks"`
}

// SkippedPath is a path a checkpoint left out or a revert left alone.
type SkippedPath struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// TurnDiffResponse answers GET .../changes/diff.
type TurnDiffResponse struct {
	Turn    ChangedTurn   `json:"turn"`
	Files   []ChangedFile `json:"files"`
	Skipped []SkippedPath `json:"skipped" jsonschema:"paths the checkpoints did not record (too large, over a limit)"`
	Partial bool          `json:"partial" jsonschema:"a checkpoint stopped at a limit"`
	Live    bool          `json:"live" jsonschema:"the turn has not ended: the diff runs to the workspace as it is now"`
	Patch   string        `json:"patch" jsonschema:"the same as one unified diff"`
}

// RevertRequest is the body of POST .../changes/revert.
type RevertRequest struct {
	Turn     string `json:"turn" jsonschema:"the turn to revert to the state before; the last turn that changed files when empty"`
	Truncate bool   `json:"truncate" jsonschema:"also move the conversation to just before the turn's message"`
}

// RevertResponse answers a revert or its undo.
type RevertResponse struct {
	Turn      string        `json:"turn"`
	Written   []string      `json:"written" jsonschema:"paths written back"`
	Deleted   []string      `json:"deleted" jsonschema:"paths removed"`
	Kept      []SkippedPath `json:"kept" jsonschema:"paths left as they are, and why"`
	Truncated bool          `json:"truncated" jsonschema:"the conversation moved (to before the turn, or back)"`
	Prompt    string        `json:"prompt" jsonschema:"the reverted turn's message, to offer again"`
}

func changedTurn(t session.CheckpointTurn) ChangedTurn {
	return ChangedTurn{ID: t.ID, Prompt: t.Prompt, MessageIndex: t.Index, Started: t.Started.UTC().Format(time.RFC3339)}
}

func (s *Server) changes(w http.ResponseWriter, r *http.Request, p params) error {
	h, err := s.conversation(r.Context(), p.conv)
	if err != nil {
		return err
	}
	sess := h.Session()
	turns, err := sess.Checkpoints()
	if err != nil {
		return err
	}
	out := ChangesResponse{Turns: make([]ChangedTurn, len(turns))}
	for i, t := range turns {
		out.Turns[i] = changedTurn(t)
	}
	if rv, ok := sess.LastRevert(); ok {
		out.Undo = &UndoableRevert{Turn: rv.Turn, Truncated: rv.Truncated, Time: rv.Time.UTC().Format(time.RFC3339)}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) turnDiff(w http.ResponseWriter, r *http.Request, p params) error {
	h, err := s.conversation(r.Context(), p.conv)
	if err != nil {
		return err
	}
	turn := r.URL.Query().Get("turn")
	if len(turn) > 200 {
		return fault.New(fault.Invalid, "turn is at most 200 characters")
	}
	sess := h.Session()
	d, err := sess.TurnDiff(r.Context(), turn)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, turnDiffResponse(d, sess))
	return nil
}

func turnDiffResponse(d *checkpoint.TurnDiff, sess *session.Session) TurnDiffResponse {
	idx := -1
	if ts, err := sess.Checkpoints(); err == nil {
		for _, t := range ts {
			if t.ID == d.Turn.ID {
				idx = t.Index
			}
		}
	}
	out := TurnDiffResponse{Turn: changedTurn(session.CheckpointTurn{Turn: d.Turn, Index: idx}), Files: make([]ChangedFile, len(d.Files)),
		Skipped: skipped(d.Skipped), Partial: d.Partial, Live: d.Live, Patch: checkpoint.Patch(d.Files)}
	for i, f := range d.Files {
		cf := ChangedFile{Path: f.Path, Status: f.Status, Binary: f.Binary, Additions: f.Additions, Deletions: f.Deletions, Hunks: make([]DiffHunk, len(f.Hunks))}
		for j, h := range f.Hunks {
			cf.Hunks[j] = DiffHunk{Header: h.Header(), OldStart: h.OldStart, OldLines: h.OldLines, NewStart: h.NewStart, NewLines: h.NewLines, Lines: h.Lines}
		}
		out.Files[i] = cf
	}
	return out
}

func skipped(ss []checkpoint.Skip) []SkippedPath {
	out := make([]SkippedPath, len(ss))
	for i, s := range ss {
		out[i] = SkippedPath{Path: s.Path, Reason: s.Reason}
	}
	return out
}

func revertResponse(r *session.RevertResult) RevertResponse {
	out := RevertResponse{Turn: r.Turn, Truncated: r.Truncated, Prompt: r.Prompt, Written: []string{}, Deleted: []string{}, Kept: []SkippedPath{}}
	if r.Restored != nil {
		out.Written, out.Deleted, out.Kept = r.Written, r.Deleted, skipped(r.Kept)
	}
	return out
}

// revertPayload is rest.revert's payload.
type revertPayload struct {
	Turn     string `json:"turn,omitempty"`
	Truncate bool   `json:"truncate,omitempty"`
}

func (s *Server) revert(w http.ResponseWriter, r *http.Request, p params) error {
	return s.answerCommand(w, r, p, commandRequest{name: "rest.revert", rate: server.RateData, body: true,
		decode: func(o object) (any, string, error) {
			pl, err := decodeRevert(o)
			return pl, "", err
		}})
}

// decodeRevert reads changes/revert's body.
func decodeRevert(o object) (revertPayload, error) {
	var pl revertPayload
	if err := o.only(fieldNames(RevertRequest{})...); err != nil {
		return pl, err
	}
	var err error
	if pl.Turn, err = o.optionalStr("turn"); err != nil {
		return pl, err
	}
	if len(pl.Turn) > 200 {
		return pl, fault.New(fault.Invalid, "turn is at most 200 characters")
	}
	if v, ok, err := o.boolean("truncate"); err != nil {
		return pl, err
	} else if ok {
		pl.Truncate = v
	}
	return pl, nil
}

func (s *Server) runRevert(ctx context.Context, c *call) (any, error) {
	var p revertPayload
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	res, err := c.h.Session().RevertTurn(ctx, p.Turn, p.Truncate)
	if err != nil {
		return nil, err
	}
	return revertResponse(res), nil
}

func (s *Server) undoRevert(w http.ResponseWriter, r *http.Request, p params) error {
	return s.answerCommand(w, r, p, commandRequest{name: "rest.undo_revert", rate: server.RateData})
}

func (s *Server) runUndoRevert(ctx context.Context, c *call) (any, error) {
	res, err := c.h.Session().UndoRevert(ctx)
	if err != nil {
		return nil, err
	}
	return revertResponse(res), nil
}
