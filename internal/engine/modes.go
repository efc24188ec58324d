package engine

import (
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/modes"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/tool"
)

// modeParts are what a session needs for its modes: the modes of its
// cwd (built-in, global, project) and the bash its read-only modes run.
func (e *Engine) modeParts(env tool.Env, cwd, mode string) (*modes.Set, tool.Tool, error) {
	set := modes.Load(e.opt.Modes, cwd)
	for _, w := range set.Warnings {
		e.opt.Logger.Warn("mode file skipped", "reason", w)
	}
	if _, ok := set.Find(mode); mode != "" && !ok {
		return nil, nil, fault.New(fault.Invalid, set.UnknownError(mode).Error())
	}
	if e.opt.ReadOnlySandbox == nil {
		return set, nil, nil
	}
	// The same bash, in the same Scope (its processes end with the
	// session), under the read-only sandbox: nothing it starts can write
	// a file, whatever the command. Nobody is asked to widen it: a
	// read-only mode that let a person say "write this once" would not
	// be read-only; switching to another mode is how to write.
	p := *e.opt.ReadOnlySandbox
	p.Mode = sandbox.ReadOnly
	// Kept visible (read-only mode writes none of them).
	p.Writable = append([]string{cwd, e.opt.TempDir}, p.Writable...)
	box := sandbox.NewBox(p, e.opt.SandboxExe)
	scope := env.Scope
	box.SetPeers(func() []string { return e.peersOf(scope) })
	env.Sandbox = box
	t, err := tool.New("bash", env)
	if err != nil {
		return nil, nil, err
	}
	return set, t, nil
}
