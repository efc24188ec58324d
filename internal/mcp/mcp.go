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
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/tool"
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
// directory. It names commands agentd would start, and a model working
// in the project can write it: its servers start only for a project a
// person trusted (see LoadProject).
const ProjectFile = ".agentd/mcp.json"

// Project is a project's MCP configuration as read: the bytes a person
// is asked to trust and the servers parsed from exactly those bytes, so
// what starts is what was trusted.
type Project struct {
	// Dir is the project directory; Path the file.
	Dir, Path string
	Data      []byte
	Servers   []ServerConfig
}

// ReadProject reads the project's MCP configuration in dir, trusted or
// not; nil for a project without the file.
func ReadProject(dir string) (*Project, error) {
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
	return &Project{Dir: dir, Path: p, Data: data, Servers: servers}, nil
}

// Trust says whether a person trusted a project's file with exactly
// this content (package trust keeps the grants).
type Trust interface {
	Trusted(dir, file string, content []byte) bool
}

// UntrustedError is a project's MCP configuration that was not used
// because nobody trusted it as it is: a model that can write the project
// could have written it.
type UntrustedError struct{ Project *Project }

func (e *UntrustedError) Error() string {
	return fmt.Sprintf("the MCP servers of %s were not started: this project is not trusted (or the file changed since it was), and a model working in the project could have written it; to trust the file as it is now, run: agentd trust %s",
		e.Project.Path, e.Project.Dir)
}

// LoadProject reads the project's MCP servers in dir and returns them
// if t trusts the file as it is; an untrusted file gives no servers and
// an *UntrustedError with the file (its servers, to ask a person about).
// A project without the file has none; nil t trusts nothing.
func LoadProject(dir string, t Trust) ([]ServerConfig, error) {
	p, err := ReadProject(dir)
	if err != nil || p == nil {
		return nil, err
	}
	if t == nil || !t.Trusted(dir, ProjectFile, p.Data) {
		return nil, &UntrustedError{Project: p}
	}
	return p.Servers, nil
}

// Notice is a tool source with no tools that names why some are missing:
// an untrusted project configuration, reported where failed servers are
// (get_tools' unavailable, agentd tools).
type Notice []tool.Unavailable

// Tools are none.
func (Notice) Tools() []tool.Tool { return nil }

// Watch never calls changed: a notice does not change.
func (Notice) Watch(func()) func() { return func() {} }

// Unavailable is the notice.
func (n Notice) Unavailable() []tool.Unavailable { return n }

// UntrustedNotice is the notice of an untrusted project file.
func UntrustedNotice(e *UntrustedError) Notice {
	return Notice{{Source: "project:" + e.Project.Path, Error: e.Error()}}
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
	// Environ is agentd's environment (os.Environ form). A stdio server
	// gets only BaseEnv of it, and the variables its configuration
	// names (Env): never agentd's keys and token.
	Environ []string
	// Sandbox is the policy stdio servers run under, applied through
	// the helper executable SandboxExe (see sandbox.Policy.Wrap): a
	// confining policy is given the network (MCP servers often need
	// it) and, in workspace-write, the session's directory, the
	// server's cwd and TempDir to write. The zero value is full access.
	Sandbox    sandbox.Policy
	SandboxExe string
	// TempDir is the temp dir servers may write in workspace-write.
	TempDir string
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
	if opt.SandboxExe == "" {
		opt.SandboxExe = "/proc/self/exe"
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{opt: opt}
}

// Start starts the servers for one session and returns their tools and
// the function that stops them all. A server that fails to start is left
// out and named in the returned error, and the others still serve: a
// session works without the tools it could not get. The tools are those
// listed at start; Open's Set follows the servers' later changes.
func (m *Manager) Start(ctx context.Context, servers []ServerConfig, cwd string) ([]tool.Tool, func(), error) {
	set := m.Open(ctx, servers, cwd)
	return set.Tools(), set.Close, set.Err()
}

// Open starts the servers of one owner (a session, or agentd serve for
// all of its sessions) and returns them as a Set, which follows each
// server's tool list as it changes. A server that fails to start stays
// in the Set as a StartError, in Err and Unavailable, and the others
// serve. Close the Set to stop them all.
func (m *Manager) Open(ctx context.Context, servers []ServerConfig, cwd string) *Set {
	set := m.OpenLazy(servers, cwd)
	set.Start(ctx)
	return set
}

// OpenLazy is Open without starting anything: the Set has no tools until
// Start, which the owner calls when it first needs them (a conversation
// whose configuration says auto_start false, at its first run). Close
// stops what was started, if anything.
func (m *Manager) OpenLazy(servers []ServerConfig, cwd string) *Set {
	set := &Set{watchers: map[int]func(){}}
	set.ctx, set.cancel = context.WithCancel(context.Background())
	for _, cfg := range servers {
		if cfg.Cwd == "" {
			cfg.Cwd = cwd
		}
		set.servers = append(set.servers, &server{m: m, set: set, cfg: cfg, workspace: cwd, changed: make(chan struct{}, 1)})
	}
	return set
}

// OpenBackground is Open without waiting: the servers start on the
// Set's own goroutine, and the owner has each one's tools when it is
// ready, told by Watch, so a server slow to answer (or never answering)
// holds nobody. Until then Unavailable names it as starting, and if it
// fails, why. Close stops the start under way.
func (m *Manager) OpenBackground(servers []ServerConfig, cwd string) *Set {
	set := m.OpenLazy(servers, cwd)
	set.ready = make(chan struct{}, 1)
	set.background = make(chan struct{})
	set.mu.Lock()
	set.starting = true
	set.mu.Unlock()
	go set.startBackground()
	return set
}

// startBackground starts the servers and tells the watchers as each
// comes up, and once all settled.
func (set *Set) startBackground() {
	defer close(set.background)
	done := make(chan struct{})
	// Ends with the start, which Close cuts short; waited for below.
	go func() {
		defer close(done)
		set.start(set.ctx)
	}()
	for {
		select {
		case <-set.ready:
			set.notify()
		case <-done:
			set.mu.Lock()
			set.starting = false
			set.mu.Unlock()
			set.notify()
			return
		}
	}
}

// Start starts the Set's servers, once: a later call, or one while
// another is under way, waits for the first and does nothing more. A
// server that fails is left out as in Open. Close aborts a Start under
// way. The watchers are told when tools came with it. A Start whose own
// ctx ends first has not started what it did not get to: the servers it
// gave up on are the next Start's, not failed for good with the
// caller's context error.
func (set *Set) Start(ctx context.Context) {
	// The watchers are told with nothing held: one may call back in.
	if set.start(ctx) {
		set.notify()
	}
}

// start is Start but telling the watchers; it reports whether a server
// came up.
func (set *Set) start(ctx context.Context) (up bool) {
	set.startMu.Lock()
	defer set.startMu.Unlock()
	set.mu.Lock()
	done := set.started || set.closed
	set.mu.Unlock()
	if done {
		return false
	}
	caller := ctx
	// Close cancels set.ctx: a start it would wait for ends at once.
	ctx, cancel := context.WithCancel(ctx)
	defer context.AfterFunc(set.ctx, cancel)()
	defer cancel()
	// The servers start side by side: a server that never answers
	// holds the Start for one start timeout, not one per server.
	errs := make([]error, len(set.servers))
	var starting sync.WaitGroup
	for i, s := range set.servers {
		if s.settled {
			continue
		}
		starting.Go(func() {
			err := s.cfg.check()
			if err == nil {
				if err = s.start(ctx); err != nil {
					s.close()
				}
			}
			errs[i] = err
			if err == nil && set.ready != nil {
				s.toolsMu.Lock()
				n := len(s.tools)
				s.toolsMu.Unlock()
				s.m.opt.Logger.Info("MCP server ready", "server", s.cfg.Name, "tools", n)
				select {
				case set.ready <- struct{}{}:
				default: // a notice is already due
				}
			}
		})
	}
	starting.Wait()
	var later bool
	for i, s := range set.servers {
		if s.settled {
			continue
		}
		err := errs[i]
		var cut cutShort
		if errors.As(err, &cut) && caller.Err() != nil && set.ctx.Err() == nil {
			s.reopen()
			later = true
			continue
		}
		s.settled = true
		if err != nil {
			if errors.As(err, &cut) {
				err = cut.err
			}
			set.mu.Lock()
			s.startErr = &StartError{Server: s.cfg.Name, Err: err}
			set.mu.Unlock()
			continue
		}
		up = true
		set.wg.Go(s.follow)
	}
	set.mu.Lock()
	set.started = !later
	set.mu.Unlock()
	return up
}

// Offers reports whether name may be a tool of one of the Set's servers
// (<server>__<tool>), started or not: what tells the owner of a lazy Set
// that it must start it to know.
func (set *Set) Offers(name string) bool {
	for _, s := range set.servers {
		if IsToolOf(s.cfg.Name, name) {
			return true
		}
	}
	return false
}

// Started reports whether a Start (by Open or the owner) went through
// the servers: each runs or failed. One whose caller gave up first does
// not count.
func (set *Set) Started() bool {
	set.mu.Lock()
	defer set.mu.Unlock()
	return set.started
}

// StartError is an MCP server that could not be started: the session
// has none of its tools.
type StartError struct {
	Server string
	Err    error
}

func (e *StartError) Error() string {
	return fmt.Sprintf("MCP server %s failed to start: %v", e.Server, e.Err)
}

func (e *StartError) Unwrap() error { return e.Err }

// Set is the running MCP servers of one owner. Its tools change when a
// server says its list changed (notifications/tools/list_changed): the
// list is fetched again, every page, and the watchers are told.
type Set struct {
	servers []*server
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the servers' followers

	startMu sync.Mutex // held by Start while it starts the servers

	// Of OpenBackground: ready has a server that came up, background
	// closes when the start is over.
	ready, background chan struct{}

	mu       sync.Mutex
	watchers map[int]func()
	next     int
	started  bool
	closed   bool
	starting bool // OpenBackground's start is under way
}

// Tools are the tools of the servers that run, in server order.
func (set *Set) Tools() []tool.Tool {
	var out []tool.Tool
	for _, s := range set.servers {
		s.toolsMu.Lock()
		out = append(out, s.tools...)
		s.toolsMu.Unlock()
	}
	return out
}

// Err names every server that failed to start and why; nil when all run.
func (set *Set) Err() error {
	set.mu.Lock()
	defer set.mu.Unlock()
	var errs []error
	for _, s := range set.servers {
		if s.startErr != nil {
			errs = append(errs, s.startErr)
		}
	}
	return errors.Join(errs...)
}

// Unavailable are the servers that failed to start, each with its cause.
func (set *Set) Unavailable() []tool.Unavailable {
	set.mu.Lock()
	defer set.mu.Unlock()
	var out []tool.Unavailable
	for _, s := range set.servers {
		switch {
		case s.startErr != nil:
			out = append(out, tool.Unavailable{Source: "mcp:" + s.cfg.Name, Error: s.startErr.Error()})
		case set.starting && !s.up.Load():
			out = append(out, tool.Unavailable{Source: "mcp:" + s.cfg.Name,
				Error: fmt.Sprintf("MCP server %s is starting: its tools are added when it is ready (within %v)", s.cfg.Name, s.m.opt.StartTimeout)})
		}
	}
	return out
}

// Watch calls changed after each change of Tools until the returned
// function is called. changed runs on the Set's own goroutine, which
// holds no lock of the Set, and must not block for long.
func (set *Set) Watch(changed func()) (stop func()) {
	set.mu.Lock()
	n := set.next
	set.next++
	set.watchers[n] = changed
	set.mu.Unlock()
	return func() {
		set.mu.Lock()
		delete(set.watchers, n)
		set.mu.Unlock()
	}
}

func (set *Set) notify() {
	set.mu.Lock()
	fns := make([]func(), 0, len(set.watchers))
	for _, fn := range set.watchers {
		fns = append(fns, fn)
	}
	set.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// Close stops every server and what it started, and waits for the
// Set's goroutines. Closing twice does nothing.
func (set *Set) Close() {
	set.mu.Lock()
	if set.closed {
		set.mu.Unlock()
		return
	}
	set.closed = true
	set.mu.Unlock()
	set.cancel()
	if set.background != nil {
		// Before startMu, which that start holds until it saw the cancel.
		<-set.background
	}
	// A Start under way sees the cancel and returns; one after this
	// finds the Set closed.
	set.startMu.Lock()
	defer set.startMu.Unlock()
	set.wg.Wait()
	var wg sync.WaitGroup
	for _, s := range set.servers {
		set.mu.Lock()
		failed := s.startErr != nil
		set.mu.Unlock()
		if !failed {
			wg.Go(s.close)
		}
	}
	wg.Wait()
}

// server is one running MCP server of a Set. A server that died is
// started again by the next call, no sooner than its backoff allows.
type server struct {
	m   *Manager
	set *Set
	cfg ServerConfig
	// workspace is the owner's directory (the session's cwd).
	workspace string
	startErr  error         // set once, in Start (set.mu)
	up        atomic.Bool   // started, and listed its tools
	settled   bool          // runs, or failed for good, by a Start (startMu)
	changed   chan struct{} // a list change to fetch (one is enough)

	// toolsMu, not mu, which a start holds while the server answers:
	// the owner lists tools while one starts.
	toolsMu sync.Mutex
	tools   []tool.Tool

	mu       sync.Mutex
	cs       *sdk.ClientSession
	proc     *exec.Cmd
	stderr   *tailBuffer
	closed   bool
	failures int
	retryAt  time.Time

	// The calls under way that take progress, by token (progress.go).
	progressMu sync.Mutex
	progress   map[string]*progressSink
	nextToken  uint64
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
	env := s.environ()
	argv := append([]string{lookPath(s.cfg.Command, env)}, s.cfg.Args...)
	argv = s.policy().Wrap(s.m.opt.SandboxExe, argv)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = s.cfg.Cwd
	cmd.Env = env
	// What a server says on stderr is logged, redacted, and its end is
	// kept to log why a server exited at once; it never reaches a
	// client, since a server may print its configuration's secrets.
	s.stderr = &tailBuffer{max: 2048}
	cmd.Stderr = &stderrLog{tail: s.stderr, log: s.m.opt.Logger, server: s.cfg.Name, redact: s.redactor()}
	cmd.WaitDelay = 2 * time.Second
	ownGroup(cmd)
	s.proc = cmd
	return &stdioTransport{cmd: cmd, terminate: 2 * time.Second, dropped: droppedLine(s.m.opt.Logger, s.cfg.Name, s.redactor())}
}

// BaseEnv are the variables of agentd's environment every stdio server
// gets; everything else it needs its configuration names.
var BaseEnv = []string{"PATH", "HOME", "LANG", "TMPDIR"}

// environ is the server's environment: BaseEnv from agentd's, then its
// configuration's Env.
func (s *server) environ() []string {
	var env []string
	for _, kv := range s.m.opt.Environ {
		name, _, _ := strings.Cut(kv, "=")
		if _, own := s.cfg.Env[name]; !own && slices.Contains(BaseEnv, name) {
			env = append(env, kv)
		}
	}
	names := make([]string, 0, len(s.cfg.Env))
	for k := range s.cfg.Env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		env = append(env, k+"="+s.cfg.Env[k])
	}
	return env
}

// policy is what the server runs under: the owner's sandbox with the
// network, writing (in workspace-write) where the session may, in the
// server's own cwd and the temp dir.
func (s *server) policy() sandbox.Policy {
	p := s.m.opt.Sandbox
	if p.Mode == "" || !p.Confined() {
		return sandbox.Policy{Mode: sandbox.FullAccess, Network: true}
	}
	p.Network = true
	var w []string
	for _, d := range append([]string{s.workspace, s.cfg.Cwd, s.m.opt.TempDir}, p.Writable...) {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		if r, err := sandbox.RealPath(d); err == nil {
			d = r
		}
		if !slices.Contains(w, d) {
			w = append(w, d)
		}
	}
	p.Writable = w
	return p
}

// lookPath finds name in the PATH of env, as a shell would: the sandbox
// helper executes exactly the path it is given.
func lookPath(name string, env []string) string {
	if strings.Contains(name, "/") {
		return name
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return name
}

// redactor removes from a server's output what may be a secret: the
// values of its configuration's Env and Headers, and token-shaped words.
func (s *server) redactor() func(string) string {
	var values []string
	for _, m := range []map[string]string{s.cfg.Env, s.cfg.Headers} {
		for _, v := range m {
			if len(v) >= 4 {
				values = append(values, v)
			}
		}
	}
	// Longest first: a value inside another is not left half shown.
	sort.Slice(values, func(i, j int) bool { return len(values[i]) > len(values[j]) })
	return func(text string) string {
		for _, v := range values {
			text = strings.ReplaceAll(text, v, "[redacted]")
		}
		return secretWord().ReplaceAllString(text, "[redacted]")
	}
}

// secretWord matches what looks like a credential in free text: the
// providers' key prefixes, bearer tokens, and NAME=value where the name
// says key, token, secret or password.
// Compiled on first use: only a server's stderr needs it.
var secretWord = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)\b(sk-[a-z0-9_-]{8,}|gh[pousr]_[a-z0-9]{16,}|xox[abpr]-[a-z0-9-]{8,}|AKIA[A-Z0-9]{12,})|(bearer\s+)\S+|([A-Z0-9_]*(KEY|TOKEN|SECRET|PASSWORD|CREDENTIALS)[A-Z0-9_]*\s*[=:]\s*)\S+`)
})

// stderrLog logs each line a server writes on stderr, redacted, at
// debug level, and keeps the end of it.
type stderrLog struct {
	tail   *tailBuffer
	log    *slog.Logger
	server string
	redact func(string) string

	mu      sync.Mutex
	partial []byte
}

func (w *stderrLog) Write(p []byte) (int, error) {
	_, _ = w.tail.Write(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := slices.Index(w.partial, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimRight(string(w.partial[:i]), "\r")
		w.partial = w.partial[i+1:]
		if line != "" {
			w.log.Debug("MCP server stderr", "server", w.server, "line", w.redact(line))
		}
	}
	if len(w.partial) > 4096 {
		w.partial = w.partial[len(w.partial)-4096:]
	}
	return len(p), nil
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
	c := sdk.NewClient(&sdk.Implementation{Name: "agentd", Version: s.m.opt.Version}, &sdk.ClientOptions{
		Logger: s.m.opt.Logger,
		// Called on the SDK's reader: it only marks the list to fetch,
		// which follow does.
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			select {
			case s.changed <- struct{}{}:
			default:
			}
		},
		// Also on the SDK's handler goroutine: it only hands the
		// newest progress to the call's Execute.
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			s.onProgress(r.Params)
		},
	})
	if s.cfg.URL == "" {
		// Checked here: under the sandbox the helper would only say
		// that it could not run the command.
		if _, err := exec.LookPath(lookPath(s.cfg.Command, s.environ())); err != nil {
			return err
		}
	}
	cs, err := c.Connect(ctx, s.transport(), nil)
	if err != nil {
		// Whether ctx had ended when the server failed, taken first:
		// servers start side by side, and one that failed on its own
		// must not pass for one its caller gave up on.
		cut := ctx.Err() != nil
		s.killGroup()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = s.tooSlow(err)
		} else {
			err = s.explain(err)
		}
		if cut {
			err = cutShort{err}
		}
		return err
	}
	s.cs = cs
	return nil
}

// explain says how a stdio server that ended before it answered ended:
// its exit status, and that its stderr is in agentd's log. What it
// printed is logged (redacted) and never put in the error, which
// clients see: a server may print its configuration's secrets.
func (s *server) explain(err error) error {
	if s.proc == nil || s.proc.ProcessState == nil {
		return err
	}
	st := s.proc.ProcessState
	why := "exited with status " + fmt.Sprint(st.ExitCode())
	if st.ExitCode() < 0 {
		why = "was stopped (" + st.String() + ")"
	}
	if st.ExitCode() == sandbox.ExitRefused && s.policy().Confined() {
		why += " (the sandbox may have refused to run it)"
	}
	tail := strings.TrimSpace(s.stderr.String())
	s.m.opt.Logger.Warn("MCP server ended before it answered", "server", s.cfg.Name, "status", st.String(),
		"err", err, "stderr", s.redactor()(tail))
	return fmt.Errorf("the command %s before listing its tools; see the agentd log for its stderr", why)
}

// tooSlow says that a server did not answer in time, and what to do:
// the usual cause is a first `npx -y` or `uvx`, which downloads the
// server's package before it starts. The server's stderr goes to the
// log only, as in explain.
func (s *server) tooSlow(err error) error {
	var tail string
	if s.stderr != nil { // a stdio server's
		tail = s.redactor()(strings.TrimSpace(s.stderr.String()))
	}
	s.m.opt.Logger.Warn("MCP server did not answer in time", "server", s.cfg.Name, "timeout", s.m.opt.StartTimeout,
		"err", err, "stderr", tail)
	return fmt.Errorf("did not list its tools within %v and was stopped; a first `npx -y` or `uvx` downloads the server's package first: run the command once by hand, or raise the start timeout (--mcp-start-timeout)", s.m.opt.StartTimeout)
}

// start connects and lists the server's tools, every page.
func (s *server) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.connect(ctx); err != nil {
		return err
	}
	tools, err := s.list(ctx, s.cs)
	if err != nil {
		cut := ctx.Err() != nil
		if errors.Is(err, context.DeadlineExceeded) {
			err = s.tooSlow(err)
		}
		if cut {
			err = cutShort{err}
		}
		return err
	}
	s.setTools(tools)
	s.up.Store(true)
	return nil
}

func (s *server) setTools(tools []tool.Tool) {
	s.toolsMu.Lock()
	s.tools = tools
	s.toolsMu.Unlock()
}

// cutShort is a start that failed once its context had ended: when
// that context is the caller's, the caller gave up, and the server is
// the next Start's to try, not failed for good.
type cutShort struct{ err error }

func (c cutShort) Error() string { return c.err.Error() }
func (c cutShort) Unwrap() error { return c.err }

// list fetches the server's tools, every page.
func (s *server) list(ctx context.Context, cs *sdk.ClientSession) ([]tool.Tool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.m.opt.StartTimeout)
	defer cancel()
	var out []tool.Tool
	for t, err := range cs.Tools(ctx, nil) {
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

// follow fetches the tool list again each time the server says it
// changed, until the Set closes. A list that cannot be fetched leaves
// the one before.
func (s *server) follow() {
	for {
		select {
		case <-s.set.ctx.Done():
			return
		case <-s.changed:
		}
		s.mu.Lock()
		cs := s.cs
		s.mu.Unlock()
		if cs == nil {
			continue
		}
		tools, err := s.list(s.set.ctx, cs)
		if err != nil {
			s.m.opt.Logger.Warn("MCP server's changed tool list", "server", s.cfg.Name, "err", err)
			continue
		}
		s.setTools(tools)
		s.m.opt.Logger.Info("MCP server's tools changed", "server", s.cfg.Name, "tools", len(tools))
		s.set.notify()
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// ToolName is the agent tool name of an MCP server's tool, <server>__<tool>
// (the form other agents use, so policies carry over): providers
// accept letters, digits, _ and - up to 64 characters.
func ToolName(server, name string) string {
	n := safeName(server) + "__" + safeName(name)
	if len(n) > 64 {
		n = n[:64]
	}
	return n
}

// safeName is s with every byte other than an ASCII letter, digit, _ or -
// replaced by _, as the regexp [^a-zA-Z0-9_-] did per character: a loop,
// so that nothing is compiled at start for it. A multi-byte character
// becomes one _, as the regexp's match of one rune did.
func safeName(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			b.WriteByte(byte(r))
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// IsToolOf reports whether name may be a tool of the MCP server named
// server: whether it begins as ToolName makes the names of that server's
// tools begin. It holds before the server started, or if it never does.
func IsToolOf(server, name string) bool {
	return strings.HasPrefix(name, ToolName(server, ""))
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
	// A server started again may offer other tools.
	select {
	case s.changed <- struct{}{}:
	default:
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

// reopen undoes close for a server whose start its caller gave up:
// the next Start starts it afresh.
func (s *server) reopen() {
	s.mu.Lock()
	s.closed = false
	s.proc = nil // its group was killed; never signal that id again
	s.mu.Unlock()
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

func (t *mcpTool) Execute(ctx context.Context, call tool.Call, update func(tool.Result)) tool.Result {
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
	res, err := t.call(ctx, cs, &sdk.CallToolParams{Name: t.remote, Arguments: args}, update)
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

// call calls the tool. With update, the call carries a progress token
// and each progress the server notifies is an update, given on this
// goroutine while the call is under way; progress that comes after the
// answer is superseded by it and dropped.
func (t *mcpTool) call(ctx context.Context, cs *sdk.ClientSession, params *sdk.CallToolParams, update func(tool.Result)) (*sdk.CallToolResult, error) {
	if update == nil {
		return cs.CallTool(ctx, params)
	}
	token, sink, unwatch := t.s.watchProgress()
	defer unwatch()
	params.SetProgressToken(token)
	type answer struct {
		res *sdk.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	// Ends with the call, which ends with ctx; waited for below.
	go func() {
		res, err := cs.CallTool(ctx, params)
		done <- answer{res, err}
	}()
	for {
		select {
		case <-sink.ready:
			if n := sink.take(); n != nil {
				update(progressResult(n))
			}
		case a := <-done:
			return a.res, a.err
		}
	}
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
