package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentd-dev/agentd/agent"
	"github.com/agentd-dev/agentd/config"
	"github.com/agentd-dev/agentd/health"
	"github.com/agentd-dev/agentd/pipeline"
	"github.com/agentd-dev/agentd/piserver"
	"github.com/agentd-dev/agentd/session"
	"github.com/agentd-dev/agentd/tool"
)

func (m *Main) runServe(ctx context.Context, cfg *config.Config, fs *flag.FlagSet, args []string) error {
	sc := config.ServeDefaults(cfg.Getenv)
	sc.Register(fs)
	if err := parse(cfg, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))}
	}
	if err := sc.Check(); err != nil {
		return usageError{err}
	}
	log := m.logger(cfg)
	cwd, st, ms, err := m.environment(ctx, cfg, log)
	if err != nil {
		return err
	}
	model, level, err := pickModel(ms, st.Get(), rpcFlags{model: sc.Model})
	if err != nil {
		return err
	}
	policy, err := loadPolicy(sc.Policy)
	if err != nil {
		return err
	}
	sessionsDir := sc.SessionsDir
	if sessionsDir == "" {
		sessionsDir = filepath.Join(cfg.DataDir, "sessions")
	}
	stateDir := filepath.Join(cfg.DataDir, "server")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	journal, err := pipeline.OpenFileJournal(filepath.Join(stateDir, "journal.jsonl"))
	if err != nil {
		return fmt.Errorf("command journal: %w", err)
	}
	defer journal.Close()

	breakers := health.NewBreakers(health.Options{}, health.Options{})
	metrics := health.NewMetrics()
	if err := metrics.WatchBreakers(breakers); err != nil {
		return err
	}
	hl := health.NewHealth(breakers)
	stream := breakers.Guard(health.StreamFunc(ms.stream))
	locks := &tool.FileLocks{}
	home := cfg.Getenv("HOME")
	retry, comp := engineSettings(st.Get())
	saved := st.Get()
	newSession := func(_ context.Context, spec piserver.SessionSpec) (*session.Session, error) {
		env := tool.Env{Cwd: spec.Cwd, Home: home, Locks: locks, TempDir: os.TempDir(), Environ: os.Environ(), Supervisor: supervisor(), Scope: tool.NewScope()}
		tools := tool.Builtins(env)
		names := make([]string, 0, len(tools))
		for _, t := range tools {
			names = append(names, t.Spec().Name)
		}
		return session.New(session.Config{
			Cwd: spec.Cwd, SessionsDir: sessionsDir, Open: spec.Open, Model: model, Thinking: level,
			SystemPrompt: systemPrompt(spec.Cwd, names, time.Now()),
			Stream:       agent.StreamFunc(stream), Options: ms.options(cfg), ResolveModel: ms.resolve,
			Tools: tools, BashEnv: env, Retry: retry, Compaction: comp, Policy: policy,
			InteractionTimeout: sc.UITimeout,
			SteeringMode:       agent.QueueMode(saved.SteeringMode), FollowUpMode: agent.QueueMode(saved.FollowUpMode),
			EventLogSize: sc.EventLogSize, Logger: log,
		})
	}
	srv, err := piserver.New(piserver.Options{
		NewSession: newSession, Models: ms.reg, Cwd: cwd, SessionsDir: sessionsDir,
		AllowedDirs: sc.AllowSessionDirs, Home: home, StateDir: stateDir, Journal: journal,
		Breakers: breakers, Health: hl, Metrics: metrics, Delta: sc.StreamFormat == "delta",
		Version: Version, Logger: log,
		Limits: piserver.Limits{
			MaxSessions: sc.MaxSessions, MaxConnections: sc.MaxConnections, MaxFrameBytes: sc.MaxFrameBytes,
			SessionRate: rate(sc.RateLimit), GlobalRate: rate(sc.GlobalRateLimit), MaxPending: sc.MaxPending,
			MaxQueuedBytes: sc.MaxQueuedBytes, UITimeout: sc.UITimeout, ShutdownTimeout: sc.ShutdownTimeout,
			DependencyTimeout: sc.DependencyTimeout, IdempotencyTTL: sc.IdempotencyTTL,
			LongCommandTimeout: sc.CommandTimeout, Heartbeat: heartbeat(sc.Heartbeat),
		},
	})
	if err != nil {
		return err
	}
	if sc.Stdio {
		log.Info("agentd serve on stdio", "model", model.Provider+"/"+model.ID, "data", cfg.DataDir)
		err := srv.ServeStdio(ctx, m.stdin, m.stdout)
		if serr := srv.Shutdown(context.Background()); err == nil {
			err = serr
		}
		return err
	}

	addr := net.JoinHostPort(sc.Host, strconv.Itoa(sc.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		srv.Close()
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("cannot listen on %s: address already in use (is another agentd running? pick another --port)", addr)
		}
		return fmt.Errorf("cannot listen on %s: %w", addr, err)
	}
	mux := health.NewMux(hl, metrics)
	mux.Handle("/", srv.WebSocketHandler(piserver.WebSocketOptions{Token: sc.Token, OriginPatterns: sc.AllowOrigins}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info("agentd serve listening", "addr", ln.Addr().String(), "url", "ws://"+ln.Addr().String()+"/",
		"model", model.Provider+"/"+model.ID, "data", cfg.DataDir, "auth", sc.Token != "")

	select {
	case <-ctx.Done():
		log.Info("shutting down", "drain", sc.ShutdownTimeout)
	case err = <-served:
		log.Error("http server stopped", "err", err)
	}
	// Stop taking connections, then drain: WebSocket connections are
	// hijacked, so hs.Shutdown does not wait for them; srv.Shutdown does.
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = hs.Shutdown(sctx)
	cancel()
	if serr := srv.Shutdown(context.Background()); err == nil {
		err = serr
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// rate maps the flag's "0 disables" to the server's "negative disables".
func rate(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

func heartbeat(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
