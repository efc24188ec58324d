package cli

import (
	"log/slog"

	"github.com/agentd-dev/agentd/internal/config"
	"github.com/agentd-dev/agentd/internal/sandbox"
)

// readOnlySandbox is the policy bash runs under in a read-only mode
// (plan), or nil where the kernel cannot enforce it, which leaves bash
// out of those modes: agentd never pretends to confine. It is the
// engine's policy made read-only: the hidden paths of the configuration,
// the network as the engine's tools have it, and namespaces of their own
// unless the server runs confined tools without them.
func readOnlySandbox(sc config.Sandbox, engine sandbox.Policy, support sandbox.Support, log *slog.Logger) *sandbox.Policy {
	p := policyOf(sc)
	p.Mode = sandbox.ReadOnly
	p.Writable = nil
	p.Network = engine.Network || !engine.Confined()
	if err := support.Enforces(p); err != nil {
		log.Info("read-only modes (plan) have no bash: the kernel cannot confine it", "reason", err.Error())
		return nil
	}
	if engine.Confined() && support.Isolation != nil {
		// Landlock alone still refuses every write; what is lost is
		// hiding agentd's files and processes, which this server's
		// commands can read in the other modes too.
		p.NoIsolation = true
	}
	// An unconfined server did not probe for namespaces, and this does
	// not either (the probe starts a process at every start of agentd):
	// where commands cannot get them, a read-only command fails to
	// start, and nothing is written.
	return &p
}
