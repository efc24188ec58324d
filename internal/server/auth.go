package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"time"
)

// AuthRequest describes a connection to authenticate.
type AuthRequest struct {
	// Transport is "websocket" or "stdio".
	Transport string `json:"transport"`
	// Remote is the peer's address ("" for stdio).
	Remote string `json:"remote,omitempty"`
	// Path and Headers are the WebSocket handshake's.
	Path    string              `json:"path,omitempty"`
	Headers map[string][]string `json:"headers,omitempty"`
}

// AuthResult is an authenticator's verdict. Reason is shown to a refused
// client; Identity, when set, names the client in the logs.
type AuthResult struct {
	Allowed  bool   `json:"allowed"`
	Reason   string `json:"reason,omitempty"`
	Identity string `json:"identity,omitempty"`
}

// Authenticator decides whether a connection may use the server, besides
// the token check. Faces ask it once per connection, before anything is
// sent.
type Authenticator interface {
	Authenticate(ctx context.Context, r AuthRequest) AuthResult
}

// CommandAuthenticator asks an operator's program: it runs Argv with the
// AuthRequest as JSON on stdin and reads an AuthResult as JSON from
// stdout. A program that fails, times out or answers something else
// refuses the connection: authentication fails closed.
type CommandAuthenticator struct {
	Argv    []string
	Timeout time.Duration // default 10 s
}

// Authenticate implements Authenticator.
func (a CommandAuthenticator) Authenticate(ctx context.Context, r AuthRequest) AuthResult {
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	in, _ := json.Marshal(r)
	cmd := exec.CommandContext(ctx, a.Argv[0], a.Argv[1:]...)
	cmd.Stdin = bytes.NewReader(in)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	var res AuthResult
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		err = fmt.Errorf("no answer within %s", timeout)
	case err == nil:
		dec := json.NewDecoder(&out)
		dec.DisallowUnknownFields()
		err = dec.Decode(&res)
	}
	if err != nil {
		return AuthResult{Reason: "Authentication failed: the auth command did not answer (" + strings.TrimSpace(clip(err.Error()+" "+stderr.String(), 200)) + ")"}
	}
	if !res.Allowed && res.Reason == "" {
		res.Reason = "Not allowed"
	}
	return res
}

// RequestOf builds the AuthRequest of an HTTP request (a WebSocket
// handshake): the authenticator sees its headers, credentials included,
// since checking them may be its job.
func RequestOf(transport string, r *http.Request) AuthRequest {
	return AuthRequest{Transport: transport, Remote: r.RemoteAddr, Path: r.URL.RequestURI(), Headers: r.Header.Clone()}
}

// Authenticate asks the configured authenticator, if any, about a
// connection; with none, every connection that passed the token check is
// allowed.
func (s *Server) Authenticate(ctx context.Context, r AuthRequest) AuthResult {
	if s.cfg.Auth == nil {
		return AuthResult{Allowed: true}
	}
	res := s.cfg.Auth.Authenticate(ctx, r)
	if !res.Allowed {
		s.log.Info("connection refused by the authenticator", "transport", r.Transport, "remote", r.Remote, "reason", res.Reason)
	}
	return res
}
