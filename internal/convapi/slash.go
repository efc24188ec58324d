package convapi

import (
	"context"
	"net/http"

	"github.com/agentd-dev/agentd/internal/commands"
	"github.com/agentd-dev/agentd/internal/session"
)

// CommandsResponse answers GET .../commands: what a message can start
// with, in pi's get_commands shape, and the skills.
type CommandsResponse struct {
	Commands []commands.Command `json:"commands"`
	Skills   []commands.Skill   `json:"skills"`
	// Warnings say what was wrong with the skill and template files
	// found (a skill with no description is not loaded).
	Warnings []commands.Warning `json:"warnings,omitempty"`
}

// CommandResponse answers a message that was a built-in command
// (/help, /compact, ...): the command ran instead of being added, and
// Output is what it says. There is nothing to step after it.
type CommandResponse struct {
	Status  string `json:"status"`
	Command string `json:"command"`
	Output  string `json:"output"`
	// Undo is what /undo (gptme's) or /redo did to the files and the
	// conversation.
	Undo *RevertResponse `json:"undo,omitempty"`
}

func (s *Server) getCommands(w http.ResponseWriter, r *http.Request, p params) error {
	h, err := s.conversation(r.Context(), p.conv)
	if err != nil {
		return err
	}
	cat := commands.Of(h.Session())
	resp := CommandsResponse{Commands: cat.List(), Skills: cat.Skills(), Warnings: cat.Warnings()}
	if resp.Skills == nil {
		resp.Skills = []commands.Skill{}
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// runBuiltin runs a user message that is a built-in command, as
// gptme's clients expect of "/help" and the like; ok is false for any
// other message.
func runBuiltin(ctx context.Context, sess *session.Session, in inputPayload) (any, bool, error) {
	if in.Role != "user" || !commands.Of(sess).IsBuiltin(in.Content) {
		return nil, false, nil
	}
	out, detail, _, err := commands.Of(sess).RunDetail(ctx, sess, in.Content)
	if err != nil {
		return nil, true, err
	}
	name, _, _ := commands.Split(in.Content)
	resp := CommandResponse{Status: "ok", Command: name, Output: out}
	if r, ok := detail.(*session.RevertResult); ok {
		rr := revertResponse(r)
		resp.Undo = &rr
	}
	return resp, true, nil
}
