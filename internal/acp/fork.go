package acp

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// canFork tells whether session/fork is offered: a local agentd acp
// with session files (a fork is a new file holding a copy of the
// source's current branch), or the bridge (agentd serve forks with its
// clone command, Remote.Fork).
func (a *Agent) canFork() bool { return a.opt.SessionsDir != "" || a.opt.Remote != nil }

// forkSession serves session/fork: a new session, on this connection,
// whose history is the source's current branch; the source is left as
// it is, open or not.
func (a *Agent) forkSession(ctx context.Context, params json.RawMessage) (any, error) {
	const method = "session/fork"
	p, cwd, err := a.sessionRef(method, params)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	open := a.sessions[p.SessionID]
	a.mu.Unlock()
	if a.opt.Remote != nil {
		if open != nil && open.s.Running() {
			return nil, fault.New(fault.Busy, "session "+p.SessionID+" is running a prompt; fork it once the prompt ends, or cancel it")
		}
		id, err := a.opt.Remote.Fork(ctx, p.SessionID)
		if err != nil {
			return nil, fromRemote(err)
		}
		ss, err := a.open(ctx, cwd, "", id, p.MCPServers)
		if err != nil {
			return nil, err
		}
		ss.listen()
		return afterReply{result: ss.setup(ctx, ss.id), then: func() {
			ss.sendCommands()
			ss.reportUnavailable()
		}}, nil
	}
	var path string
	if open != nil && open.local != nil {
		if open.s.Running() {
			return nil, fault.New(fault.Busy, "session "+p.SessionID+" is running a prompt; fork it once the prompt ends, or cancel it")
		}
		path = open.local.File()
	} else {
		info, ok := a.find(p.SessionID, cwd)
		if !ok {
			return nil, &Error{Code: CodeResourceNotFound, Message: "No session " + p.SessionID + " in " + a.opt.SessionsDir}
		}
		path = info.Path
	}
	src, err := transcript.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening session %s to fork it: %w", p.SessionID, err)
	}
	nf, err := src.Clone(a.opt.SessionsDir)
	src.Close()
	if err != nil {
		return nil, fmt.Errorf("forking session %s: %w", p.SessionID, err)
	}
	file := nf.Path()
	nf.Close()
	ss, err := a.open(ctx, cwd, file, "", p.MCPServers)
	if err != nil {
		return nil, err
	}
	ss.listen()
	return afterReply{result: newSessionResult{SessionID: ss.id}, then: func() {
		ss.sendCommands()
		ss.reportUnavailable()
		ss.askTrust()
	}}, nil
}
