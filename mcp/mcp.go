// Package mcp makes Model Context Protocol servers tool sources for
// agentd sessions: each server's tools (listed page by page) become agent
// tools named <server>__<tool>, with the server's JSON Schemas, and
// a call goes to the server's tools/call. The permission policy applies
// to them as to the built-in tools, because they are ordinary tools to
// the session.
//
// The wire is the official Go SDK's (github.com/modelcontextprotocol/go-sdk):
// it carries stdio and streamable HTTP, the protocol's version
// negotiation and pagination, which are not worth owning here.
package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentd-dev/agentd/llm"
	"github.com/agentd-dev/agentd/tool"
)

// ServerConfig is one MCP server: a command speaking MCP on its stdio,
// or a streamable HTTP endpoint.
type ServerConfig struct {
	Name    string            `json:"-"`
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// ParseConfig reads the {"mcpServers": {"name": {...}}} file editors and
// other agents use, servers in name order.
func ParseConfig(data []byte) ([]ServerConfig, error) {
	var f struct {
		Servers map[string]ServerConfig `json:"mcpServers"`
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("MCP configuration: %w", err)
	}
	var out []ServerConfig
	for name, s := range f.Servers {
		s.Name = name
		if err := s.check(); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ProjectFile is where a project keeps its MCP servers, relative to its
// directory.
const ProjectFile = ".agentd/mcp.json"

// LoadProject reads the project's MCP servers in dir; a project without
// the file has none.
func LoadProject(dir string) ([]ServerConfig, error) {
	p := filepath.Join(dir, ProjectFile)
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	servers, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return servers, nil
}

// Merge joins lists of servers; a server named again replaces the
// earlier one in its place.
func Merge(lists ...[]ServerConfig) []ServerConfig {
	var out []ServerConfig
	at := map[string]int{}
	for _, l := range lists {
		for _, c := range l {
			if i, ok := at[c.Name]; ok {
				out[i] = c
				continue
			}
			at[c.Name] = len(out)
			out = append(out, c)
		}
	}
	return out
}

func (s ServerConfig) check() error {
	switch {
	case s.Name == "":
		return errors.New("an MCP server needs a name")
	case s.Command == "" && s.URL == "":
		return fmt.Errorf("MCP server %s: needs a command or a url", s.Name)
	case s.Command != "" && s.URL != "":
		return fmt.Errorf("MCP server %s: has both a command and a url; give one", s.Name)
	}
	return nil
}

// Options configure a Manager.
type Options struct {
	// Environ is the environment stdio servers start with (os.Environ
	// form); a server's Env is added to it.
	Environ []string
	// HTTPClient carries streamable HTTP servers (http.DefaultClient if nil).
	HTTPClient *http.Client
	// CallTimeout bounds one tools/call (default 2 minutes).
	CallTimeout time.Duration
	// StartTimeout bounds starting a server and listing its tools
	// (default 30 s).
	StartTimeout time.Duration
	// Version is agentd's, told to the servers.
	Version string
	Logger  *slog.Logger
}

// Manager starts MCP servers for sessions.
type Manager struct{ opt Options }

// New returns a Manager.
func New(opt Options) *Manager {
	if opt.CallTimeout <= 0 {
		opt.CallTimeout = 2 * time.Minute
	}
	if opt.StartTimeout <= 0 {
		opt.StartTimeout = 30 * time.Second
	}
	if opt.HTTPClient == nil {
		opt.HTTPClient = http.DefaultClient
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{opt: opt}
}

// Start starts the servers for one session and returns their tools and
// the function that stops them all. A server that fails to start is left
// out and named in the returned error, and the others still serve: a
// session works without the tools it could not get.
func (m *Manager) Start(ctx context.Context, servers []ServerConfig, cwd string) ([]tool.Tool, func(), error) {
	var (
		tools []tool.Tool
		conns []*server
		errs  []error
	)
	for _, cfg := range servers {
		if err := cfg.check(); err != nil {
			errs = append(errs, err)
			continue
		}
		if cfg.Cwd == "" {
			cfg.Cwd = cwd
		}
		s := &server{m: m, cfg: cfg}
		ts, err := s.start(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("MCP server %s: %w", cfg.Name, err))
			s.close()
			continue
		}
		conns = append(conns, s)
		tools = append(tools, ts...)
	}
	stop := func() {
		var wg sync.WaitGroup
		for _, s := range conns {
			wg.Go(s.close)
		}
		wg.Wait()
	}
	return tools, stop, errors.Join(errs...)
}

// server is one running MCP server of a session. A server that died is
// started again by the next call, no sooner than its backoff allows.
type server struct {
	m   *Manager
	cfg ServerConfig

	mu       sync.Mutex
	cs       *sdk.ClientSession
	proc     *exec.Cmd
	closed   bool
	failures int
	retryAt  time.Time
}

func (s *server) transport() sdk.Transport {
	if s.cfg.URL != "" {
		c := *s.m.opt.HTTPClient
		if len(s.cfg.Headers) > 0 {
			base := c.Transport
			if base == nil {
				base = http.DefaultTransport
			}
			c.Transport = headerTransport{base: base, headers: s.cfg.Headers}
		}
		return &sdk.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: &c, MaxRetries: -1}
	}
	cmd := exec.Command(s.cfg.Command, s.cfg.Args...)
	cmd.Dir = s.cfg.Cwd
	cmd.Env = append([]string{}, s.m.opt.Environ...)
	for k, v := range s.cfg.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	ownGroup(cmd)
	s.proc = cmd
	return &sdk.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
}

type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	return h.base.RoundTrip(r)
}

// connect starts the server (s.mu held).
func (s *server) connect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.m.opt.StartTimeout)
	defer cancel()
	c := sdk.NewClient(&sdk.Implementation{Name: "agentd", Version: s.m.opt.Version}, &sdk.ClientOptions{Logger: s.m.opt.Logger})
	cs, err := c.Connect(ctx, s.transport(), nil)
	if err != nil {
		s.killGroup()
		return err
	}
	s.cs = cs
	return nil
}

// start connects and lists the server's tools, every page.
func (s *server) start(ctx context.Context) ([]tool.Tool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.connect(ctx); err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, s.m.opt.StartTimeout)
	defer cancel()
	var out []tool.Tool
	for t, err := range s.cs.Tools(lctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("listing tools: %w", err)
		}
		schema, err := json.Marshal(t.InputSchema)
		if err != nil || string(schema) == "null" {
			schema = []byte(`{"type":"object"}`)
		}
		out = append(out, &mcpTool{s: s, remote: t.Name,
			spec: llm.Tool{Name: ToolName(s.cfg.Name, t.Name), Description: t.Description, Parameters: schema}})
	}
	return out, nil
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9_-]`)

// ToolName is the agent tool name of an MCP server's tool, <server>__<tool>
// (the form other agents use, so policies carry over): providers
// accept letters, digits, _ and - up to 64 characters.
func ToolName(server, name string) string {
	n := unsafeName.ReplaceAllString(server, "_") + "__" + unsafeName.ReplaceAllString(name, "_")
	if len(n) > 64 {
		n = n[:64]
	}
	return n
}

// session returns the live connection, starting the server again when it
// died and the backoff allows.
func (s *server) session(ctx context.Context) (*sdk.ClientSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("the session's MCP servers were stopped")
	}
	if s.cs != nil {
		return s.cs, nil
	}
	if wait := time.Until(s.retryAt); wait > 0 {
		return nil, fmt.Errorf("the server stopped and is restarted in %s", wait.Round(100*time.Millisecond))
	}
	if err := s.connect(ctx); err != nil {
		s.failed()
		return nil, fmt.Errorf("restarting: %w", err)
	}
	return s.cs, nil
}

// failed backs off restarts: the first at once, then after 1 s, 2 s,
// 4 s ... up to 30 s while calls keep failing (s.mu held).
func (s *server) failed() {
	s.failures++
	if s.failures == 1 {
		s.retryAt = time.Time{}
		return
	}
	d := time.Second << min(s.failures-2, 5)
	s.retryAt = time.Now().Add(min(d, 30*time.Second))
}

// lost drops a connection that failed, so the next call restarts the
// server.
func (s *server) lost(cs *sdk.ClientSession) {
	s.mu.Lock()
	if s.cs != cs {
		s.mu.Unlock()
		return
	}
	s.cs = nil
	s.failed()
	s.mu.Unlock()
	// Kill first: a hung server would hold Close for its grace period.
	s.killGroup()
	_ = cs.Close()
}

func (s *server) close() {
	s.mu.Lock()
	s.closed = true
	cs := s.cs
	s.cs = nil
	s.mu.Unlock()
	if cs != nil {
		_ = cs.Close()
	}
	s.killGroup()
}

// killGroup ends whatever the server's command left running.
func (s *server) killGroup() {
	if s.proc != nil && s.proc.Process != nil {
		killGroup(s.proc)
	}
}

// mcpTool is one tool of an MCP server as an agent tool.
type mcpTool struct {
	s      *server
	remote string
	spec   llm.Tool
}

func (t *mcpTool) Spec() llm.Tool { return t.spec }

func (t *mcpTool) Execute(ctx context.Context, call tool.Call, _ func(tool.Result)) tool.Result {
	cs, err := t.s.session(ctx)
	if err != nil {
		return tool.Errorf("MCP server %s is not available: %v", t.s.cfg.Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, t.s.m.opt.CallTimeout)
	defer cancel()
	args := call.Args
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: t.remote, Arguments: args})
	switch {
	case err == nil:
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		// A server that hangs is stopped; the next call starts it again.
		t.s.lost(cs)
		return tool.Errorf("MCP tool %s timed out after %s", t.spec.Name, t.s.m.opt.CallTimeout)
	case ctx.Err() != nil:
		return tool.Errorf("Operation aborted")
	default:
		var answered *jsonrpc.Error
		if errors.As(err, &answered) && answered.Code != clientClosing && answered.Code != serverClosing {
			return tool.Errorf("MCP tool %s failed: %v", t.spec.Name, err)
		}
		t.s.lost(cs)
		return tool.Errorf("MCP server %s stopped during the call (%v); it is restarted for the next call", t.s.cfg.Name, err)
	}
	t.s.healthy()
	return Result(res)
}

// healthy restarts the backoff after a call that worked.
func (s *server) healthy() {
	s.mu.Lock()
	s.failures = 0
	s.mu.Unlock()
}

// The SDK's codes of a connection going away, which are not the
// server's answer.
const (
	clientClosing = -32003
	serverClosing = -32004
)

// Result maps an MCP tool result into an agent tool result: text and
// images as they are, other content described, the text cut to the
// limits of the built-in tools.
func Result(res *sdk.CallToolResult) tool.Result {
	var out tool.Result
	out.IsError = res.IsError
	budget := tool.MaxBytes
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			text := c.Text
			if len(text) > budget {
				cut := budget
				for cut > 0 && text[cut]&0xC0 == 0x80 {
					cut--
				}
				text = text[:cut] + fmt.Sprintf("\n[Output truncated: %d of %d bytes shown.]", cut, len(c.Text))
			}
			budget -= min(budget, len(text))
			out.Content = append(out.Content, llm.Text(text))
		case *sdk.ImageContent:
			out.Content = append(out.Content, llm.Image(base64.StdEncoding.EncodeToString(c.Data), c.MIMEType))
		case *sdk.EmbeddedResource:
			if c.Resource != nil && c.Resource.Text != "" {
				out.Content = append(out.Content, llm.Text(c.Resource.Text))
			} else if c.Resource != nil {
				out.Content = append(out.Content, llm.Text("[resource "+c.Resource.URI+"]"))
			}
		case *sdk.ResourceLink:
			out.Content = append(out.Content, llm.Text("[resource "+c.URI+"]"))
		case *sdk.AudioContent:
			out.Content = append(out.Content, llm.Text("[audio "+c.MIMEType+", not shown]"))
		}
	}
	if len(out.Content) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			out.Content = append(out.Content, llm.Text(string(b)))
		}
	}
	if len(out.Content) == 0 {
		out.Content = append(out.Content, llm.Text("(no output)"))
	}
	return out
}
