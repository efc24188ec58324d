// Package cluster is the foundation for running agentd as several nodes on
// NATS JetStream: which node owns a session (leases in a KV bucket, with an
// epoch to fence a stale owner's writes), how a command reaches the owner
// (request/reply on a per-session subject) and how a session's events are
// kept so a client of any node can resume by seq (a stream with dedupe by
// message id).
//
// Nothing here reads the environment or knows about sessions beyond their
// ids; the serve wiring passes one Config and decides what the payloads are.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedConfig describes a NATS server with JetStream run inside this
// process: for a single node, for tests, or as one member of a small cluster
// of agentd nodes with nothing else installed.
type EmbeddedConfig struct {
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
	ClusterName   string
	ClusterListen string
	Routes        []string
	// ReadyTimeout bounds how long StartEmbedded waits for the server to
	// accept clients; zero means 10s. It does not wait for a clustered
	// JetStream to elect its leader: Join retries until it can.
	ReadyTimeout time.Duration
	// Logger receives the server's notices, warnings and errors; nil
	// discards them.
	Logger *slog.Logger
}

// Embedded is a running in-process NATS server.
type Embedded struct {
	srv *server.Server
}

// StartEmbedded starts a NATS server with JetStream in this process and
// waits until it accepts clients. The caller must call Shutdown.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("cluster: embedded NATS needs a JetStream store directory")
	}
	host, port, err := splitHostPort(cfg.Listen, "127.0.0.1", 0)
	if err != nil {
		return nil, fmt.Errorf("cluster: embedded listen address %q: %w", cfg.Listen, err)
	}
	opts := &server.Options{
		ServerName: cfg.ServerName,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		NoSigs:     true, // main() owns signals
	}
	if port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	if cfg.ClusterListen != "" {
		if cfg.ClusterName == "" {
			return nil, errors.New("cluster: embedded NATS with a cluster listen address needs a cluster name")
		}
		ch, cp, err := splitHostPort(cfg.ClusterListen, "127.0.0.1", 0)
		if err != nil {
			return nil, fmt.Errorf("cluster: embedded cluster listen address %q: %w", cfg.ClusterListen, err)
		}
		opts.Cluster = server.ClusterOpts{Name: cfg.ClusterName, Host: ch, Port: cp}
		for _, r := range cfg.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("cluster: embedded route %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("cluster: embedded NATS: %w", err)
	}
	if cfg.Logger != nil {
		srv.SetLoggerV2(natsLog{cfg.Logger.With("component", "nats-server")}, false, false, false)
	}
	srv.Start()
	wait := cfg.ReadyTimeout
	if wait <= 0 {
		wait = 10 * time.Second
	}
	if !srv.ReadyForConnections(wait) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("cluster: embedded NATS on %s not ready within %s", net.JoinHostPort(host, strconv.Itoa(port)), wait)
	}
	return &Embedded{srv: srv}, nil
}

// ClientURL is the nats:// address clients (Config.URL) connect to.
func (e *Embedded) ClientURL() string { return e.srv.ClientURL() }

// Shutdown stops the server and waits until it has stopped.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
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
