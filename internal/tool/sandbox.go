package tool

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/agentd-dev/agentd/internal/sandbox"
)

// refusedBySandbox says what access a finished run seems to have been
// refused by policy; nothing when it succeeded, was stopped, or ran
// unconfined.
func refusedBySandbox(policy sandbox.Policy, run BashRun) sandbox.Need {
	if !policy.Confined() || run.ExitCode == nil || run.Aborted || run.TimedOut || run.Limit != "" {
		return sandbox.Need{}
	}
	return sandbox.Diagnose(policy, run.Output)
}

// escalate asks the person whether a command the sandbox refused may run
// again with the access it needs, and reruns it if so. It returns the
// run to report and a note for the model.
func (t *bashTool) escalate(ctx context.Context, call Call, policy sandbox.Policy, need sandbox.Need, command string,
	timeout float64, keep bool, onOutput func(string, BashDetails), refused BashRun) (BashRun, string) {
	box := t.env.Sandbox
	if !box.CanAsk() {
		return refused, fmt.Sprintf("[The sandbox (%s) probably refused this: the command needs to %s. Stay inside what the sandbox allows, or tell the user what you need and why.]",
			policy.Describe(), need.Describe(policy))
	}
	tail := refused.Output
	if len(tail) > 2000 {
		tail = tail[len(tail)-2000:]
	}
	answer := box.Ask(ctx, sandbox.Request{ToolCallID: call.ID, ToolName: call.Name, Args: call.Args,
		Command: command, Need: need, Policy: policy, Output: tail})
	if answer == sandbox.Deny {
		return refused, fmt.Sprintf("[The sandbox (%s) refused this: the command needs to %s, and the user did not allow it. Do not try to get around the sandbox; work inside it or ask the user.]",
			policy.Describe(), need.Describe(policy))
	}
	if ctx.Err() != nil {
		return refused, ""
	}
	run := runBashUnder(ctx, t.env, policy.Widen(need), command, timeout, keep, onOutput)
	scope := "this once"
	if answer == sandbox.Always {
		scope = "for the rest of the session"
	}
	return run, fmt.Sprintf("[The sandbox refused the first attempt; the user allowed it to %s %s (nothing more), and the whole command was run again from the start, so what it did before the refusal was done twice.]", need.Describe(policy), scope)
}

// checkWritable refuses a write or edit of abs that the session's
// sandbox does not allow, with a message the model can act on. Links are
// resolved first, so a link in the workspace pointing elsewhere is
// judged by where it leads.
func (e Env) checkWritable(abs, path string) *Result {
	if e.Sandbox == nil {
		return nil
	}
	p := e.Sandbox.Policy()
	if !p.Confined() {
		return nil
	}
	real, err := sandbox.RealPath(abs)
	if err != nil {
		r := Errorf("Cannot write %s: the sandbox could not resolve where it leads (%v).", path, err)
		return &r
	}
	if p.AllowsWrite(real) {
		return nil
	}
	where := ""
	if real != abs {
		where = " (it leads to " + real + ")"
	}
	r := Errorf("Cannot write %s%s: the sandbox (%s) does not allow it. Write inside the workspace, or ask the user to do it.",
		path, where, p.Describe())
	return &r
}

// checkReadable refuses to read (or list, or search) abs when the
// session's sandbox hides it: agentd's own files, key files and other
// sessions' workspaces are as closed to the file tools as to bash.
func (e Env) checkReadable(abs, path string) *Result {
	if e.Sandbox == nil {
		return nil
	}
	p := e.Sandbox.Policy()
	if !p.Confined() || len(p.Hidden) == 0 {
		return nil
	}
	real, err := sandbox.RealPath(abs)
	if err != nil {
		r := Errorf("Cannot read %s: the sandbox could not resolve where it leads (%v).", path, err)
		return &r
	}
	if p.AllowsRead(real) || e.readGranted(real) {
		return nil
	}
	r := Errorf("Cannot read %s: the sandbox hides it (agentd's own files, key files and other sessions' workspaces are not for tools).", path)
	return &r
}

// hiddenUnder returns what walkTree leaves out under root, or nil
// when the sandbox hides nothing: a hidden file, and a hidden directory
// unless one of the session's own lies in it (as bash sees them).
func (e Env) hiddenUnder(root string) func(rel string, isDir bool) bool {
	if e.Sandbox == nil {
		return nil
	}
	p := e.Sandbox.Policy()
	if !p.Confined() || len(p.Hidden) == 0 {
		return nil
	}
	real, err := sandbox.RealPath(root)
	if err != nil {
		return func(string, bool) bool { return true }
	}
	// The walk follows no links, so below a real root every path is real.
	return func(rel string, isDir bool) bool {
		path := filepath.Join(real, rel)
		if p.AllowsRead(path) || e.readGranted(path) {
			return false
		}
		return !isDir || !p.ShowsWithin(path)
	}
}

// readGranted reports whether real (links resolved) is one of the
// session's skills' files (see Env.ReadAlso).
func (e Env) readGranted(real string) bool {
	for _, g := range e.ReadAlso {
		rel, err := filepath.Rel(g, real)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel) {
			return true
		}
	}
	return false
}
