package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/tool"
)

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

// healthy restarts the backoff after a call that worked.
func (s *server) healthy() {
	s.mu.Lock()
	s.failures = 0
	s.mu.Unlock()
}
