package piserver

import (
	"context"

	"github.com/agentd-dev/agentd/internal/piwire"
)

// getModes answers agentd's get_modes: the session's mode and the modes
// it may switch to.
func (s *Server) getModes(_ context.Context, c *call) (any, error) {
	return piwire.ModesOf(c.h.Session()), nil
}

// setMode answers agentd's set_mode {"mode": "plan"}: the session
// switches (session.SetMode, whose error names the modes there are),
// and the answer is get_modes'.
func (s *Server) setMode(_ context.Context, c *call) (any, error) {
	sess := c.h.Session()
	if err := sess.SetMode(c.p.Mode); err != nil {
		return nil, err
	}
	return piwire.ModesOf(sess), nil
}
