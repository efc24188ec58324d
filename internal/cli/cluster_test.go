package cli

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/cluster"
	"github.com/agentd-dev/agentd/internal/cluster/embeddednats"
	"github.com/agentd-dev/agentd/internal/config"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/metrics"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
)

// fauxBuilder makes sessions of the offline model.
type fauxBuilder struct{ p *faux.Provider }

func (b fauxBuilder) Session(spec sessionspec.Spec) (*session.Session, error) {
	return session.New(session.Config{
		Cwd: spec.Cwd, SessionsDir: spec.SessionsDir, Open: spec.Open, Model: faux.Model(), Stream: b.p.Stream,
		FirstSeq: spec.FirstSeq, ReserveSeq: spec.ReserveSeq, TranscriptOptions: spec.TranscriptOptions,
	})
}

// testServer is a started server; with clustered, node n1 of a cluster on
// an embedded NATS server.
func testServer(t *testing.T, clustered bool) *server.Server {
	t.Helper()
	dir := t.TempDir()
	cfg := server.Config{Builder: fauxBuilder{faux.New(faux.Options{})}, Cwd: dir,
		SessionsDir: filepath.Join(dir, "sessions"), StateDir: filepath.Join(dir, "state")}
	if clustered {
		key, err := cluster.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		ns, err := embeddednats.Start(embeddednats.Config{StoreDir: filepath.Join(dir, "nats"), Nkey: key.PublicKey()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ns.Shutdown)
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		node, err := cluster.Join(ctx, cluster.Config{Key: key, NodeID: "n1", URL: ns.ClientURL(), LeaseTTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = node.Close() })
		cfg.Cluster, cfg.Journal = node, node.Journal()
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// The cluster's gauges and counters read the server's ClusterStatus, 0
// without a cluster; registering them twice fails.
func TestClusterMetrics(t *testing.T) {
	tests := []struct {
		name      string
		clustered bool
		want      map[string]float64
	}{
		{"clustered", true, map[string]float64{"agentd_cluster_connected": 1, "agentd_cluster_leases": 0, "agentd_cluster_forwarded_commands_total": 0}},
		{"not clustered", false, map[string]float64{"agentd_cluster_connected": 0, "agentd_cluster_members": 0, "agentd_cluster_takeovers_total": 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := testServer(t, tc.clustered)
			reg := metrics.NewRegistry()
			if err := clusterMetrics(reg, srv); err != nil {
				t.Fatal(err)
			}
			got := map[string]float64{}
			types := map[string]string{}
			for line := range strings.Lines(metrics.Scrape(reg)) {
				f := strings.Fields(line)
				switch {
				case len(f) == 4 && f[0] == "#" && f[1] == "TYPE":
					types[f[2]] = f[3]
				case len(f) == 2 && (types[f[0]] == "gauge" || types[f[0]] == "counter"):
					v, err := strconv.ParseFloat(f[1], 64)
					if err != nil {
						t.Fatalf("sample %q: %v", line, err)
					}
					got[f[0]] = v
				}
			}
			if len(got) != 7 {
				t.Errorf("%d metrics %v, want 7", len(got), got)
			}
			for name, v := range tc.want {
				if g, ok := got[name]; !ok || g != v {
					t.Errorf("%s = %v (present %v), want %v", name, g, ok, v)
				}
			}
			if err := clusterMetrics(reg, srv); err == nil {
				t.Error("registering the metrics twice succeeded")
			}
		})
	}
}

// The address a node advertises is its listener's, with the host name for
// an address that listens everywhere.
func TestAdvertised(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		addr net.Addr
		want string
	}{
		{"IPv4 loopback", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, "127.0.0.1:8080"},
		{"IPv6 loopback", &net.TCPAddr{IP: net.IPv6loopback, Port: 9}, "[::1]:9"},
		{"IPv4 any", &net.TCPAddr{IP: net.IPv4zero, Port: 80}, net.JoinHostPort(host, "80")},
		{"IPv6 any", &net.TCPAddr{IP: net.IPv6unspecified, Port: 4000}, net.JoinHostPort(host, "4000")},
		{"no host", &net.TCPAddr{Port: 4000}, net.JoinHostPort("", "4000")},
		{"not host:port", &net.UnixAddr{Name: "/run/agentd.sock", Net: "unix"}, "/run/agentd.sock"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := advertised(tc.addr); got != tc.want {
				t.Errorf("advertised(%v) = %q, want %q", tc.addr, got, tc.want)
			}
		})
	}
}

// The session an HTTP request names: the REST face's conversations (both
// prefixes) and the per-session WebSockets; nothing else. A
// conversation's event stream and a session's WebSocket are served on
// every node (from the cluster's stream), never passed on.
func TestSessionOfRequest(t *testing.T) {
	tests := []struct{ path, want string }{
		{"/api/v2/conversations/s1", "s1"},
		{"/api/v2/conversations/s1/events", ""},
		{"/api/conversations/s1/events", ""},
		{"/api/v2/conversations/s1/events/x", "s1"},
		{"/api/conversations/s2/messages", "s2"},
		{"/api/v1/ws/sessions/s3", ""},
		{"/api/v1/ws/conversions/s4", ""},
		{"/api/v1/ws/sessions/s3/x", "s3"},
		{"/api/v2/conversations", ""},
		{"/api/v2/conversations/", ""},
		{"/api/v2/sessions/s1", ""},
		{"/healthz", ""},
		{"/", ""},
	}
	for _, tc := range tests {
		if got := sessionOfRequest(httptest.NewRequest(http.MethodGet, tc.path, nil)); got != tc.want {
			t.Errorf("sessionOfRequest(%s) = %q, want %q", tc.path, got, tc.want)
		}
	}
	if got := sessionOfRequest(httptest.NewRequest(http.MethodPost, "/api/v2/conversations/s1/events", nil)); got != "s1" {
		t.Errorf("sessionOfRequest(POST .../events) = %q, want s1 (only the stream's GET is served everywhere)", got)
	}
}

// The cluster key: made in the state directory on the first start and
// the same on the next; one named with --cluster-key must exist and be
// the owner's alone, and the errors say which flag and what to do.
func TestClusterKey(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	state := t.TempDir()
	first, err := clusterKey(config.Cluster{}, state, log)
	if err != nil {
		t.Fatal(err)
	}
	again, err := clusterKey(config.Cluster{}, state, log)
	if err != nil || again.PublicKey() != first.PublicKey() {
		t.Fatalf("second start: %v, same key %v", err, err == nil && again.PublicKey() == first.PublicKey())
	}
	copied := filepath.Join(t.TempDir(), "copy.key")
	if err := os.WriteFile(copied, first.Seed(), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := clusterKey(config.Cluster{KeyFile: copied}, t.TempDir(), log); err != nil || k.PublicKey() != first.PublicKey() {
		t.Fatalf("--cluster-key copy: %v", err)
	}
	if err := os.Chmod(copied, 0o640); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{copied, "--cluster-key: cluster key file " + copied + " is readable by others (mode 0640): run chmod 600"},
		{filepath.Join(t.TempDir(), "none.key"), "--cluster-key: cluster key file: stat"},
	} {
		if _, err := clusterKey(config.Cluster{KeyFile: tc.path}, state, log); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("clusterKey(%s): %v, want %q", tc.path, err, tc.want)
		}
	}
}
