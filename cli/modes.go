package cli

import (
	"log/slog"

	"github.com/agentd-dev/agentd/config"
	"github.com/agentd-dev/agentd/sandbox"
)

// readOnlySandbox is the policy bash runs under in a read-only mode
// (plan), or nil where the kernel cannot enforce it, which leaves bash
// out of those modes: agentd never pretends to confine. It is the
// engine's policy made read-only: the hidden paths of the configuration,
// the network as the engine's tools have it, and namespaces of their own
// where the system gives them.
func readOnlySandbox(sc config.Sandbox, engine sandbox.Policy, support sandbox.Support, log *slog.Logger) *sandbox.Policy {
	p := sc.Policy()
	p.Mode = sandbox.ReadOnly
	p.Writable = nil
	p.Network = engine.Network || !engine.Confined()
	if err := support.Enforces(p); err != nil {
		log.Info("read-only modes (plan) have no bash: the kernel cannot confine it", "reason", err.Error())
		return nil
	}
	isolation := support.Isolation
	if !engine.Confined() {
		// Not probed for a server whose tools are unconfined.
		isolation = sandbox.ProbeIsolation("/proc/self/exe")
	}
	if isolation != nil {
		// Landlock alone still refuses every write; what is lost is
		// hiding agentd's files and processes, which bash in the other
		// modes of this server can read anyway.
		p.NoIsolation = true
	}
	return &p
}
