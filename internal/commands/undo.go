package commands

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/session"
)

// undoBuiltins are /undo and /redo over the session's checkpoints
// (gptme's and opencode's names): the one implementation every face
// runs, REST's gptme /undo included.
func undoBuiltins() []Builtin {
	return []Builtin{
		{Name: "undo", Description: "Take back your last message: the files its turn changed go back as they were and the conversation returns to before it", Run: runUndo},
		{Name: "redo", Description: "Undo the last /undo or revert: the files and the conversation come back", Run: runRedo},
	}
}

func runUndo(ctx context.Context, c Call) (string, error) {
	return revertCommand(ctx, c, "undo", c.Session.Undo, func(r *session.RevertResult) string {
		msg := describeRevert("Undid your last message", r)
		if r.Truncated {
			msg += fmt.Sprintf(" The conversation is back before: %q.", clipArg(r.Prompt))
		}
		return msg + " /redo brings it back."
	})
}

func runRedo(ctx context.Context, c Call) (string, error) {
	return revertCommand(ctx, c, "redo", c.Session.UndoRevert, func(r *session.RevertResult) string {
		msg := describeRevert("Redid what the last undo took back", r)
		if r.Truncated {
			msg += " The conversation is back where it was."
		}
		return msg
	})
}

// revertCommand runs /undo or /redo: do, with no arguments; its result
// goes to the face as the command's detail and to the person as say
// puts it.
func revertCommand(ctx context.Context, c Call, name string, do func(context.Context) (*session.RevertResult, error), say func(*session.RevertResult) string) (string, error) {
	if strings.TrimSpace(c.Args) != "" {
		return "", fault.Errorf(fault.Invalid, "/%s takes no arguments (got %q)", name, clipArg(c.Args))
	}
	res, err := do(ctx)
	if err != nil {
		return "", err
	}
	c.Detail(res)
	return say(res), nil
}

// describeRevert says what a revert did, for a person.
func describeRevert(what string, r *session.RevertResult) string {
	var b strings.Builder
	b.WriteString(what + ".")
	if r.Restored != nil {
		if len(r.Written) > 0 {
			fmt.Fprintf(&b, " Restored: %s.", strings.Join(r.Written, ", "))
		}
		if len(r.Deleted) > 0 {
			fmt.Fprintf(&b, " Deleted: %s.", strings.Join(r.Deleted, ", "))
		}
		for _, k := range r.Kept {
			fmt.Fprintf(&b, " Left as it is: %s (%s).", k.Path, k.Reason)
		}
		if len(r.Written)+len(r.Deleted) == 0 {
			b.WriteString(" No files changed.")
		}
	}
	return b.String()
}

// clipArg shortens what a person typed or said for a one-line answer.
func clipArg(s string) string {
	if r := []rune(s); len(r) > 64 {
		return string(r[:64]) + "…"
	}
	return s
}
