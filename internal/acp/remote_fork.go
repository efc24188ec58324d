package acp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
)

// openRemote finishes a session bridged to agentd serve: get creates or
// loads it there; the editor's MCP servers become its own there.
func (a *Agent) openRemote(ctx context.Context, ss *acpSession, servers []MCPServer, get func() (conversation, error)) (*acpSession, error) {
	s, err := get()
	if err != nil {
		ss.stop()
		return nil, fromRemote(err)
	}
	if c, ok := s.(configurable); ok {
		ss.cfg = c
	}
	if len(servers) > 0 {
		// The editor's servers run on the server, as the session's own.
		failed, err := a.opt.Remote.setMCP(ctx, s.ID(), servers)
		if err != nil {
			_ = s.Close()
			ss.stop()
			return nil, fromRemote(err)
		}
		ss.remoteUnavailable = failed
	}
	return a.register(ss, s), nil
}

// Fork makes a session on the server whose history is session id's
// current branch, with pi-server's own commands, and returns its id; the
// caller then opens it as any other. pi's clone is in place (the
// session goes on in a new file holding a copy of its current branch),
// so:
//
//   - a session the server hosts is cloned, and the file it had is then
//     loaded as the new session: the source goes on, with the same
//     history, in the copy (its other branches stay in the fork's file);
//   - a stored one is loaded as the new session, which is then cloned:
//     the stored file is left as it was.
//
// Either way the server runs both steps under its own rules: clone
// refuses a session that is running, load_session keeps a file's sandbox
// mode and confines the paths it opens.
func (r *Remote) Fork(ctx context.Context, id string) (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	newID := "fork-" + hex.EncodeToString(b[:])
	var live struct {
		Sessions []remoteInfo `json:"sessions"`
	}
	if err := r.call(ctx, map[string]any{"type": "list_sessions"}, &live); err != nil {
		return "", err
	}
	for _, s := range live.Sessions {
		if s.SessionID != id {
			continue
		}
		if s.SessionFile == "" {
			return "", &Error{Code: CodeInvalidParams, Message: "session/fork: session " + id + " on agentd serve has no session file to copy"}
		}
		if err := r.call(ctx, map[string]any{"type": "clone", "sessionId": id}, nil); err != nil {
			return "", err
		}
		if err := r.call(ctx, map[string]any{"type": "load_session", "sessionPath": s.SessionFile, "sessionId": newID}, nil); err != nil {
			return "", err
		}
		return newID, nil
	}
	stored, err := r.stored(ctx)
	if err != nil {
		return "", err
	}
	for _, st := range stored {
		if st.SessionID != id || st.SessionPath == "" {
			continue
		}
		if err := r.call(ctx, map[string]any{"type": "load_session", "sessionPath": st.SessionPath, "sessionId": newID}, nil); err != nil {
			return "", err
		}
		if err := r.call(ctx, map[string]any{"type": "clone", "sessionId": newID}, nil); err != nil {
			_ = r.call(ctx, map[string]any{"type": "delete_session", "sessionId": newID}, nil)
			return "", err
		}
		return newID, nil
	}
	return "", &Error{Code: CodeResourceNotFound, Message: "No session " + id + " on agentd serve"}
}
