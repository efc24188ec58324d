package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"
)

// Run serves what Open built until ctx ends (on a signal, in the
// command) or the HTTP server fails, then drains: running commands get
// --shutdown-timeout to finish. With --stdio it serves the one client on
// stdin and stdout until either ends. Close, called while Run runs, ends
// it the same way. Run may be called once, after Open succeeded.
func (s *Serve) Run(ctx context.Context) error {
	s.mu.Lock()
	if !s.ready || s.ran || s.closed {
		s.mu.Unlock()
		return errors.New("serve: Run needs one successful Open, runs once, and not after Close")
	}
	s.ran = true
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.stopRun, s.runDone = cancel, make(chan struct{})
	defer close(s.runDone)
	s.mu.Unlock()
	if s.sc.Stdio {
		return s.runStdio(ctx)
	}
	return s.runListener(ctx)
}

// runStdio serves pi-server's protocol on stdin and stdout.
func (s *Serve) runStdio(ctx context.Context) error {
	s.log.Info("agentd serve on stdio", "model", s.model.Provider+"/"+s.model.ID, "data", s.cfg.DataDir)
	err := s.pi.ServeStdio(ctx, s.m.stdin, s.m.stdout)
	if serr := s.srv.Shutdown(context.Background()); err == nil {
		err = serr
	}
	return err
}

// runListener serves HTTP on the listener until ctx ends or serving
// fails, and shuts down.
func (s *Serve) runListener(ctx context.Context) error {
	sc, hs := s.sc, s.hs
	served := make(chan error, 1)
	go func() { served <- hs.Serve(s.ln) }()
	if sc.SessionWSOff != "" {
		s.log.Warn("per-session WebSocket off", "why", sc.SessionWSOff)
	}
	reach := reachable(s.ln.Addr())
	s.log.Info("agentd serve listening", "addr", s.ln.Addr().String(), "ui", "http://"+reach+"/", "url", "ws://"+reach+"/", "api", "http://"+reach+"/api/v2",
		"model", s.model.Provider+"/"+s.model.ID, "data", s.cfg.DataDir, "auth", authOf(sc))
	if s.m.terminal {
		greet(s.m.stderr, reach, authOf(sc))
	}

	var err error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down", "drain", sc.ShutdownTimeout)
	case err = <-served:
		s.log.Error("http server stopped", "err", err)
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
	if serr := s.srv.Shutdown(context.Background()); err == nil {
		err = serr
	}
	<-hsDone
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
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
