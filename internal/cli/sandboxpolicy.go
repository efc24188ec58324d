package cli

import (
	"github.com/agentd-dev/agentd/internal/config"
	"github.com/agentd-dev/agentd/internal/sandbox"
)

// policyOf is the sandbox policy the configuration describes, before a
// session adds its writable directories. A command that registers no
// sandbox flags (ask, where a person watches every step) leaves Mode
// empty: full access. It lives here, not in config, so that config holds
// plain values and does not import sandbox.
func policyOf(s config.Sandbox) sandbox.Policy {
	m, err := sandbox.ParseMode(s.Mode)
	if err != nil {
		m = sandbox.FullAccess
	}
	return sandbox.Policy{Mode: m, Network: s.Network || m == sandbox.FullAccess, Writable: append([]string(nil), s.AllowWrite...),
		Hidden: append([]string(nil), s.Hide...)}
}
