package acp

import (
	"context"
	"strings"
	"time"

	"github.com/agentd-dev/agentd/internal/checkpoint"
	"github.com/agentd-dev/agentd/internal/piwire"
	"github.com/agentd-dev/agentd/internal/session"
)

// A session of agentd serve reports its checkpoints through pi-server's
// get_checkpoints and get_turn_diff (agentd's commands). That answer has
// hunks, not whole files: the diff an editor gets is each file's changed
// regions with their context, as the edit tool's own diffs are.

var _ turnDiffer = (*remoteSession)(nil)

// remoteCallWait bounds a checkpoint command sent to agentd serve.
const remoteCallWait = 30 * time.Second

func (s *remoteSession) Checkpoints() ([]session.CheckpointTurn, error) {
	var out struct {
		Turns []piwire.CheckpointTurn `json:"turns"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteCallWait)
	defer cancel()
	if err := s.r.call(ctx, map[string]any{"type": piwire.CmdGetCheckpoints, "sessionId": s.id}, &out); err != nil {
		return nil, err
	}
	turns := make([]session.CheckpointTurn, len(out.Turns))
	for i, t := range out.Turns {
		turns[i] = session.CheckpointTurn{Turn: checkpoint.Turn{ID: t.ID, Prompt: t.Prompt}, Index: t.MessageIndex}
	}
	return turns, nil
}

func (s *remoteSession) TurnDiff(ctx context.Context, turn string) (*checkpoint.TurnDiff, error) {
	ctx, cancel := context.WithTimeout(ctx, remoteCallWait)
	defer cancel()
	cmd := map[string]any{"type": piwire.CmdGetTurnDiff, "sessionId": s.id}
	if turn != "" {
		cmd["turn"] = turn
	}
	var out piwire.TurnDiff
	if err := s.r.call(ctx, cmd, &out); err != nil {
		return nil, err
	}
	d := &checkpoint.TurnDiff{Turn: checkpoint.Turn{ID: out.Turn.ID, Prompt: out.Turn.Prompt}, Skipped: out.Skipped, Partial: out.Partial, Live: out.Live}
	for _, f := range out.Files {
		fd := checkpoint.FileDiff{Path: f.Path, Status: f.Status, Binary: f.Binary, Additions: f.Additions, Deletions: f.Deletions}
		fd.Before, fd.After = hunkTexts(f.Hunks)
		d.Files = append(d.Files, fd)
	}
	return d, nil
}

// hunkTexts are the old and new sides of hunks: each hunk's context and
// removed lines, and its context and added lines, hunks apart by a line
// of "…".
func hunkTexts(hs []piwire.DiffHunk) (before, after string) {
	var b, a strings.Builder
	for i, h := range hs {
		if i > 0 {
			b.WriteString("…\n")
			a.WriteString("…\n")
		}
		for j, l := range h.Lines {
			if l == "" || l[0] == '\\' {
				continue
			}
			nl := "\n"
			if j+1 < len(h.Lines) && strings.HasPrefix(h.Lines[j+1], `\`) {
				nl = ""
			}
			switch l[0] {
			case ' ':
				b.WriteString(l[1:] + nl)
				a.WriteString(l[1:] + nl)
			case '-':
				b.WriteString(l[1:] + nl)
			case '+':
				a.WriteString(l[1:] + nl)
			}
		}
	}
	return b.String(), a.String()
}
