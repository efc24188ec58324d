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
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/tool"
)

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
