package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/config"
	"github.com/agentd-dev/agentd/internal/convapi"
	"github.com/agentd-dev/agentd/internal/engine"
	"github.com/agentd-dev/agentd/internal/health"
	"github.com/agentd-dev/agentd/internal/jwtauth"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/piserver"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/sessionws"
	"github.com/agentd-dev/agentd/internal/settings"
	"github.com/agentd-dev/agentd/internal/webui"
)

// runServe is `agentd serve`: Open builds the server, Run serves until
// ctx ends, and Close (on every path, Open's failures included) releases
// what Open built.
func (m *Main) runServe(ctx context.Context, cfg *config.Config, fs *flag.FlagSet, args []string) error {
	sc, err := parseServe(cfg, fs, args)
	if err != nil {
		return err
	}
	s := m.NewServe(cfg, sc)
	defer func() {
		if err := s.Close(); err != nil {
			s.log.Warn("releasing what serve opened", "err", err)
		}
	}()
	if err := s.Open(ctx); err != nil {
		return err
	}
	return s.Run(ctx)
}

// parseServe parses serve's flags (its own and the shared ones, bound to
// cfg) and checks them.
func parseServe(cfg *config.Config, fs *flag.FlagSet, args []string) (config.Serve, error) {
	sc := config.ServeDefaults(cfg.Getenv)
	sc.Register(fs)
	cfg.RegisterApprovalTimeout(fs, "ui-timeout")
	if err := parseFlagsOnly(cfg, fs, args); err != nil {
		return sc, err
	}
	if err := sc.Check(); err != nil {
		return sc, usageError{err}
	}
	return sc, nil
}

// Serve is one run of `agentd serve`, in three steps: Open builds
// everything (the cluster membership, the journal, the engine, the MCP
// servers, the server and its faces, the listener), Run serves until its
// context ends and then drains, and Close releases what Open built, in
// the reverse order. Close is safe after an Open that failed half way
// (it releases what was built) and more than once; every error path of
// Open is covered by the one Close.
//
// Tests use it to start the same server as the command in their own
// process: ParseServe (or NewServe), Open with --port 0, Addr, Run in a
// goroutine, Close.
type Serve struct {
	m   *Main
	cfg *config.Config
	sc  config.Serve
	log *slog.Logger
	// dir, when set, is the working directory of the sessions in place
	// of the process's (see InDir).
	dir string

	// Built by Open, in this order.
	cwd            string
	models         *engine.Models
	model          *llm.Model
	saved          *settings.Store
	choices        engineChoices
	stateDir       string
	cn             *clusterNode
	journal        pipeline.Journal
	breakers       *health.Breakers
	metrics        *health.Metrics
	health         *health.Health
	builder        server.Builder
	eng            *engine.Engine
	tokens         *jwtauth.Verifier
	mcpPolicy      sandbox.Policy
	srv            *server.Server
	pi             *piserver.Server
	sws            *sessionws.Face
	rest           *convapi.Server
	page           *webui.UI
	ln             net.Listener
	hs             *http.Server
	fingerprintKey []byte

	// undo is what Close runs, last first: each step of Open pushes the
	// release of what it built as soon as it has built it.
	undo      []func() error
	closeOnce sync.Once
	closeErr  error

	mu      sync.Mutex
	opened  bool // Open was called
	ready   bool // Open returned nil
	ran     bool
	closed  bool
	stopRun context.CancelFunc // cancels the running Run's context
	runDone chan struct{}      // closed when Run returns
}

// NewServe is the serve command for the parsed configuration: cfg the
// shared settings, sc serve's (checked, see config.Serve.Check). Nothing
// is built until Open.
func (m *Main) NewServe(cfg *config.Config, sc config.Serve) *Serve {
	return &Serve{m: m, cfg: cfg, sc: sc, log: m.logger(cfg)}
}

// ParseServe parses args as `agentd serve <args>` does, into a Serve not
// yet opened. A mistake in args is an error naming it.
func (m *Main) ParseServe(args []string) (*Serve, error) {
	var cmd command
	for _, c := range commands() {
		if c.name == "serve" {
			cmd = c
		}
	}
	cfg := config.Defaults(m.getenv)
	fs := newFlagSet(cmd, &cfg)
	sc, err := parseServe(&cfg, fs, args)
	if err != nil {
		return nil, err
	}
	return m.NewServe(&cfg, sc), nil
}

// InDir makes dir the server's working directory (where a session
// starts when its client names none) in place of the process's: a test
// serving in its own process runs several servers, each in a directory
// of its own. Call it before Open. It returns s.
func (s *Serve) InDir(dir string) *Serve {
	s.dir = dir
	return s
}

// Addr is where the server listens once Open has returned; nil on
// --stdio or before Open.
func (s *Serve) Addr() net.Addr {
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// onClose adds fn to what Close runs (before what was added earlier).
func (s *Serve) onClose(fn func() error) { s.undo = append(s.undo, fn) }

// Close stops Run if it is running (as its context ending would: the
// drain included) and waits for it, then releases what Open built, last
// first. It returns the first error of those releases; called again, it
// returns the same.
func (s *Serve) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		stop, done := s.stopRun, s.runDone
		s.closed = true
		s.mu.Unlock()
		if stop != nil {
			stop()
			<-done
		}
		var errs []error
		for i := len(s.undo) - 1; i >= 0; i-- {
			if err := s.undo[i](); err != nil {
				errs = append(errs, err)
			}
		}
		s.undo = nil
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// runToken is `agentd token`.
func (m *Main) runToken(_ context.Context, _ *config.Config, fs *flag.FlagSet, args []string) error {
	if err := parseOwn(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(m.stdout, server.NewToken())
	return nil
}

// heartbeat maps the flag's "0 disables" to the faces' "negative
// disables".
func heartbeat(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// authOf names what clients must present, for the startup log.
func authOf(sc config.Serve) string {
	var what []string
	if sc.Token != "" {
		what = append(what, "token")
	}
	if sc.JWTSecretFile != "" || sc.JWTKeys != "" {
		what = append(what, "jwt")
	}
	if sc.AuthCommand != "" {
		what = append(what, "command")
	}
	if len(what) == 0 {
		return "none"
	}
	return strings.Join(what, "+")
}

// nonEmpty is the paths that are set.
func nonEmpty(paths ...string) []string {
	var out []string
	for _, p := range paths {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}
