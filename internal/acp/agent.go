// Package acp is agentd's Agent Client Protocol face: an editor (Zed, the
// JetBrains and Neovim plugins) starts `agentd acp` and speaks ACP
// version 1 to it, newline-delimited JSON-RPC 2.0 over stdio. Sessions
// are ordinary agentd sessions (pi's transcript format, the same sessions
// directory); the policy's "ask" becomes session/request_permission, and
// the events of a run become session/update notifications.
//
// The JSON-RPC layer is this package's own, not an SDK's: ACP needs
// requests in both directions on one stream (the agent asks the editor
// for permission and files while the editor's prompt is in flight), and
// the Go SDKs lag the protocol; a small conn here keeps every wire fact
// under our tests.
package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/mcp"
	"github.com/agentd-dev/agentd/internal/piwire"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/tool"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// Spec says which session the face wants built.
type Spec struct {
	// Cwd is the directory the session's tools work in (absolute).
	Cwd string
	// File is a transcript to load; "" creates a new session.
	File string
	// Tools are added to the built-in tools; one named like a built-in
	// takes its place (the editor's file tools replace read and write).
	Tools []tool.Tool
}

// Sessions builds sessions; cli implements it over the engine.
type Sessions interface {
	Open(ctx context.Context, spec Spec) (*session.Session, error)
}

// ToolSource starts MCP servers for a session. The Set names a server
// that failed in Err while the others serve; it follows their tool
// lists as they change, and the session closes it.
type ToolSource interface {
	Open(ctx context.Context, servers []mcp.ServerConfig, cwd string) *mcp.Set
}

// Trust checks and records a person's trust in a project's file with
// exactly this content (package trust).
type Trust interface {
	Trusted(dir, file string, content []byte) bool
	Grant(dir, file string, content []byte) error
}

// Options configure an Agent.
type Options struct {
	Sessions Sessions
	// SessionsDir is the root of the session files (see transcript.SessionDir);
	// "" keeps sessions in memory, and session/load and session/list are
	// not offered.
	SessionsDir string
	// MCP starts MCP servers as tool sources (stdio and streamable
	// HTTP); nil refuses mcpServers.
	MCP ToolSource
	// MCPServers are started for every session (agentd's --mcp-config),
	// besides the project's .agentd/mcp.json and the client's
	// mcpServers; a later one of the same name wins.
	MCPServers []mcp.ServerConfig
	// Trust keeps the person's grants of project files: a project's
	// .agentd/mcp.json starts its servers only when trusted as it is,
	// and otherwise the editor is asked (session/request_permission)
	// once the session is open. nil trusts nothing and asks nothing.
	Trust Trust
	// Sandbox is the sandbox policy of a session in cwd, with its
	// writable directories resolved (what the engine gives its tools);
	// nil is full access. The editor's fs and terminal are held to it.
	Sandbox func(cwd string) sandbox.Policy
	// Remote, when set, is a running agentd serve whose sessions the face
	// bridges (`agentd acp --connect`): sessions are created, listed and
	// loaded there, and Sessions, SessionsDir and MCP are not used.
	Remote *Remote
	// Models are the models a local session may switch to
	// (session/set_model); nil offers only the session's own.
	Models func() []*llm.Model
	// Version is agentd's, reported in initialize.
	Version string
	// MaxLineBytes bounds one incoming line (default 10 MiB).
	MaxLineBytes int
	Logger       *slog.Logger
}

// Agent is the ACP agent side for one client connection.
type Agent struct {
	opt  Options
	log  *slog.Logger
	conn *conn

	mu       sync.Mutex
	caps     clientCapabilities
	sessions map[string]*acpSession
}

// New returns an Agent.
func New(opt Options) *Agent {
	if opt.MaxLineBytes <= 0 {
		opt.MaxLineBytes = 10 << 20
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	a := &Agent{opt: opt, log: opt.Logger, sessions: map[string]*acpSession{}}
	a.conn = newConn(a.handle, opt.MaxLineBytes, opt.Logger)
	return a
}

// Run serves the client on in and out until in ends or ctx is cancelled;
// then every run in progress is aborted and every session closed.
func (a *Agent) Run(ctx context.Context, in io.Reader, out io.Writer) error {
	return a.conn.serve(ctx, in, out, a.closeAll)
}

// closeAll closes every session; serve calls it before waiting for the
// handlers, so a prompt waiting on its run ends with it.
func (a *Agent) closeAll() {
	a.mu.Lock()
	all := make([]*acpSession, 0, len(a.sessions))
	for _, s := range a.sessions {
		all = append(all, s)
	}
	a.sessions = map[string]*acpSession{}
	a.mu.Unlock()
	for _, s := range all {
		s.close()
	}
}

func (a *Agent) handle(ctx context.Context, method string, params json.RawMessage) (any, error) {
	switch method {
	case "initialize":
		return a.initialize(params)
	case "authenticate":
		return struct{}{}, nil
	case "session/new":
		return a.newSession(ctx, params)
	case "session/load":
		if !a.canLoad() {
			break
		}
		return a.loadSession(ctx, params)
	case "session/resume":
		if !a.canLoad() {
			break
		}
		return a.reopen(ctx, "session/resume", params, false)
	case "session/fork":
		if !a.canFork() {
			break
		}
		return a.forkSession(ctx, params)
	case "session/list":
		if !a.canLoad() {
			break
		}
		return a.listSessions(ctx, params)
	case "session/prompt":
		return a.prompt(ctx, params)
	case "session/cancel":
		return a.cancel(params)
	case "session/close":
		return a.closeSession(params)
	case "session/set_mode":
		return a.setSessionMode(ctx, params)
	case "session/set_model":
		return a.setSessionModel(ctx, params)
	case "session/set_config_option":
		return a.setConfigOption(ctx, params)
	}
	return nil, &Error{Code: CodeMethodNotFound, Message: "Method not found: " + method}
}

// canLoad tells whether sessions outlive the connection, so that
// session/load and session/list make sense.
func (a *Agent) canLoad() bool { return a.opt.SessionsDir != "" || a.opt.Remote != nil }

// decodeParams reads a method's params into v, saying which field is
// wrong when they do not fit.
func decodeParams(method string, params json.RawMessage, v any) error {
	if len(params) == 0 || string(params) == "null" {
		return invalidParams(method, "params must be an object")
	}
	if err := json.Unmarshal(params, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			if te.Field == "" {
				return invalidParams(method, "params must be an object, not %s", te.Value)
			}
			return invalidParams(method, "%q must be %s, not %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
		}
		return invalidParams(method, "%s", piwire.DescribeJSONError(err))
	}
	return nil
}

func (a *Agent) initialize(params json.RawMessage) (any, error) {
	var p initializeParams
	if err := decodeParams("initialize", params, &p); err != nil {
		return nil, err
	}
	if p.ProtocolVersion == nil {
		return nil, invalidParams("initialize", "protocolVersion is required")
	}
	a.mu.Lock()
	a.caps = p.ClientCaps
	a.mu.Unlock()
	var r initializeResult
	// Version 1 is the only one there is; a client asking for another
	// learns ours and decides.
	r.ProtocolVersion = ProtocolVersion
	r.AuthMethods = []any{}
	r.AgentInfo = implementation{Name: "agentd", Title: "agentd", Version: a.opt.Version}
	r.AgentCaps.LoadSession = a.canLoad()
	r.AgentCaps.Prompt.Image = true
	r.AgentCaps.Prompt.EmbeddedContext = true
	r.AgentCaps.MCP.HTTP = a.opt.MCP != nil || a.opt.Remote != nil
	if a.canLoad() {
		r.AgentCaps.Session.List = &struct{}{}
	}
	r.AgentCaps.Session.Close = &struct{}{}
	if a.canLoad() {
		r.AgentCaps.Session.Resume = &struct{}{}
	}
	if a.canFork() {
		r.AgentCaps.Session.Fork = &struct{}{}
	}
	return r, nil
}

func (a *Agent) clientCaps() clientCapabilities {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.caps
}

func checkCwd(method string, cwd *string) (string, error) {
	if cwd == nil {
		return "", invalidParams(method, "cwd is required")
	}
	if !filepath.IsAbs(*cwd) {
		return "", invalidParams(method, "cwd must be an absolute path, not %q", *cwd)
	}
	return filepath.Clean(*cwd), nil
}

func (a *Agent) checkServers(method string, servers []MCPServer) error {
	for i, s := range servers {
		if s.Name == "" {
			return invalidParams(method, "mcpServers[%d]: name is required", i)
		}
		switch s.Type {
		case "":
			if s.Command == "" {
				return invalidParams(method, "mcpServers[%d] (%s): command is required", i, s.Name)
			}
		case "http":
			if a.opt.MCP == nil && a.opt.Remote == nil {
				return invalidParams(method, "mcpServers[%d] (%s): http servers are not supported (mcpCapabilities.http is false)", i, s.Name)
			}
			if s.URL == "" {
				return invalidParams(method, "mcpServers[%d] (%s): url is required", i, s.Name)
			}
		default:
			return invalidParams(method, "mcpServers[%d] (%s): type %q is not supported", i, s.Name, s.Type)
		}
	}
	if len(servers) > 0 && a.opt.MCP == nil && a.opt.Remote == nil {
		return invalidParams(method, "MCP servers are not enabled in this agentd")
	}
	return nil
}

func (a *Agent) newSession(ctx context.Context, params json.RawMessage) (any, error) {
	var p newSessionParams
	if err := decodeParams("session/new", params, &p); err != nil {
		return nil, err
	}
	cwd, err := checkCwd("session/new", p.Cwd)
	if err != nil {
		return nil, err
	}
	if err := a.checkServers("session/new", p.MCPServers); err != nil {
		return nil, err
	}
	ss, err := a.open(ctx, cwd, "", "", p.MCPServers)
	if err != nil {
		return nil, err
	}
	ss.listen()
	// The editor is asked about an untrusted project once it knows the
	// session.
	return afterReply{result: ss.setup(ctx, ss.id), then: func() {
		ss.sendCommands()
		ss.reportUnavailable()
		ss.askTrust()
	}}, nil
}

// open builds a session with the client's tools and the MCP servers'
// and registers it.
//
// Bridged to agentd serve, the session is the server's: created there,
// or loaded there by id; its tools are the server's.
func (a *Agent) open(ctx context.Context, cwd, file, id string, servers []MCPServer) (*acpSession, error) {
	ss := &acpSession{a: a, cwd: cwd, asking: map[string]context.CancelFunc{}, denied: map[string]bool{},
		terminals: map[string]string{}}
	ss.ctx, ss.stop = context.WithCancel(context.Background())
	if a.opt.Remote != nil {
		return a.openRemote(ctx, ss, servers, func() (conversation, error) {
			if id == "" {
				return a.opt.Remote.Create(ctx, cwd)
			}
			return a.opt.Remote.Load(ctx, id, cwd)
		})
	}
	ss.policy = sandbox.Policy{Mode: sandbox.FullAccess, Network: true}
	if a.opt.Sandbox != nil {
		ss.policy = a.opt.Sandbox(cwd)
	}
	tools := ss.clientTools(a.clientCaps())
	var set *mcp.Set
	cfgs, untrusted := a.mcpServers(cwd, servers)
	ss.untrusted = untrusted
	if len(cfgs) > 0 && a.opt.MCP != nil {
		set = a.opt.MCP.Open(ctx, cfgs, cwd)
		if err := set.Err(); err != nil {
			// The session works without the servers that failed.
			a.log.Warn("MCP servers", "cwd", cwd, "err", err)
		}
	}
	s, err := a.opt.Sessions.Open(ctx, Spec{Cwd: cwd, File: file, Tools: tools})
	if err != nil {
		ss.stop()
		if set != nil {
			set.Close()
		}
		return nil, err
	}
	if set != nil {
		// The session owns its servers: they stop when it closes.
		s.AddToolSource(set, set.Close)
	}
	ss.local = s
	ss.cfg = localSettings{s: s, models: a.opt.Models}
	return a.register(ss, s), nil
}

// register makes ss, on s, the connection's session of its id.
func (a *Agent) register(ss *acpSession, s conversation) *acpSession {
	ss.s = s
	ss.id = s.ID()
	st := s.Stats()
	ss.window, ss.cost = st.ContextWindow, st.Tokens.Cost.Total
	a.mu.Lock()
	old := a.sessions[ss.id]
	a.sessions[ss.id] = ss
	a.mu.Unlock()
	if old != nil {
		old.close()
	}
	return ss
}

// mcpServers are the servers of a session in cwd: agentd's, the
// project's if a person trusted its file as it is, the client's; by
// name, the later wins. An untrusted project file is returned to ask
// the editor about.
func (a *Agent) mcpServers(cwd string, client []MCPServer) ([]mcp.ServerConfig, *mcp.Project) {
	var trusted mcp.Trust
	if a.opt.Trust != nil {
		trusted = a.opt.Trust
	}
	project, err := mcp.LoadProject(cwd, trusted)
	var untrusted *mcp.UntrustedError
	switch {
	case errors.As(err, &untrusted):
		a.log.Warn("project MCP servers not started until the editor's user trusts them", "err", err)
	case err != nil:
		a.log.Warn("project MCP configuration", "err", err)
	}
	var fromClient []mcp.ServerConfig
	for _, s := range client {
		c := mcp.ServerConfig{Name: s.Name, Command: s.Command, Args: s.Args, URL: s.URL}
		if len(s.Env) > 0 {
			c.Env = map[string]string{}
			for _, e := range s.Env {
				c.Env[e.Name] = e.Value
			}
		}
		if len(s.Headers) > 0 {
			c.Headers = map[string]string{}
			for _, h := range s.Headers {
				c.Headers[h.Name] = h.Value
			}
		}
		fromClient = append(fromClient, c)
	}
	all := mcp.Merge(a.opt.MCPServers, project, fromClient)
	if untrusted == nil {
		return all, nil
	}
	// Asked about: the project's servers the editor's do not replace.
	p := *untrusted.Project
	p.Servers = nil
	for _, c := range untrusted.Project.Servers {
		// (nor agentd's: tools of one name would collide once they start).
		named := func(x mcp.ServerConfig) bool { return x.Name == c.Name }
		if !slices.ContainsFunc(fromClient, named) && !slices.ContainsFunc(a.opt.MCPServers, named) {
			p.Servers = append(p.Servers, c)
		}
	}
	if len(p.Servers) == 0 {
		return all, nil
	}
	return all, &p
}

func (a *Agent) session(method, id string) (*acpSession, error) {
	if id == "" {
		return nil, invalidParams(method, "sessionId is required")
	}
	a.mu.Lock()
	ss := a.sessions[id]
	a.mu.Unlock()
	if ss == nil {
		return nil, &Error{Code: CodeResourceNotFound, Message: fmt.Sprintf("Session %s is not open on this connection: create it with session/new or load it with session/load", id)}
	}
	return ss, nil
}

func (a *Agent) loadSession(ctx context.Context, params json.RawMessage) (any, error) {
	return a.reopen(ctx, "session/load", params, true)
}

// sessionRef reads the parameters that name a stored session (load,
// resume, fork): its id, a cwd that exists, MCP servers this agent can run.
func (a *Agent) sessionRef(method string, params json.RawMessage) (loadSessionParams, string, error) {
	var p loadSessionParams
	if err := decodeParams(method, params, &p); err != nil {
		return p, "", err
	}
	if p.SessionID == "" {
		return p, "", invalidParams(method, "sessionId is required")
	}
	cwd, err := checkCwd(method, p.Cwd)
	if err != nil {
		return p, "", err
	}
	return p, cwd, a.checkServers(method, p.MCPServers)
}

// reopen opens a stored session again: session/load replays its
// history to the client (replay), session/resume does not.
func (a *Agent) reopen(ctx context.Context, method string, params json.RawMessage, replay bool) (any, error) {
	p, cwd, err := a.sessionRef(method, params)
	if err != nil {
		return nil, err
	}
	var file string
	if a.opt.Remote == nil {
		info, ok := a.find(p.SessionID, cwd)
		if !ok {
			return nil, &Error{Code: CodeResourceNotFound, Message: "No session " + p.SessionID + " in " + a.opt.SessionsDir}
		}
		file = info.Path
	}
	a.mu.Lock()
	open := a.sessions[p.SessionID]
	if open != nil && open.s.Running() {
		a.mu.Unlock()
		return nil, fault.New(fault.Busy, "session "+p.SessionID+" is running a prompt; cancel it first")
	}
	delete(a.sessions, p.SessionID)
	a.mu.Unlock()
	if open != nil {
		// Loaded again: one session has the file open at a time.
		open.close()
	}
	ss, err := a.open(ctx, cwd, file, p.SessionID, p.MCPServers)
	if err != nil {
		return nil, err
	}
	if replay {
		ss.replay()
	}
	ss.listen()
	// Tool calls that were waiting for a person when the session was
	// last closed wait again: ask the editor, once it knows the session
	// is loaded.
	return afterReply{result: ss.setup(ctx, ""), then: func() {
		ss.sendCommands()
		ss.reportUnavailable()
		ss.askTrust()
		for _, req := range ss.s.Interactions() {
			ss.startAsk(req)
		}
	}}, nil
}

// find looks for a session file by id: in cwd's directory first, then
// everywhere.
func (a *Agent) find(id, cwd string) (transcript.Info, bool) {
	infos, _ := transcript.List(transcript.SessionDir(a.opt.SessionsDir, cwd))
	for _, in := range infos {
		if in.ID == id {
			return in, true
		}
	}
	infos, _ = transcript.ListAll(a.opt.SessionsDir)
	for _, in := range infos {
		if in.ID == id {
			return in, true
		}
	}
	return transcript.Info{}, false
}

func (a *Agent) listSessions(ctx context.Context, params json.RawMessage) (any, error) {
	var p listSessionsParams
	if len(params) > 0 && string(params) != "null" {
		if err := decodeParams("session/list", params, &p); err != nil {
			return nil, err
		}
	}
	if a.opt.Remote != nil {
		var cwd string
		if p.Cwd != nil && *p.Cwd != "" {
			c, err := checkCwd("session/list", p.Cwd)
			if err != nil {
				return nil, err
			}
			cwd = c
		}
		list, err := a.opt.Remote.List(ctx, cwd)
		if err != nil {
			return nil, fromRemote(err)
		}
		return listSessionsResult{Sessions: list}, nil
	}
	var infos []transcript.Info
	var err error
	if p.Cwd != nil && *p.Cwd != "" {
		cwd, cerr := checkCwd("session/list", p.Cwd)
		if cerr != nil {
			return nil, cerr
		}
		infos, err = transcript.List(transcript.SessionDir(a.opt.SessionsDir, cwd))
	} else {
		infos, err = transcript.ListAll(a.opt.SessionsDir)
	}
	if err != nil {
		return nil, fmt.Errorf("listing sessions: %w", err)
	}
	sort.SliceStable(infos, func(i, j int) bool { return infos[i].Modified.After(infos[j].Modified) })
	out := listSessionsResult{Sessions: make([]sessionInfo, 0, len(infos))}
	for _, in := range infos {
		si := sessionInfo{SessionID: in.ID, Cwd: in.Cwd}
		title := in.Name
		if title == "" {
			title = firstLine(in.FirstMessage, 80)
		}
		if title != "" {
			si.Title = &title
		}
		if !in.Modified.IsZero() {
			t := in.Modified.UTC().Format(time.RFC3339)
			si.UpdatedAt = &t
		}
		out.Sessions = append(out.Sessions, si)
	}
	return out, nil
}

func firstLine(s string, max int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > max {
		cut := max
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func (a *Agent) cancel(params json.RawMessage) (any, error) {
	var p sessionIDParams
	if err := decodeParams("session/cancel", params, &p); err != nil {
		return nil, err
	}
	ss, err := a.session("session/cancel", p.SessionID)
	if err != nil {
		return nil, err
	}
	ss.cancel()
	return nil, nil
}

func (a *Agent) closeSession(params json.RawMessage) (any, error) {
	var p sessionIDParams
	if err := decodeParams("session/close", params, &p); err != nil {
		return nil, err
	}
	ss, err := a.session("session/close", p.SessionID)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	if a.sessions[p.SessionID] == ss {
		delete(a.sessions, p.SessionID)
	}
	a.mu.Unlock()
	ss.close()
	return struct{}{}, nil
}
