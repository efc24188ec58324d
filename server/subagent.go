package server

import (
	"context"

	"github.com/agentd-dev/agentd/engine"
	"github.com/agentd-dev/agentd/session"
	"github.com/agentd-dev/agentd/subagent"
)

// hostChild hosts the children a session's task tool starts as sessions
// of their own: under a new id, in the list, with the parent's owner, so
// every face can watch one as it watches any session (pi-server's
// switch_session, REST's events, the per-session WebSocket). The spec is
// the engine's for the child (its type, tools, and a sandbox no looser
// than the parent's); the server adds what it adds to every session.
func (s *Server) hostChild(owner func() string) engine.ChildHost {
	return func(ctx context.Context, spec engine.Spec) (subagent.Child, error) {
		h, err := s.openSpec(ctx, NewID(), spec.Cwd, "", owner(), spec.Sandbox, true, false, spec)
		if err != nil {
			return nil, err
		}
		return hostedChild{h}, nil
	}
}

// hostedChild is a child the server keeps after its task: its clients
// may read it, and it is unloaded as any idle session is.
type hostedChild struct{ h *Hosted }

func (c hostedChild) ID() string                { return c.h.id }
func (c hostedChild) Session() *session.Session { return c.h.sess }
func (c hostedChild) Release()                  {}
