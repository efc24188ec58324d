package acp

import (
	"context"
	"fmt"

	"github.com/agentd-dev/agentd/internal/checkpoint"
	"github.com/agentd-dev/agentd/internal/session"
)

// turnDiffer is a conversation that keeps checkpoints and can say what a
// turn did to the files (a session of this process).
type turnDiffer interface {
	Checkpoints() ([]session.CheckpointTurn, error)
	TurnDiff(ctx context.Context, turn string) (*checkpoint.TurnDiff, error)
}

// checkpointMark names the session's last checkpointed turn (its id and
// the snapshot before it), so that a prompt can tell whether it made a
// new one.
func (ss *acpSession) checkpointMark() string {
	d, ok := ss.s.(turnDiffer)
	if !ok {
		return ""
	}
	turns, err := d.Checkpoints()
	if err != nil || len(turns) == 0 {
		return ""
	}
	last := turns[len(turns)-1]
	return last.ID + " " + last.Before
}

// sendChanges sends, when the prompt's run changed files, the turn's
// whole diff as one completed tool call of kind edit with a diff content
// per file (the text before, none for a file the turn made, and after):
// what write, edit and bash did together, bash's files included, for an
// editor to review. mark is checkpointMark from before the prompt.
func (ss *acpSession) sendChanges(mark string) {
	d, ok := ss.s.(turnDiffer)
	if !ok {
		return
	}
	now := ss.checkpointMark()
	if now == "" || now == mark {
		return
	}
	diff, err := d.TurnDiff(ss.ctx, "")
	if err != nil || len(diff.Files) == 0 {
		return
	}
	u := toolCall{SessionUpdate: "tool_call", ToolCallID: "agentd-changes-" + diff.Turn.ID, Kind: "edit", Status: "completed",
		Title: fmt.Sprintf("Changes of this turn: %d file(s)", len(diff.Files))}
	for _, f := range diff.Files {
		p := absPath(ss.cwd, f.Path)
		u.Locations = append(u.Locations, location{Path: p})
		if f.Binary {
			u.Content = append(u.Content, toolCallContent{Type: "content", Content: &contentBlock{Type: "text", Text: f.Path + ": binary file " + f.Status}})
			continue
		}
		c := toolCallContent{Type: "diff", Path: p}
		after := f.After
		c.NewText = &after
		if f.Status != "added" {
			before := f.Before
			c.OldText = &before
		}
		u.Content = append(u.Content, c)
	}
	if len(diff.Skipped) > 0 {
		u.Content = append(u.Content, toolCallContent{Type: "content", Content: &contentBlock{Type: "text",
			Text: fmt.Sprintf("%d path(s) were not recorded (too large or over a limit), e.g. %s: %s", len(diff.Skipped), diff.Skipped[0].Path, diff.Skipped[0].Reason)}})
	}
	ss.update(u)
}
