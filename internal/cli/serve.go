package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
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
	"github.com/agentd-dev/agentd/internal/sessionws"
	"github.com/agentd-dev/agentd/internal/webui"
)

func (m *Main) runServe(ctx context.Context, cfg *config.Config, fs *flag.FlagSet, args []string) error {
	sc := config.ServeDefaults(cfg.Getenv)
	sc.Register(fs)
	cfg.RegisterApprovalTimeout(fs, "ui-timeout")
	if err := parseFlagsOnly(cfg, fs, args); err != nil {
		return err
	}
	if err := sc.Check(); err != nil {
		return usageError{err}
	}
	log := m.logger(cfg)
	// The collector's settings belong to the process, which serve owns
	// while it runs; it gives them back when it returns.
	defer debug.SetGCPercent(debug.SetGCPercent(sc.GCPercent))
	if sc.MemoryLimit > 0 {
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(int64(sc.MemoryLimit)))
	}
	cwd, st, ms, err := m.environment(ctx, cfg, log)
	if err != nil {
		return err
	}
	model, level, err := pickModel(ms, st.Get(), localFlags{model: sc.Model}, log)
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
	if err := networkToken(&sc, stateDir, log); err != nil {
		return err
	}
	var cn *clusterNode
	if sc.Cluster.Enabled() {
		// Only with --cluster: a server on its own starts no NATS and no
		// cluster goroutine.
		if cn, err = joinCluster(ctx, sc.Cluster, stateDir, log); err != nil {
			return err
		}
		// After srv.Shutdown has handed the sessions over.
		defer cn.leave()
	}
	// A cluster keeps the outcomes of a session's commands in JetStream,
	// where the node taking the session over finds them.
	var journal pipeline.Journal
	var fingerprintKey []byte
	if cn != nil {
		journal = cn.node.Journal()
		// Shared by the nodes, so that the node taking a session over
		// recognises a request the last owner journaled.
		fingerprintKey = cn.node.FingerprintKey()
	} else {
		fj, err := pipeline.OpenFileJournal(filepath.Join(stateDir, "journal.jsonl"))
		if err != nil {
			return fmt.Errorf("command journal: %w", err)
		}
		defer fj.Close()
		journal = fj
	}

	breakers := health.NewBreakers(health.Options{}, health.Options{})
	metrics := health.NewMetrics()
	if err := metrics.WatchBreakers(breakers); err != nil {
		return err
	}
	hl := health.NewHealth(breakers)
	eng, err := m.engine(cfg, ms, st.Get(), engineChoices{model: model, thinking: level, policy: policy,
		interactionTimeout: cfg.ApprovalTimeout, eventLogSize: sc.EventLogSize, bounds: sc.Engine, breakers: breakers, log: log,
		hide: nonEmpty(sc.JWTSecretFile, sc.JWTKeys)})
	if err != nil {
		return err
	}
	if want := policyOf(sc.Engine.Sandbox); want.Confined() && !eng.SandboxMode().Stricter(sandbox.FullAccess) {
		// --sandbox-fallback unconfined took effect: every health_check
		// says so for as long as the server runs.
		hl.AddLasting(fmt.Sprintf("Tools are not sandboxed: %s was configured, but %s", want.Mode, sandbox.Probe()))
	} else if want.Confined() && !eng.SandboxIsolated() {
		hl.AddLasting("Tools are not isolated: commands cannot get namespaces of their own here, so confined tools can read agentd's environment and files")
	}
	// MCP servers run under the sessions' sandbox (the engine checked
	// it can be enforced; quiet, since it said so).
	mcpPolicy, _ := sandboxPolicy(sc.Engine.Sandbox, sandbox.Probe(), slog.New(slog.DiscardHandler))
	// The --mcp-config servers are started once and shared by every
	// session: their processes live as long as the server and end with it.
	var builder server.Builder = eng
	mcpServers, err := loadMCPConfig(sc.MCPConfig)
	if err != nil {
		return err
	}
	if len(mcpServers) > 0 {
		// Started in the background: a server slow to answer (or never
		// answering) holds neither the server's start nor a session's
		// creation. Sessions get its tools when it is ready (and say so
		// with config_changed); until then get_tools names it as starting.
		set := mcpManager(log, mcpPolicy, sc.Engine.MCP).OpenBackground(mcpServers, cwd)
		defer set.Close()
		report := mcpFailuresToHealth(set, hl, log)
		stop := set.Watch(report)
		defer stop()
		report() // what failed before the watch began
		builder = withTools{eng: eng, set: set}
	}
	var auth server.Authenticator
	if argv := strings.Fields(sc.AuthCommand); len(argv) > 0 {
		auth = server.CommandAuthenticator{Argv: argv}
	}
	tokens, err := jwtVerifier(sc)
	if err != nil {
		return usageError{err}
	}
	srvTokens := server.TokenVerifier(nil)
	if tokens != nil {
		srvTokens = tokens
	}
	var node *cluster.Node
	if cn != nil {
		node = cn.node
	}
	srv, err := server.New(server.Config{
		Cluster: node, SpreadSessions: sc.Cluster.Spread, EventLogSize: sc.EventLogSize,
		Auth:         auth,
		Tokens:       srvTokens,
		ReturnMemory: true,
		Builder:      builder, Sandbox: eng.SandboxMode(), Cwd: cwd, SessionsDir: sessionsDir, AllowedDirs: sc.AllowSessionDirs,
		Home: cfg.Getenv("HOME"), StateDir: stateDir, Journal: journal, FingerprintKey: fingerprintKey,
		ExportsDir: filepath.Join(cfg.DataDir, "exports"), Protected: []string{filepath.Join(stateDir, "journal.jsonl"), filepath.Join(stateDir, TokenFile)},
		Breakers: breakers, Health: hl, Metrics: metrics, Logger: log,
		Limits: server.Limits{
			MaxSessions: sc.MaxSessions, MaxConnections: sc.MaxConnections, MaxFrameBytes: sc.MaxFrameBytes,
			SessionRate: rate(sc.RateLimit), GlobalRate: rate(sc.GlobalRateLimit), ControlRate: rate(sc.ControlRateLimit),
			MaxPending: sc.MaxPending, MaxQueuedBytes: sc.MaxQueuedBytes, MaxQueuedBytesTotal: sc.MaxQueuedTotal,
			ShutdownTimeout: sc.ShutdownTimeout, DependencyTimeout: sc.DependencyTimeout, IdempotencyTTL: sc.IdempotencyTTL,
			LongCommandTimeout: sc.CommandTimeout,
		},
	})
	if err != nil {
		return err
	}
	po := piserver.Options{Models: ms, Delta: sc.StreamFormat == "delta", Version: version(), Heartbeat: heartbeat(sc.Heartbeat)}
	if sc.Stdio {
		// A token on a stdio server is for stdio exposed beyond its parent
		// (ssh, socat): the client authenticates first.
		po.StdioToken = sc.Token
	}
	pi, err := piserver.New(srv, po)
	if err != nil {
		return err
	}
	var sws *sessionws.Face
	if sc.SessionWS && !sc.Stdio {
		keyHint := func(string) string { return "" }
		if ms.Registry != nil {
			keyHint = ms.Registry.KeyHint
		}
		sws, err = sessionws.New(srv, sessionws.Options{
			Token: sc.Token, RequireJWT: tokens != nil, OriginPatterns: sc.AllowOrigins,
			Heartbeat: heartbeat(sc.WSHeartbeat), ProgressInterval: sc.WSProgressInterval,
			MaxConnectionsPerSubject: sc.WSMaxConnectionsPerSubject, MessageRate: sc.WSMessageRate,
			MaxMessageBytes: sc.WSMaxMessageBytes, MaxQueuedBytes: sc.WSMaxQueuedBytes, KeyHint: keyHint,
		})
		if err != nil {
			return err
		}
	}
	var rest *convapi.Server
	if !sc.Stdio {
		// The conversation API shares the port, the sessions and the
		// token with pi-server's WebSocket.
		rest, err = convapi.New(srv, convapi.Options{Models: ms, DefaultModel: model, Version: version(), Token: sc.Token,
			OriginPatterns: sc.AllowOrigins, SessionIdle: sc.RESTSessionIdle,
			MCP: mcpManager(log, mcpPolicy, sc.Engine.MCP)})
		if err != nil {
			return err
		}
	}
	page, err := webui.New()
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	if cn != nil {
		if err := clusterMetrics(metrics.Registry(), srv); err != nil {
			srv.Close()
			return err
		}
	}
	if sc.Stdio {
		log.Info("agentd serve on stdio", "model", model.Provider+"/"+model.ID, "data", cfg.DataDir)
		err := pi.ServeStdio(ctx, m.stdin, m.stdout)
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
			//lint:ignore ST1005 pi-server's wording, which its clients match on
			return fmt.Errorf("Failed to start WebSocket server: cannot listen on %s: address already in use (is another agentd running? pick another --port)", addr)
		}
		//lint:ignore ST1005 pi-server's wording, which its clients match on
		return fmt.Errorf("Failed to start WebSocket server: cannot listen on %s: %w", addr, err)
	}
	stopPprof, err := servePprof(sc.PprofAddr, log)
	if err != nil {
		srv.Close()
		_ = ln.Close()
		return err
	}
	defer stopPprof()
	var details []health.Detail
	if cn != nil {
		details = append(details, health.Detail{Name: "cluster", Value: func() any { return srv.ClusterStatus() }})
		// A node cut off from NATS cannot renew, publish or forward: it
		// is not ready, and its health says why, until it reconnects.
		hl.Need("cluster: not connected to NATS (reconnecting)", func() bool {
			st := srv.ClusterStatus()
			return st != nil && st.Connected
		})
	}
	mux := health.NewMux(hl, metrics, details...)
	// "/" is pi-server's WebSocket; a browser's plain GET of it (and of
	// /ui/) gets the web UI, itself a client of the REST + SSE API.
	mux.Handle("/", page.Handler(server.UpgradesOnly(pi.WebSocketHandler(piserver.WebSocketOptions{Token: sc.Token, OriginPatterns: sc.AllowOrigins}))))
	if sws != nil {
		sws.Mount(mux)
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
	faces := srv.ClusterProxy(sessionOfRequest, rest.Handler(mux))
	if cn != nil {
		if err := srv.AdvertiseHTTP(ctx, advertised(ln.Addr())); err != nil {
			log.Warn("cluster: announcing this node's address", "err", err)
		}
	}
	handler := server.GuardHost(server.HostPolicy{Listen: ln.Addr().String(), Allowed: sc.AllowedHosts}, faces)
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	if sc.SessionWSOff != "" {
		log.Warn("per-session WebSocket off", "why", sc.SessionWSOff)
	}
	reach := reachable(ln.Addr())
	log.Info("agentd serve listening", "addr", ln.Addr().String(), "ui", "http://"+reach+"/", "url", "ws://"+reach+"/", "api", "http://"+reach+"/api/v2",
		"model", model.Provider+"/"+model.ID, "data", cfg.DataDir, "auth", authOf(sc))
	if m.terminal {
		greet(m.stderr, reach, authOf(sc))
	}

	select {
	case <-ctx.Done():
		log.Info("shutting down", "drain", sc.ShutdownTimeout)
	case err = <-served:
		log.Error("http server stopped", "err", err)
	}
	// Stop taking connections and drain, side by side: hs.Shutdown closes
	// the listener at once and then waits for requests in flight;
	// WebSocket connections are hijacked and event streams never go idle,
	// so srv.Shutdown ends those, after the drain, which lets streams
	// carry the drained commands' events to the end.
	hsDone := make(chan struct{})
	go func() {
		defer close(hsDone)
		sctx, cancel := context.WithTimeout(context.Background(), sc.ShutdownTimeout+10*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if serr := srv.Shutdown(context.Background()); err == nil {
		err = serr
	}
	<-hsDone
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// withTools builds the engine's sessions with more tools: the MCP
// servers' of --mcp-config, shared (the sessions do not stop them).
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

type withTools struct {
	eng *engine.Engine
	set *mcp.Set
}

func (w withTools) Session(spec engine.Spec) (*session.Session, error) {
	sess, err := w.eng.Session(spec)
	if err == nil {
		sess.AddToolSource(w.set, nil)
	}
	return sess, err
}

// servePprof serves net/http/pprof's handlers on addr (loopback, checked
// by config) until the returned function stops it; an empty addr serves
// nothing.
func servePprof(addr string, log *slog.Logger) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(ln)
	}()
	log.Info("pprof listening", "pprof", "http://"+ln.Addr().String()+"/debug/pprof/")
	return func() {
		_ = hs.Close()
		<-done
	}, nil
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

func (m *Main) runToken(_ context.Context, _ *config.Config, fs *flag.FlagSet, args []string) error {
	if err := parseOwn(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(m.stdout, server.NewToken())
	return nil
}

// greet tells the person at the terminal, in a few plain lines under the
// log, where the server is and how to stop it.
func greet(w io.Writer, reach, auth string) {
	fmt.Fprintf(w, "\n  agentd is serving.\n\n  Web UI:  http://%s/\n  API:     http://%s/api/v2  (pi-server WebSocket: ws://%s/)\n", reach, reach, reach)
	if auth != "none" {
		fmt.Fprintf(w, "  Auth:    clients must present a %s (the web UI asks for it)\n", auth)
	}
	fmt.Fprint(w, "\n  Ctrl+C stops it (running commands get --shutdown-timeout to finish).\n\n")
}

// reachable is where this machine reaches a listener: a wildcard address
// ([::], 0.0.0.0) is no place to browse to, its loopback is.
func reachable(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return a.String()
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(tcp.Port))
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
