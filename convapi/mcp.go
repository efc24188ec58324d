package convapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"

	"github.com/agentd-dev/agentd/mcp"
	"github.com/agentd-dev/agentd/server"
	"github.com/agentd-dev/agentd/session"
)

// MCPStarter starts a conversation's own MCP servers; *mcp.Manager is
// one.
type MCPStarter interface {
	Open(ctx context.Context, servers []mcp.ServerConfig, cwd string) *mcp.Set
}

// customMCP is the custom entry in which a conversation's MCP
// configuration is kept in its file: GET config reads it there, and the
// conversation has its servers again when it loads after an unload or a
// restart.
const customMCP = "agentd.mcp"

// mcpServers take the running MCP servers away from the conversations
// that have some, by session; an entry goes when its session closes.
type mcpServers struct {
	mu sync.Mutex
	m  map[*session.Session]*mcpEntry
}

// mcpEntry is what takes one conversation's servers away again.
type mcpEntry struct{ remove func() }

// mcpOf is the MCP section a conversation was given, from its file.
func mcpOf(sess *session.Session) *MCPConfig {
	raw, ok := sess.Custom(customMCP)
	if !ok {
		return nil
	}
	var cfg MCPConfig
	if unmarshalInto(raw, &cfg) != nil {
		return nil
	}
	return &cfg
}

// decodeMCP reads gptme's mcp section: {enabled?, auto_start?,
// servers: [{name, enabled?, command, args?, env?} | {name, enabled?,
// url, headers?}]}. A bad field is a 400 naming it.
func (s *Server) decodeMCP(raw object, field string) (*MCPConfig, error) {
	bad := func(format string, args ...any) error {
		return errorf(http.StatusBadRequest, fmt.Sprintf(format, args...))
	}
	var o object
	if unmarshalInto(raw[field], &o) != nil || o == nil {
		return nil, bad("%s must be an object {enabled, auto_start, servers}", field)
	}
	if err := o.only("enabled", "auto_start", "servers"); err != nil {
		return nil, bad("%s: %s", field, err.(*apiError).msg)
	}
	cfg := &MCPConfig{Enabled: true, Servers: []MCPServerConfig{}}
	var err error
	if v, ok, e := o.boolean("enabled"); e != nil {
		return nil, bad("%s.enabled must be a boolean", field)
	} else if ok {
		cfg.Enabled = v
	}
	if cfg.AutoStart, _, err = o.boolean("auto_start"); err != nil {
		return nil, bad("%s.auto_start must be a boolean", field)
	}
	var items []object
	if o.present("servers") && (unmarshalInto(o["servers"], &items) != nil) {
		return nil, bad("%s.servers must be a list of objects", field)
	}
	names := map[string]bool{}
	for i, it := range items {
		at := fmt.Sprintf("%s.servers[%d]", field, i)
		if it == nil {
			return nil, bad("%s must be an object {name, command, args, env} or {name, url, headers}", at)
		}
		if err := it.only("name", "enabled", "command", "args", "env", "url", "headers"); err != nil {
			return nil, bad("%s: %s", at, err.(*apiError).msg)
		}
		sc := MCPServerConfig{Enabled: true}
		name, ok, err := it.str("name")
		if err != nil || !ok || name == "" {
			return nil, bad("%s.name is required: a non-empty string", at)
		}
		if names[name] {
			return nil, bad("%s.name: %q is given twice", at, clip(name, 100))
		}
		names[name] = true
		sc.Name = name
		if v, ok, err := it.boolean("enabled"); err != nil {
			return nil, bad("%s.enabled must be a boolean", at)
		} else if ok {
			sc.Enabled = v
		}
		if sc.Command, _, err = it.str("command"); err != nil {
			return nil, bad("%s.command must be a string", at)
		}
		if sc.Args, _, err = it.strings("args"); err != nil {
			return nil, bad("%s.args must be a list of strings", at)
		}
		if sc.URL, _, err = it.str("url"); err != nil {
			return nil, bad("%s.url must be a string", at)
		}
		for _, m := range []struct {
			key string
			to  *map[string]string
		}{{"env", &sc.Env}, {"headers", &sc.Headers}} {
			if it.present(m.key) && unmarshalInto(it[m.key], m.to) != nil {
				return nil, bad("%s.%s must be an object of strings", at, m.key)
			}
		}
		switch {
		case sc.Command == "" && sc.URL == "":
			return nil, bad("%s (%s): give a command (stdio) or a url (streamable HTTP)", at, clip(name, 100))
		case sc.Command != "" && sc.URL != "":
			return nil, bad("%s (%s): give a command or a url, not both", at, clip(name, 100))
		case len(sc.Headers) > 0 && sc.URL == "":
			return nil, bad("%s.headers: only a url server takes headers", at)
		case len(sc.Env) > 0 && sc.Command == "":
			return nil, bad("%s.env: only a command server takes env", at)
		}
		if sc.URL != "" {
			if u, err := url.Parse(sc.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, bad("%s.url: %q is not an http or https URL", at, clip(sc.URL, 200))
			}
		}
		cfg.Servers = append(cfg.Servers, sc)
	}
	if s.opt.MCP == nil && cfg.Enabled && len(cfg.Servers) > 0 {
		return nil, bad("%s: this server does not start MCP servers for conversations", field)
	}
	return cfg, nil
}

// saveMCP gives the conversation the MCP servers of cfg (setMCP) and
// records them in its file.
func (s *Server) saveMCP(ctx context.Context, h *server.Hosted, cfg *MCPConfig) error {
	if err := h.Session().SaveCustom(customMCP, cfg); err != nil {
		return err
	}
	s.setMCP(ctx, h, cfg)
	return nil
}

// restoreMCP starts the MCP servers a conversation was given before it
// was unloaded or the server restarted. Sessions of other faces have
// none recorded.
func (s *Server) restoreMCP(h *server.Hosted) {
	if s.opt.MCP == nil {
		return
	}
	if _, ok := h.Session().Custom(customMCP); !ok {
		return
	}
	cfg := mcpOf(h.Session())
	if cfg == nil {
		s.srv.Logger().Warn("unreadable MCP configuration in the conversation's file; it starts without its MCP servers", "session", h.ID())
		return
	}
	s.setMCP(s.srv.Context(), h, cfg)
}

// setMCP gives the conversation the MCP servers of cfg, in place of those
// it had: started now for it alone, stopped when it closes or gets
// others. A server that fails to start is in the configuration's
// unavailable list and in health while the conversation has it; the
// conversation works without it.
func (s *Server) setMCP(ctx context.Context, h *server.Hosted, cfg *MCPConfig) {
	sess := h.Session()
	var remove func()
	s.mcp.mu.Lock()
	if old := s.mcp.m[sess]; old != nil {
		remove = old.remove
	}
	delete(s.mcp.m, sess)
	s.mcp.mu.Unlock()
	if remove != nil {
		remove()
	}
	var servers []mcp.ServerConfig
	for _, sc := range cfg.Servers {
		if cfg.Enabled && sc.Enabled {
			servers = append(servers, mcp.ServerConfig{Name: sc.Name, Command: sc.Command, Args: sc.Args, Env: sc.Env, URL: sc.URL, Headers: sc.Headers})
		}
	}
	if len(servers) == 0 || s.opt.MCP == nil {
		return
	}
	set := s.opt.MCP.Open(ctx, servers, h.Cwd())
	var unhealthy []func()
	if hl := s.srv.Health(); hl != nil {
		for _, u := range set.Unavailable() {
			unhealthy = append(unhealthy, hl.Add("Session "+h.ID()+": "+u.Error))
		}
	}
	// In the map before the source is added: a session that closes at
	// once takes its entry with it.
	entry := &mcpEntry{}
	s.mcp.mu.Lock()
	if s.mcp.m == nil {
		s.mcp.m = map[*session.Session]*mcpEntry{}
	}
	s.mcp.m[sess] = entry
	s.mcp.mu.Unlock()
	remove = sess.AddToolSource(set, func() {
		set.Close()
		for _, f := range unhealthy {
			f()
		}
		s.mcp.mu.Lock()
		if s.mcp.m[sess] == entry {
			delete(s.mcp.m, sess)
		}
		s.mcp.mu.Unlock()
	})
	s.mcp.mu.Lock()
	entry.remove = remove
	s.mcp.mu.Unlock()
}
