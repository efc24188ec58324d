package convapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/mcp"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
)

// MCPStarter starts a conversation's own MCP servers; *mcp.Manager is
// one.
type MCPStarter interface {
	// Open starts the servers now.
	Open(ctx context.Context, servers []mcp.ServerConfig, cwd string) *mcp.Set
	// OpenLazy starts them when the Set's Start is called (auto_start
	// false: the conversation's first run).
	OpenLazy(servers []mcp.ServerConfig, cwd string) *mcp.Set
}

// customMCP is the custom entry in which a conversation's MCP
// configuration is kept in its file: GET config reads it there, and the
// conversation has its servers again when it loads after an unload or a
// restart. It holds the env and headers values as given: the servers
// need them when they start again.
const customMCP = "agentd.mcp"

// SecretPlaceholder stands for each value of a conversation's MCP env
// and headers in what the API answers (GET and PATCH config), so that
// the values reach neither clients nor the command journal, which keeps
// answers. Sent back in a PATCH for a server's key, it keeps the value
// stored for that key.
const SecretPlaceholder = "********"

// mcpServers are the conversations' running MCP servers, by session; an
// entry goes when its session closes or gets others.
type mcpServers struct {
	mu sync.Mutex
	m  map[*session.Session]*mcpEntry
}

// mcpEntry is one conversation's servers and what takes them away again.
type mcpEntry struct {
	servers *convMCP
	remove  func()
}

// convMCP is one conversation's MCP servers as its tool source. Those
// of a configuration with auto_start false start at the conversation's
// first run (Prepare) or when a request names their tools; the others
// when they are opened.
type convMCP struct {
	*mcp.Set
	id string

	mu sync.Mutex
	// health records a server that failed to start, as long as the
	// conversation has it. It is set when the servers become the
	// conversation's (useMCP): a refused change's servers never are, and
	// record nothing. nil without a health registry.
	health func(issue string) func()
	// noted: the failed servers are recorded, or the servers stopped and
	// none will be.
	noted     bool
	unhealthy []func()
}

// Prepare starts the servers of an auto_start false configuration for
// the run that needs their tools; see session.Preparer.
func (c *convMCP) Prepare(ctx context.Context) { c.start(ctx) }

// start starts the servers if they have not been, and records those that
// failed in health once they are the conversation's.
func (c *convMCP) start(ctx context.Context) {
	c.Start(ctx)
	c.note()
}

func (c *convMCP) note() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.health == nil || c.noted || !c.Started() {
		return
	}
	c.noted = true
	for _, u := range c.Unavailable() {
		// Health is read by every client, whoever owns the conversation:
		// it names the server, not the cause, which may quote what the
		// server printed (its own secrets). The conversation's config,
		// which only its owner reads, has the cause.
		c.unhealthy = append(c.unhealthy, c.health("Session "+c.id+": "+notStarted(u.Source)))
	}
}

// close stops the servers and clears their health issues.
func (c *convMCP) close() {
	if c == nil {
		return
	}
	c.Close()
	c.mu.Lock()
	c.noted = true
	fns := c.unhealthy
	c.unhealthy = nil
	c.mu.Unlock()
	for _, f := range fns {
		f()
	}
}

// noMCP is the custom entry that records that a conversation has no MCP
// section: what a refused PATCH puts back when the conversation had none
// before it (restoreConfig).
var noMCP = json.RawMessage("null")

// mcpOf is the MCP section a conversation was given, from its file; nil
// for none, or for one that cannot be read (restoreMCP says so).
func mcpOf(sess *session.Session) *MCPConfig {
	raw, _ := sess.Custom(customMCP)
	cfg, _ := mcpSection(raw)
	return cfg
}

// mcpSection reads the MCP section's custom entry raw (nil: none): nil
// for none, an error for an entry that cannot be read.
func mcpSection(raw json.RawMessage) (*MCPConfig, error) {
	if raw == nil || bytes.Equal(bytes.TrimSpace(raw), noMCP) {
		return nil, nil
	}
	var cfg MCPConfig
	if err := unmarshalInto(raw, &cfg); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// mayOffer reports whether name may be a tool of one of cfg's servers
// (<server>__<tool>); nil cfg has none.
func (cfg *MCPConfig) mayOffer(name string) bool {
	if cfg == nil {
		return false
	}
	for _, sc := range cfg.Servers {
		if mcp.IsToolOf(sc.Name, name) {
			return true
		}
	}
	return false
}

// decodeMCP reads gptme's mcp section: {enabled?, auto_start?,
// servers: [{name, enabled?, command, args?, env?} | {name, enabled?,
// url, headers?}]}. A bad field is a 400 naming it.
func (s *Server) decodeMCP(raw object, field string) (*MCPConfig, error) {
	bad := func(format string, args ...any) error {
		return fault.New(fault.Invalid, fmt.Sprintf(format, args...))
	}
	var o object
	if unmarshalInto(raw[field], &o) != nil || o == nil {
		return nil, bad("%s must be an object {enabled, auto_start, servers}", field)
	}
	if err := o.only("enabled", "auto_start", "servers"); err != nil {
		return nil, bad("%s: %s", field, err.Error())
	}
	cfg := &MCPConfig{Enabled: true, AutoStart: true, Servers: []MCPServerConfig{}}
	if v, ok, e := o.boolean("enabled"); e != nil {
		return nil, bad("%s.enabled must be a boolean", field)
	} else if ok {
		cfg.Enabled = v
	}
	if v, ok, e := o.boolean("auto_start"); e != nil {
		return nil, bad("%s.auto_start must be a boolean", field)
	} else if ok {
		cfg.AutoStart = v
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
			return nil, bad("%s: %s", at, err.Error())
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

// redacted is cfg as the API answers it: each env and headers value is
// SecretPlaceholder.
func redacted(cfg *MCPConfig) *MCPConfig {
	if cfg == nil {
		return nil
	}
	out := *cfg
	out.Servers = make([]MCPServerConfig, len(cfg.Servers))
	hide := func(m map[string]string) map[string]string {
		if m == nil {
			return nil
		}
		h := make(map[string]string, len(m))
		for k := range m {
			h[k] = SecretPlaceholder
		}
		return h
	}
	for i, sc := range cfg.Servers {
		sc.Env, sc.Headers = hide(sc.Env), hide(sc.Headers)
		out.Servers[i] = sc
	}
	return &out
}

// keepSecrets puts in place of each SecretPlaceholder of cfg the value
// old (the section the conversation has; nil for none) stores for that
// server and key: a client that read the section, changed it and sends
// it back keeps its secrets. A value goes only to the program it went to
// before: same name, same command or url, and the same args, since args
// can point the same command at another program (a script, an
// interpreter's -c) that would then read the value. A placeholder with
// no such value is a 400 naming it. field is the section's name in the
// request.
func keepSecrets(cfg, old *MCPConfig, field string) error {
	stored := map[string]MCPServerConfig{}
	if old != nil {
		for _, sc := range old.Servers {
			stored[sc.Name] = sc
		}
	}
	for i, sc := range cfg.Servers {
		prev, had := stored[sc.Name]
		changed := ""
		switch {
		case prev.Command != sc.Command:
			changed = "command"
		case prev.URL != sc.URL:
			changed = "url"
		case !slices.Equal(prev.Args, sc.Args):
			changed = "args"
		}
		for _, m := range []struct {
			key        string
			vals, from map[string]string
		}{
			{"env", sc.Env, prev.Env},
			{"headers", sc.Headers, prev.Headers},
		} {
			for k, v := range m.vals {
				if v != SecretPlaceholder {
					continue
				}
				at := fmt.Sprintf("%s.servers[%d].%s.%s", field, i, m.key, k)
				prevVal, ok := m.from[k]
				switch {
				case !had || !ok:
					return fault.New(fault.Invalid, fmt.Sprintf("%s: %q stands for the value the conversation has, and server %s has none for %s; send the value", at, SecretPlaceholder, clip(sc.Name, 100), clip(k, 100)))
				case changed != "":
					return fault.New(fault.Invalid, fmt.Sprintf("%s: %q keeps the value the conversation has only for the same command or url and args, and server %s's %s changed; send the value of %s again", at, SecretPlaceholder, clip(sc.Name, 100), changed, clip(k, 100)))
				}
				m.vals[k] = prevVal
			}
		}
	}
	return nil
}

// restoreMCP gives a conversation the MCP servers it was given before it
// was unloaded or the server restarted: started now, or at its first run
// when its configuration says auto_start false. Sessions of other faces
// have none recorded.
func (s *Server) restoreMCP(h *server.Hosted) {
	if s.opt.MCP == nil {
		return
	}
	raw, _ := h.Session().Custom(customMCP)
	cfg, err := mcpSection(raw)
	if err != nil {
		s.srv.Logger().Warn("unreadable MCP configuration in the conversation's file; it starts without its MCP servers", "session", h.ID(), "err", err)
		return
	}
	if cfg == nil {
		return
	}
	s.useMCP(h, s.openMCP(s.srv.Context(), h, cfg))
}

// openMCP makes the MCP servers of cfg for the conversation, without
// giving them to it yet (useMCP does): started now, unless cfg says
// auto_start false. A server that fails to start is in the servers'
// unavailable list; the conversation works without it. nil when cfg
// starts no server.
func (s *Server) openMCP(ctx context.Context, h *server.Hosted, cfg *MCPConfig) *convMCP {
	var servers []mcp.ServerConfig
	for _, sc := range cfg.Servers {
		if cfg.Enabled && sc.Enabled {
			servers = append(servers, mcp.ServerConfig{Name: sc.Name, Command: sc.Command, Args: sc.Args, Env: sc.Env, URL: sc.URL, Headers: sc.Headers})
		}
	}
	if len(servers) == 0 || s.opt.MCP == nil {
		return nil
	}
	c := &convMCP{id: h.ID()}
	if cfg.AutoStart {
		c.Set = s.opt.MCP.Open(ctx, servers, h.Cwd())
	} else {
		c.Set = s.opt.MCP.OpenLazy(servers, h.Cwd())
	}
	return c
}

// currentMCP is the conversation's MCP servers now, nil when it has none.
func (s *Server) currentMCP(sess *session.Session) *convMCP {
	s.mcp.mu.Lock()
	defer s.mcp.mu.Unlock()
	if e := s.mcp.m[sess]; e != nil {
		return e.servers
	}
	return nil
}

// useMCP gives the conversation the servers c (from openMCP; nil for
// none) in place of those it had, which stop. They stop when it closes.
func (s *Server) useMCP(h *server.Hosted, c *convMCP) {
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
	if c == nil {
		return
	}
	if hl := s.srv.Health(); hl != nil {
		c.mu.Lock()
		c.health = hl.Add
		c.mu.Unlock()
		c.note()
	}
	// In the map before the source is added: a session that closes at
	// once takes its entry with it.
	entry := &mcpEntry{servers: c}
	s.mcp.mu.Lock()
	if s.mcp.m == nil {
		s.mcp.m = map[*session.Session]*mcpEntry{}
	}
	s.mcp.m[sess] = entry
	s.mcp.mu.Unlock()
	remove = sess.AddToolSource(c, func() {
		c.close()
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

// mcpChange is a new mcp section being applied to a conversation: its
// servers are opened (and, for auto_start, started) before anything of
// the conversation changes, so that chat.tools in the same request can
// name their tools and a request refused leaves the conversation as it
// was.
type mcpChange struct {
	cfg  *MCPConfig
	next *convMCP
	done bool
}

// prepareMCP opens the servers of cfg for the conversation; cfg's
// placeholders have been resolved. nil cfg: no change.
func (s *Server) prepareMCP(ctx context.Context, h *server.Hosted, cfg *MCPConfig) *mcpChange {
	if cfg == nil {
		return nil
	}
	return &mcpChange{cfg: cfg, next: s.openMCP(ctx, h, cfg)}
}

// save records the section in the conversation's file.
func (m *mcpChange) save(sess *session.Session) error {
	return sess.SaveCustom(customMCP, m.cfg)
}

// use gives the conversation the new servers (the section is saved); the
// ones it had stop.
func (m *mcpChange) use(s *Server, h *server.Hosted) {
	m.done = true
	s.useMCP(h, m.next)
}

// abandon stops the servers of a change that was not committed.
func (m *mcpChange) abandon() {
	if m != nil && !m.done {
		m.done = true
		m.next.close()
	}
}

// checkToolNames checks a chat.tools list against the tools the
// conversation will have: its own, and its MCP servers' (those of
// change, when the request gives new ones). Servers that have not
// started (auto_start false) start when the list names one of them, so
// that their tools are known. A name nobody offers is a 400 naming it,
// with the servers that failed to start and why.
func (s *Server) checkToolNames(ctx context.Context, sess *session.Session, names []string, change *mcpChange) error {
	cur := s.currentMCP(sess)
	src := cur
	if change != nil {
		src = change.next
	}
	missing := func() ([]string, []string) {
		have := sess.AvailableTools()
		if change != nil && cur != nil {
			// The servers being replaced: their tools go.
			for _, t := range cur.Tools() {
				have = slices.DeleteFunc(have, func(n string) bool { return n == t.Spec().Name })
			}
		}
		if change != nil && src != nil {
			for _, t := range src.Tools() {
				have = append(have, t.Spec().Name)
			}
		}
		var out []string
		for _, n := range names {
			if !slices.Contains(have, n) {
				out = append(out, n)
			}
		}
		return out, have
	}
	out, have := missing()
	if len(out) > 0 && src != nil && !src.Started() && slices.ContainsFunc(out, src.Offers) {
		src.start(ctx)
		out, have = missing()
	}
	if len(out) == 0 {
		return nil
	}
	msg := fmt.Sprintf("Tool '%s' not found (this conversation's tools: %s)", clip(out[0], 100), strings.Join(have, ", "))
	e := fault.New(fault.Invalid, msg)
	if src != nil {
		// The causes may quote what a server printed (its secrets): the
		// sender reads them, the journal keeps the servers' names only.
		var causes, kept []string
		for _, u := range src.Unavailable() {
			causes = append(causes, u.Error)
			kept = append(kept, notStarted(u.Source))
		}
		if len(causes) > 0 {
			e.Message = msg + "; " + strings.Join(causes, "; ")
			e.Cause = keptMessage(msg + "; " + strings.Join(kept, "; "))
		}
	}
	return e
}

// notStarted is what is kept of an MCP server's start failure for
// replays: which server, not why (its stderr may quote a secret).
func notStarted(source string) string {
	return source + " did not start; the conversation's config says why"
}

// keptConfigAnswer is what the journal keeps of a config PATCH's answer:
// every env and headers value a placeholder, and a server that did not
// start named without the cause, which may quote what it printed. The
// owner's own answer, and GET config, have the cause.
func keptConfigAnswer(data json.RawMessage) json.RawMessage {
	var a ConfigResponse
	if err := json.Unmarshal(data, &a); err != nil {
		// Not an answer runConfig makes; keep nothing of it rather than
		// something unchecked.
		return json.RawMessage(`{"status":"ok","message":"Chat config updated"}`)
	}
	a.Config.MCP = redacted(a.Config.MCP)
	for i, u := range a.Config.Unavailable {
		a.Config.Unavailable[i].Error = notStarted(u.Source)
	}
	return marshal(a)
}
