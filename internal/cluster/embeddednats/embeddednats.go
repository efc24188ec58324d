// Package embeddednats runs a NATS server with JetStream inside the agentd
// process: for a single node, for tests, or as one member of a small
// cluster of nodes with nothing else installed. It is its own package so
// that a node joining an external NATS (package cluster alone) does not
// link the server: a small program that imports it is about 15 MB larger
// than one that only imports package cluster (25.3 MB against 9.8 MB).
package embeddednats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// Config describes the server.
type Config struct {
	// StoreDir is where JetStream keeps its streams; required.
	StoreDir string
	// Listen is the client address, host:port. Port 0 picks a free one.
	// Empty means 127.0.0.1:0.
	Listen string
	// ServerName names this server in the cluster; it must be unique among
	// servers sharing a JetStream cluster. Empty lets NATS pick one.
	ServerName string
	// ClusterName, ClusterListen and Routes join other embedded servers:
	// set all three (Routes may name this server's own route address) to
	// form a JetStream cluster. Empty ClusterListen runs a single server.
	// Routes are host:port or nats-route://host:port addresses.
	ClusterName   string
	ClusterListen string
	Routes        []string
	// RouteSecret authenticates routes, both ways: a server takes a route
	// only from a peer that presents it, and presents it to the peers it
	// dials. Required with ClusterListen (cluster.Key.RouteSecret, so the
	// cluster key's holders and nobody else form the cluster).
	RouteSecret string
	// TLSCA verifies the certificates of route peers, with TLSCert and
	// TLSKey: with a certificate, routes speak TLS both ways and each
	// side must present a certificate the CA signed (so the certificate
	// needs both server and client authentication in its key usage).
	// Empty means the system's roots.
	TLSCA string
	// Nkey is the public nkey (U…) of the one NATS user the server admits:
	// the cluster key's (cluster.Key.PublicKey). Required: a client must
	// prove it holds the key's seed, and nobody else gets in.
	Nkey string
	// TLSCert and TLSKey are the client listener's certificate and key
	// files: with them, clients must speak TLS. Both or neither.
	TLSCert, TLSKey string
	// ReadyTimeout bounds how long Start waits for the server to
	// accept clients; zero means 10s. It does not wait for a clustered
	// JetStream to elect its leader: cluster.Join retries until it can.
	ReadyTimeout time.Duration
	// Logger receives the server's notices, warnings and errors; nil
	// discards them.
	Logger *slog.Logger
}

// Server is a running in-process NATS server.
type Server struct {
	srv *server.Server
}

// Start starts a NATS server with JetStream in this process and waits
// until it accepts clients. The caller must call Shutdown.
func Start(cfg Config) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("embeddednats: NATS needs a JetStream store directory")
	}
	if !nkeys.IsValidPublicUserKey(cfg.Nkey) {
		return nil, errors.New("embeddednats: NATS needs the public user nkey of the one user it admits")
	}
	host, port, err := splitHostPort(cfg.Listen, "127.0.0.1", 0)
	if err != nil {
		return nil, fmt.Errorf("embeddednats: listen address %q: %w", cfg.Listen, err)
	}
	opts := &server.Options{
		ServerName: cfg.ServerName,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		NoSigs:     true, // main() owns signals
		Nkeys:      []*server.NkeyUser{{Nkey: cfg.Nkey}},
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return nil, errors.New("embeddednats: a TLS certificate needs its key, and a key its certificate")
	}
	if cfg.TLSCert != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey})
		if err != nil {
			return nil, fmt.Errorf("embeddednats: TLS certificate %s and key %s: %w", cfg.TLSCert, cfg.TLSKey, err)
		}
		opts.TLS, opts.TLSConfig = true, tc
	}
	if port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	if cfg.ClusterListen != "" {
		if cfg.ClusterName == "" {
			return nil, errors.New("embeddednats: NATS with a cluster listen address needs a cluster name")
		}
		ch, cp, err := splitHostPort(cfg.ClusterListen, "127.0.0.1", 0)
		if err != nil {
			return nil, fmt.Errorf("embeddednats: cluster listen address %q: %w", cfg.ClusterListen, err)
		}
		if cfg.RouteSecret == "" {
			return nil, errors.New("embeddednats: NATS with a cluster listen address needs a route secret: routes without one would admit any server")
		}
		opts.Cluster = server.ClusterOpts{Name: cfg.ClusterName, Host: ch, Port: cp,
			Username: routeUser, Password: cfg.RouteSecret}
		if cfg.TLSCert != "" {
			tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey, CaFile: cfg.TLSCA, Verify: true})
			if err != nil {
				return nil, fmt.Errorf("embeddednats: route TLS (certificate %s, CA %q): %w", cfg.TLSCert, cfg.TLSCA, err)
			}
			// A route is dialled and accepted with the same
			// configuration: the CA verifies the peer either way.
			tc.RootCAs = tc.ClientCAs
			opts.Cluster.TLSConfig = tc
			opts.Cluster.TLSTimeout = 5
		} else {
			tc, err := secretRouteTLS(cfg.RouteSecret)
			if err != nil {
				return nil, fmt.Errorf("embeddednats: route TLS from the route secret: %w", err)
			}
			opts.Cluster.TLSConfig = tc
			opts.Cluster.TLSTimeout = 5
		}
		for _, r := range cfg.Routes {
			u, err := routeURL(r, cfg.RouteSecret)
			if err != nil {
				return nil, fmt.Errorf("embeddednats: route %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embeddednats: NATS: %w", err)
	}
	if cfg.Logger != nil {
		// --log-level debug turns on the server's debug notices
		// (routes connecting and closing, TLS handshakes), a level
		// below it the protocol trace.
		ctx := context.Background()
		srv.SetLoggerV2(natsLog{cfg.Logger.With("component", "nats-server")},
			cfg.Logger.Enabled(ctx, slog.LevelDebug), cfg.Logger.Enabled(ctx, slog.LevelDebug-4), false)
	}
	srv.Start()
	wait := cfg.ReadyTimeout
	if wait <= 0 {
		wait = 10 * time.Second
	}
	if !srv.ReadyForConnections(wait) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("embeddednats: NATS on %s not ready within %s", net.JoinHostPort(host, strconv.Itoa(port)), wait)
	}
	return &Server{srv: srv}, nil
}

// ClientURL is the nats:// address clients (cluster.Config.URL) connect to.
func (e *Server) ClientURL() string { return e.srv.ClientURL() }

// InProcessConn is a connection to the server without a socket
// (nats.InProcessServer): a node in the same process connects this way,
// which needs no TLS even when the listener requires it. Connect it to
// InProcessURL: ClientURL's tls:// would make the client start TLS.
func (e *Server) InProcessConn() (net.Conn, error) { return e.srv.InProcessConn() }

// InProcessURL is the URL for a client connecting with InProcessConn.
func (e *Server) InProcessURL() string {
	u := e.ClientURL()
	if rest, ok := strings.CutPrefix(u, "tls://"); ok {
		return "nats://" + rest
	}
	return u
}

// Shutdown stops the server and waits until it has stopped.
func (e *Server) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

// routeUser is the user name routes authenticate as; the secret is what
// matters.
const routeUser = "agentd-route"

// routeURL is a route address with the route credentials in it: a
// host:port, or a nats-route:// (or nats://) URL.
func routeURL(r, secret string) (*url.URL, error) {
	if !strings.Contains(r, "://") {
		r = "nats-route://" + r
	}
	u, err := url.Parse(r)
	if err != nil {
		return nil, err
	}
	if u.Hostname() == "" || u.Port() == "" {
		return nil, errors.New("want host:port")
	}
	u.User = url.UserPassword(routeUser, secret)
	return u, nil
}

// NumRoutes is how many routes to other servers this server has now.
func (e *Server) NumRoutes() int { return e.srv.NumRoutes() }

// ClusterAddr is the address the server takes routes on ("" without a
// cluster listen address).
func (e *Server) ClusterAddr() string {
	if a := e.srv.ClusterAddr(); a != nil {
		return a.String()
	}
	return ""
}

func splitHostPort(addr, defHost string, defPort int) (string, int, error) {
	if addr == "" {
		return defHost, defPort, nil
	}
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	if h == "" {
		h = defHost
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 || n > 65535 {
		return "", 0, fmt.Errorf("port %q is not a number from 0 to 65535", p)
	}
	return h, n, nil
}

// natsLog hands the NATS server's printf-style log lines to slog.
type natsLog struct{ l *slog.Logger }

func (n natsLog) Noticef(f string, v ...any) { n.l.Info(fmt.Sprintf(f, v...)) }
func (n natsLog) Warnf(f string, v ...any)   { n.l.Warn(fmt.Sprintf(f, v...)) }
func (n natsLog) Fatalf(f string, v ...any)  { n.l.Error(fmt.Sprintf(f, v...), "fatal", true) }
func (n natsLog) Errorf(f string, v ...any)  { n.l.Error(fmt.Sprintf(f, v...)) }
func (n natsLog) Debugf(f string, v ...any) {
	n.l.Log(context.Background(), slog.LevelDebug, fmt.Sprintf(f, v...))
}
func (n natsLog) Tracef(f string, v ...any) {
	n.l.Log(context.Background(), slog.LevelDebug-4, fmt.Sprintf(f, v...))
}
