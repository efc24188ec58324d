package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentd-dev/agentd/internal/cluster"
	"github.com/agentd-dev/agentd/internal/config"
	"github.com/agentd-dev/agentd/internal/convapi"
	"github.com/agentd-dev/agentd/internal/engine"
	"github.com/agentd-dev/agentd/internal/health"
	"github.com/agentd-dev/agentd/internal/jwtauth"
	"github.com/agentd-dev/agentd/internal/mcp"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/piserver"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
	"github.com/agentd-dev/agentd/internal/sessionws"
	"github.com/agentd-dev/agentd/internal/webui"
)

// Open builds the server, step by step, in the order the steps' mistakes
// are reported; on an error, what the earlier steps built stays for
// Close to release. Open may be called once.
func (s *Serve) Open(ctx context.Context) error {
	s.mu.Lock()
	if s.opened {
		s.mu.Unlock()
		return errors.New("serve: opened twice")
	}
	s.opened = true
	s.mu.Unlock()
	for _, step := range []func(context.Context) error{
		s.openProcess, s.openEnvironment, s.openState, s.openJournal,
		s.openEngine, s.openServer, s.openListener,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.ready = true
	s.mu.Unlock()
	return nil
}

// openProcess takes the collector's settings, which belong to the
// process, which serve owns while it runs; Close gives them back.
func (s *Serve) openProcess(context.Context) error {
	old := debug.SetGCPercent(s.sc.GCPercent)
	s.onClose(func() error { debug.SetGCPercent(old); return nil })
	if s.sc.MemoryLimit > 0 {
		oldLimit := debug.SetMemoryLimit(int64(s.sc.MemoryLimit))
		s.onClose(func() error { debug.SetMemoryLimit(oldLimit); return nil })
	}
	return nil
}

// openEnvironment reads the settings and the models and picks the
// default model and the permission policy.
func (s *Serve) openEnvironment(ctx context.Context) error {
	cwd, st, ms, err := s.m.environment(ctx, s.cfg, s.log)
	if err != nil {
		return err
	}
	if s.dir != "" {
		cwd = s.dir
	}
	s.cwd, s.models = cwd, ms
	model, level, err := pickModel(ms, st.Get(), localFlags{model: s.sc.Model}, s.log)
	if err != nil {
		return err
	}
	policy, err := loadPolicy(s.sc.Policy)
	if err != nil {
		return err
	}
	s.model = model
	s.breakers = health.NewBreakers(health.Options{}, health.Options{})
	s.choices = engineChoices{model: model, thinking: level, policy: policy,
		interactionTimeout: s.cfg.ApprovalTimeout, eventLogSize: s.sc.EventLogSize, bounds: s.sc.Engine, breakers: s.breakers, log: s.log,
		hide: nonEmpty(s.sc.JWTSecretFile, s.sc.JWTKeys)}
	s.saved = st
	return nil
}

// openState makes the server's state directory, settles the token and
// joins the cluster, when asked to.
func (s *Serve) openState(ctx context.Context) error {
	s.stateDir = filepath.Join(s.cfg.DataDir, "server")
	if err := os.MkdirAll(s.stateDir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if err := networkToken(&s.sc, s.stateDir, s.log); err != nil {
		return err
	}
	if !s.sc.Cluster.Enabled() {
		// A server on its own starts no NATS and no cluster goroutine.
		return nil
	}
	cn, err := joinCluster(ctx, s.sc.Cluster, s.stateDir, s.log)
	if err != nil {
		return err
	}
	s.cn = cn
	// Run, when it ran, has shut the server down and handed the
	// sessions over by the time Close gets here.
	s.onClose(func() error { cn.leave(); return nil })
	return nil
}

// openJournal opens where the outcomes of a session's commands are kept:
// a file, or in a cluster JetStream, where the node taking the session
// over finds them.
func (s *Serve) openJournal(context.Context) error {
	if s.cn != nil {
		s.journal = s.cn.node.Journal()
		// Shared by the nodes, so that the node taking a session over
		// recognises a request the last owner journaled.
		s.fingerprintKey = s.cn.node.FingerprintKey()
		return nil
	}
	fj, err := pipeline.OpenFileJournal(filepath.Join(s.stateDir, "journal.jsonl"))
	if err != nil {
		return fmt.Errorf("command journal: %w", err)
	}
	s.onClose(fj.Close)
	s.journal = fj
	return nil
}

// openEngine builds the health reports, the engine and the shared MCP
// servers of --mcp-config.
func (s *Serve) openEngine(context.Context) error {
	s.metrics = health.NewMetrics()
	if err := s.metrics.WatchBreakers(s.breakers); err != nil {
		return err
	}
	s.health = health.NewHealth(s.breakers)
	eng, err := s.m.engine(s.cfg, s.models, s.saved.Get(), s.choices)
	if err != nil {
		return err
	}
	s.eng, s.builder = eng, eng
	if want := policyOf(s.sc.Engine.Sandbox); want.Confined() && !eng.SandboxMode().Stricter(sandbox.FullAccess) {
		// --sandbox-fallback unconfined took effect: every health_check
		// says so for as long as the server runs.
		s.health.AddLasting(fmt.Sprintf("Tools are not sandboxed: %s was configured, but %s", want.Mode, sandbox.Probe()))
	} else if want.Confined() && !eng.SandboxIsolated() {
		s.health.AddLasting("Tools are not isolated: commands cannot get namespaces of their own here, so confined tools can read agentd's environment and files")
	}
	// MCP servers run under the sessions' sandbox (the engine checked
	// it can be enforced; quiet, since it said so).
	s.mcpPolicy, _ = sandboxPolicy(s.sc.Engine.Sandbox, sandbox.Probe(), slog.New(slog.DiscardHandler))
	// The --mcp-config servers are started once and shared by every
	// session: their processes live as long as the server and end with it.
	servers, err := loadMCPConfig(s.sc.MCPConfig)
	if err != nil {
		return err
	}
	if len(servers) == 0 {
		return nil
	}
	// Started in the background: a server slow to answer (or never
	// answering) holds neither the server's start nor a session's
	// creation. Sessions get its tools when it is ready (and say so with
	// config_changed); until then get_tools names it as starting.
	set := mcpManager(s.log, s.mcpPolicy, s.sc.Engine.MCP).OpenBackground(servers, s.cwd)
	s.onClose(func() error { set.Close(); return nil })
	report := mcpFailuresToHealth(set, s.health, s.log)
	stop := set.Watch(report)
	s.onClose(func() error { stop(); return nil })
	report() // what failed before the watch began
	s.builder = withTools{eng: eng, set: set}
	return nil
}

// openServer builds the server and its faces and starts its pipeline.
func (s *Serve) openServer(context.Context) error {
	sc := s.sc
	var auth server.Authenticator
	if argv := strings.Fields(sc.AuthCommand); len(argv) > 0 {
		auth = server.CommandAuthenticator{Argv: argv}
	}
	tokens, err := jwtVerifier(sc)
	if err != nil {
		return usageError{err}
	}
	s.tokens = tokens
	srvTokens := server.TokenVerifier(nil)
	if tokens != nil {
		srvTokens = tokens
	}
	var node *cluster.Node
	if s.cn != nil {
		node = s.cn.node
	}
	srv, err := server.New(server.Config{
		Cluster: node, SpreadSessions: sc.Cluster.Spread, EventLogSize: sc.EventLogSize,
		Auth:         auth,
		Tokens:       srvTokens,
		ReturnMemory: true,
		Builder:      s.builder, Sandbox: s.eng.SandboxMode(), Cwd: s.cwd, SessionsDir: s.sessionsDir(), AllowedDirs: sc.AllowSessionDirs,
		Home: s.cfg.Getenv("HOME"), StateDir: s.stateDir, Journal: s.journal, FingerprintKey: s.fingerprintKey,
		ExportsDir: filepath.Join(s.cfg.DataDir, "exports"), Protected: []string{filepath.Join(s.stateDir, "journal.jsonl"), filepath.Join(s.stateDir, TokenFile)},
		Breakers: s.breakers, Health: s.health, Metrics: s.metrics, Logger: s.log,
		Limits: server.Limits(sc.ServerLimits()),
	})
	if err != nil {
		return err
	}
	s.srv = srv
	// A no-op after Run's drain; without one (Open failed, or Run never
	// ran) it ends the server without a drain.
	s.onClose(srv.Close)
	if err := s.openFaces(); err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	if s.cn != nil {
		return clusterMetrics(s.metrics.Registry(), srv)
	}
	return nil
}

// openFaces builds the faces on the server: pi-server (WebSocket or
// stdio), the per-session WebSocket, the REST + SSE API and the web UI.
// They hold nothing the server's shutdown does not end.
func (s *Serve) openFaces() error {
	sc, ms := s.sc, s.models
	po := piserver.Options{Models: ms, Delta: sc.StreamFormat == "delta", Version: version(), Heartbeat: heartbeat(sc.Heartbeat)}
	if sc.Stdio {
		// A token on a stdio server is for stdio exposed beyond its parent
		// (ssh, socat): the client authenticates first.
		po.StdioToken = sc.Token
	}
	var err error
	if s.pi, err = piserver.New(s.srv, po); err != nil {
		return err
	}
	if sc.SessionWS && !sc.Stdio {
		keyHint := func(string) string { return "" }
		if ms.Registry != nil {
			keyHint = ms.Registry.KeyHint
		}
		s.sws, err = sessionws.New(s.srv, sessionws.Options{
			Token: sc.Token, RequireJWT: s.tokens != nil, OriginPatterns: sc.AllowOrigins,
			Heartbeat: heartbeat(sc.WSHeartbeat), ProgressInterval: sc.WSProgressInterval,
			MaxConnectionsPerSubject: sc.WSMaxConnectionsPerSubject, MessageRate: sc.WSMessageRate,
			MaxMessageBytes: sc.WSMaxMessageBytes, MaxQueuedBytes: sc.WSMaxQueuedBytes, KeyHint: keyHint,
		})
		if err != nil {
			return err
		}
	}
	if !sc.Stdio {
		// The conversation API shares the port, the sessions and the
		// token with pi-server's WebSocket.
		s.rest, err = convapi.New(s.srv, convapi.Options{Models: ms, DefaultModel: s.model, Version: version(), Token: sc.Token,
			OriginPatterns: sc.AllowOrigins, SessionIdle: sc.RESTSessionIdle, MaxStreamsPerSubject: sc.RESTMaxStreamsPerSubject,
			MCP: mcpManager(s.log, s.mcpPolicy, sc.Engine.MCP)})
		if err != nil {
			return err
		}
	}
	s.page, err = webui.New()
	return err
}

// sessionsDir is where session files go: --sessions-dir, or the data
// directory's.
func (s *Serve) sessionsDir() string {
	if s.sc.SessionsDir != "" {
		return s.sc.SessionsDir
	}
	return filepath.Join(s.cfg.DataDir, "sessions")
}

// openListener listens (not on --stdio), starts the profiler when asked
// to and builds the HTTP server Run serves on the listener.
func (s *Serve) openListener(ctx context.Context) error {
	if s.sc.Stdio {
		return nil
	}
	addr := net.JoinHostPort(s.sc.Host, strconv.Itoa(s.sc.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			//lint:ignore ST1005 pi-server's wording, which its clients match on
			return fmt.Errorf("Failed to start WebSocket server: cannot listen on %s: address already in use (is another agentd running? pick another --port)", addr)
		}
		//lint:ignore ST1005 pi-server's wording, which its clients match on
		return fmt.Errorf("Failed to start WebSocket server: cannot listen on %s: %w", addr, err)
	}
	s.ln = ln
	s.onClose(func() error {
		// Run's http.Server.Shutdown closed it already, when Run ran.
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			return err
		}
		return nil
	})
	stopPprof, err := servePprof(s.sc.PprofAddr, s.log)
	if err != nil {
		return err
	}
	s.onClose(func() error { stopPprof(); return nil })
	s.hs = &http.Server{Handler: s.handler(ctx), ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	return nil
}

// handler is every face on one port, behind the Host check.
func (s *Serve) handler(ctx context.Context) http.Handler {
	sc, srv := s.sc, s.srv
	var details []health.Detail
	if s.cn != nil {
		details = append(details, health.Detail{Name: "cluster", Value: func() any { return srv.ClusterStatus() }})
		// A node cut off from NATS cannot renew, publish or forward: it
		// is not ready, and its health says why, until it reconnects.
		s.health.Need("cluster: not connected to NATS (reconnecting)", func() bool {
			st := srv.ClusterStatus()
			return st != nil && st.Connected
		})
	}
	mux := health.NewMux(s.health, s.metrics, details...)
	// "/" is pi-server's WebSocket; a browser's plain GET of it (and of
	// /ui/) gets the web UI, itself a client of the REST + SSE API.
	mux.Handle("/", s.page.Handler(server.UpgradesOnly(s.pi.WebSocketHandler(piserver.WebSocketOptions{Token: sc.Token, OriginPatterns: sc.AllowOrigins}))))
	if s.sws != nil {
		s.sws.Mount(mux)
	} else if sc.SessionWSOff != "" {
		// Without this the path would reach pi-server's WebSocket on "/".
		off := sc.SessionWSOff
		mux.Handle("/api/v1/ws/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "The per-session WebSocket is off: "+off, http.StatusNotFound)
		}))
	}
	// Every request passes the Host check first, whatever face serves it;
	// the REST + SSE conversation API (/api/v2, and the design document's
	// /api/conversations) takes its paths before the mux would clean them.
	// On a cluster node, a request naming a session another node runs is
	// passed on to that node (ClusterProxy is rest.Handler itself alone).
	faces := srv.ClusterProxy(sessionOfRequest, s.rest.Handler(mux))
	if s.cn != nil {
		if err := srv.AdvertiseHTTP(ctx, advertised(s.ln.Addr())); err != nil {
			s.log.Warn("cluster: announcing this node's address", "err", err)
		}
	}
	return server.GuardHost(server.HostPolicy{Listen: s.ln.Addr().String(), Allowed: sc.AllowedHosts}, faces)
}

// mcpFailuresToHealth is a watcher of set that makes each server that
// failed to start a lasting health issue, and logs it, once: sessions
// work without it, and health_check says why they lack its tools.
func mcpFailuresToHealth(set *mcp.Set, hl *health.Health, log *slog.Logger) func() {
	var mu sync.Mutex
	told := map[string]bool{}
	return func() {
		mu.Lock()
		defer mu.Unlock()
		for _, u := range set.Failed() {
			if told[u.Source] {
				continue
			}
			told[u.Source] = true
			log.Warn("MCP server failed to start", "server", strings.TrimPrefix(u.Source, "mcp:"), "err", u.Error)
			hl.AddLasting(u.Error)
		}
	}
}

// withTools builds the engine's sessions with more tools: the MCP
// servers' of --mcp-config, shared (the sessions do not stop them).
type withTools struct {
	eng *engine.Engine
	set *mcp.Set
}

func (w withTools) Session(spec sessionspec.Spec) (*session.Session, error) {
	sess, err := w.eng.Session(spec)
	if err == nil {
		sess.AddToolSource(w.set, nil)
	}
	return sess, err
}

// jwtVerifier reads the JWT keys configured, nil when none are.
func jwtVerifier(sc config.Serve) (*jwtauth.Verifier, error) {
	o := jwtauth.Options{Issuer: sc.JWTIssuer, Audience: sc.JWTAudience}
	switch {
	case sc.JWTSecretFile != "":
		b, err := os.ReadFile(sc.JWTSecretFile)
		if err != nil {
			return nil, fmt.Errorf("--jwt-secret-file: %w", err)
		}
		o.Secret = []byte(strings.TrimSpace(string(b)))
	case sc.JWTKeys != "":
		b, err := os.ReadFile(sc.JWTKeys)
		if err != nil {
			return nil, fmt.Errorf("--jwt-keys: %w", err)
		}
		if o.Keys, err = jwtauth.ParseKeys(b); err != nil {
			return nil, fmt.Errorf("--jwt-keys %s: %w", sc.JWTKeys, err)
		}
	default:
		return nil, nil
	}
	v, err := jwtauth.New(o)
	if err != nil {
		return nil, fmt.Errorf("JWT configuration: %w", err)
	}
	return v, nil
}
