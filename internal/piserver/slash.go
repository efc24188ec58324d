package piserver

import (
	"context"

	"github.com/agentd-dev/agentd/internal/commands"
)

// builtin runs a prompt, steer or follow_up whose message is a built-in
// command (/help, /compact, ...): the command's answer carries its
// output. ok is false for any other message.
func (s *Server) builtin(ctx context.Context, c *call) (any, bool, error) {
	if c.p.Message == nil || !commands.Of(c.h.Session()).IsBuiltin(*c.p.Message) {
		return nil, false, nil
	}
	out, _, err := c.h.Session().RunCommand(ctx, *c.p.Message)
	if err != nil {
		return nil, true, err
	}
	return map[string]any{"output": out}, true, nil
}
