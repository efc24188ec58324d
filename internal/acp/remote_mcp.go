package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/agentd-dev/agentd/internal/tool"
)

// The editor's MCP servers of a bridged session (agentd acp --connect)
// are the session's own MCP servers on agentd serve, set through the
// server's REST face (PATCH /api/v2/conversations/<id>/config, mcp): the
// server starts them under its sandbox and minimal-environment rules,
// exactly as for a REST client that gives a conversation its servers, and
// the session's tools are the server's. (The editor's commands then run
// where agentd serve runs, the same machine in the usual
// --connect ws://127.0.0.1 set-up.)

// remoteMCPTimeout bounds the request that starts the servers (their
// start has its own timeout on the server).
const remoteMCPTimeout = 2 * time.Minute

// restURL is the REST API's address on the server of r's WebSocket.
func (r *Remote) restURL(path string) (string, error) {
	u, err := url.Parse(r.url)
	if err != nil {
		return "", err
	}
	switch u.Scheme {
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: path}).String(), nil
}

// setMCP gives session id the editor's servers and returns those that
// failed to start, each with its cause.
func (r *Remote) setMCP(ctx context.Context, id string, servers []MCPServer) ([]tool.Unavailable, error) {
	type serverConfig struct {
		Name    string            `json:"name"`
		Enabled bool              `json:"enabled"`
		Command string            `json:"command,omitempty"`
		Args    []string          `json:"args,omitempty"`
		Env     map[string]string `json:"env,omitempty"`
		URL     string            `json:"url,omitempty"`
		Headers map[string]string `json:"headers,omitempty"`
	}
	var cfgs []serverConfig
	for _, s := range servers {
		c := serverConfig{Name: s.Name, Enabled: true, Command: s.Command, Args: s.Args, URL: s.URL}
		for _, e := range s.Env {
			if c.Env == nil {
				c.Env = map[string]string{}
			}
			c.Env[e.Name] = e.Value
		}
		for _, h := range s.Headers {
			if c.Headers == nil {
				c.Headers = map[string]string{}
			}
			c.Headers[h.Name] = h.Value
		}
		cfgs = append(cfgs, c)
	}
	body, err := json.Marshal(map[string]any{"mcp": map[string]any{"enabled": true, "auto_start": true, "servers": cfgs}})
	if err != nil {
		return nil, err
	}
	u, err := r.restURL("/api/v2/conversations/" + url.PathEscape(id) + "/config")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, remoteMCPTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPatch, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("giving the session its MCP servers on agentd serve: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var out struct {
		Error  string `json:"error"`
		Config struct {
			Unavailable []tool.Unavailable `json:"unavailable"`
		} `json:"config"`
	}
	_ = json.Unmarshal(b, &out)
	if resp.StatusCode != http.StatusOK {
		msg := out.Error
		if msg == "" {
			msg = resp.Status
		}
		return nil, &Error{Code: CodeInvalidParams, Message: "agentd serve refused the editor's MCP servers: " + msg}
	}
	return out.Config.Unavailable, nil
}
