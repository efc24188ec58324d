package session

import "github.com/agentd-dev/agentd/internal/tool"

// ToolEnv is the environment the session's tools were built with (its
// workspace, home and sandbox), for a face that acts on the workspace for
// a client under the same rules as the tools.
func (s *Session) ToolEnv() tool.Env { return s.cfg.BashEnv }
