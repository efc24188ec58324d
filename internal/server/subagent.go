package server

import (
	"context"

	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
	"github.com/agentd-dev/agentd/internal/subagent"
)

// hostChild hosts the children a session's task tool starts as sessions
// of their own: under a new id, in the list, with the parent's owner, so
// every face can watch one as it watches any session (pi-server's
// switch_session, REST's events, the per-session WebSocket). The spec is
// the engine's for the child (its type, tools, and a sandbox no looser
// than the parent's); the server adds what it adds to every session.
func (s *Server) hostChild(owner func() string) sessionspec.ChildHost {
	return func(ctx context.Context, spec sessionspec.Spec) (subagent.Child, error) {
		h, err := s.openSpec(ctx, NewID(), spec.Cwd, "", owner(), spec.Sandbox, true, false, spec)
		if err != nil {
			return nil, err
		}
		return hostedChild{s, h}, nil
	}
}

// hostedChild is a child the server hosts while its task runs.
type hostedChild struct {
	s *Server
	h *Hosted
}

func (c hostedChild) ID() string                { return c.h.id }
func (c hostedChild) Session() *session.Session { return c.h.sess }

// Release unloads the child when its task is over unless a client
// watches it: it stays known (listed, and loaded again by the first
// command naming it), so a model that starts child after child holds
// at most the ones running, not a session each, against the server's
// session limit.
func (c hostedChild) Release() {
	h := c.h
	if h.Subscribers() > 0 || h.sess.Running() || len(h.sess.Interactions()) > 0 {
		return
	}
	if err := c.s.unload(h, false); err != nil {
		c.s.log.Debug("unloading a finished subagent", "session", h.id, "err", err)
	}
}
