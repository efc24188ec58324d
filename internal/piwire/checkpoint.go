package piwire

import (
	"context"
	"time"

	"github.com/agentd-dev/agentd/internal/checkpoint"
	"github.com/agentd-dev/agentd/internal/session"
)

// agentd's checkpoint commands on the pi faces (pi has none: pi's
// rewind extensions keep their own). Both faces answer them with
// CheckpointCommand, so the shapes are one table.
const (
	// CmdGetCheckpoints lists the turns that changed files and the revert
	// that can be undone.
	CmdGetCheckpoints = "get_checkpoints"
	// CmdGetTurnDiff answers a turn's diff: {turn?} ("" the last).
	CmdGetTurnDiff = "get_turn_diff"
	// CmdRevertTurn puts the files back as before a turn: {turn?,
	// truncate?}.
	CmdRevertTurn = "revert_turn"
	// CmdUndoRevert undoes the last revert.
	CmdUndoRevert = "undo_revert"
)

// CheckpointCommands are the command names CheckpointCommand answers.
var CheckpointCommands = []string{CmdGetCheckpoints, CmdGetTurnDiff, CmdRevertTurn, CmdUndoRevert}

// CheckpointTurn is a checkpointed turn in pi's camelCase.
type CheckpointTurn struct {
	ID           string `json:"id"`
	Prompt       string `json:"prompt"`
	MessageIndex int    `json:"messageIndex"`
	Started      string `json:"started"`
}

// DiffHunk is one changed region of a file.
type DiffHunk struct {
	Header   string   `json:"header"`
	OldStart int      `json:"oldStart"`
	OldLines int      `json:"oldLines"`
	NewStart int      `json:"newStart"`
	NewLines int      `json:"newLines"`
	Lines    []string `json:"lines"`
}

// DiffFile is how a turn changed one path.
type DiffFile struct {
	Path      string     `json:"path"`
	Status    string     `json:"status"`
	Binary    bool       `json:"binary"`
	Additions int        `json:"additions"`
	Deletions int        `json:"deletions"`
	Hunks     []DiffHunk `json:"hunks"`
}

// TurnDiff is get_turn_diff's data.
type TurnDiff struct {
	Turn    CheckpointTurn    `json:"turn"`
	Files   []DiffFile        `json:"files"`
	Skipped []checkpoint.Skip `json:"skipped"`
	Partial bool              `json:"partial"`
	Live    bool              `json:"live"`
	Patch   string            `json:"patch"`
}

// Reverted is revert_turn's and undo_revert's data.
type Reverted struct {
	Turn      string            `json:"turn"`
	Written   []string          `json:"written"`
	Deleted   []string          `json:"deleted"`
	Kept      []checkpoint.Skip `json:"kept"`
	Truncated bool              `json:"truncated"`
	Prompt    string            `json:"prompt"`
}

func checkpointTurn(t session.CheckpointTurn) CheckpointTurn {
	return CheckpointTurn{ID: t.ID, Prompt: t.Prompt, MessageIndex: t.Index, Started: t.Started.UTC().Format(time.RFC3339)}
}

func reverted(r *session.RevertResult) Reverted {
	out := Reverted{Turn: r.Turn, Truncated: r.Truncated, Prompt: r.Prompt, Written: []string{}, Deleted: []string{}, Kept: []checkpoint.Skip{}}
	if r.Restored != nil {
		out.Written, out.Deleted = r.Written, r.Deleted
		if r.Kept != nil {
			out.Kept = r.Kept
		}
	}
	return out
}

// CheckpointCommand runs one of CheckpointCommands on s with the
// command's turn and truncate fields and returns its data; errors are
// the session's (fault.Error), which each face maps as it maps others.
func CheckpointCommand(ctx context.Context, s *session.Session, typ string, f Fields) (any, error) {
	switch typ {
	case CmdGetCheckpoints:
		turns, err := s.Checkpoints()
		if err != nil {
			return nil, err
		}
		out := struct {
			Turns []CheckpointTurn `json:"turns"`
			Undo  *struct {
				Turn      string `json:"turn"`
				Truncated bool   `json:"truncated"`
				Time      string `json:"time"`
			} `json:"undo"`
		}{Turns: make([]CheckpointTurn, len(turns))}
		for i, t := range turns {
			out.Turns[i] = checkpointTurn(t)
		}
		if rv, ok := s.LastRevert(); ok {
			out.Undo = &struct {
				Turn      string `json:"turn"`
				Truncated bool   `json:"truncated"`
				Time      string `json:"time"`
			}{rv.Turn, rv.Truncated, rv.Time.UTC().Format(time.RFC3339)}
		}
		return out, nil
	case CmdGetTurnDiff:
		d, err := s.TurnDiff(ctx, f.Turn)
		if err != nil {
			return nil, err
		}
		idx := -1
		if ts, err := s.Checkpoints(); err == nil {
			for _, t := range ts {
				if t.ID == d.Turn.ID {
					idx = t.Index
				}
			}
		}
		out := TurnDiff{Turn: checkpointTurn(session.CheckpointTurn{Turn: d.Turn, Index: idx}), Files: make([]DiffFile, len(d.Files)),
			Skipped: d.Skipped, Partial: d.Partial, Live: d.Live, Patch: checkpoint.Patch(d.Files)}
		if out.Skipped == nil {
			out.Skipped = []checkpoint.Skip{}
		}
		for i, fd := range d.Files {
			df := DiffFile{Path: fd.Path, Status: fd.Status, Binary: fd.Binary, Additions: fd.Additions, Deletions: fd.Deletions, Hunks: make([]DiffHunk, len(fd.Hunks))}
			for j, h := range fd.Hunks {
				df.Hunks[j] = DiffHunk{Header: h.Header(), OldStart: h.OldStart, OldLines: h.OldLines, NewStart: h.NewStart, NewLines: h.NewLines, Lines: h.Lines}
			}
			out.Files[i] = df
		}
		return out, nil
	case CmdRevertTurn:
		r, err := s.RevertTurn(ctx, f.Turn, f.Truncate)
		if err != nil {
			return nil, err
		}
		return reverted(r), nil
	case CmdUndoRevert:
		r, err := s.UndoRevert(ctx)
		if err != nil {
			return nil, err
		}
		return reverted(r), nil
	}
	return nil, nil
}
