package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentd-dev/agentd/internal/cluster"
	"github.com/agentd-dev/agentd/internal/config"
	"github.com/agentd-dev/agentd/internal/convapi"
	"github.com/agentd-dev/agentd/internal/metrics"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/sessionws"
)

// joinTimeout bounds joining the cluster at start, which waits while a
// clustered JetStream elects its leader.
const joinTimeout = 30 * time.Second

// leaveTimeout bounds releasing what the server did not hand over.
const leaveTimeout = 5 * time.Second

// clusterNode is serve's membership in a cluster: the NATS server it runs
// (with --cluster embedded) and its node.
type clusterNode struct {
	node     *cluster.Node
	stopNATS func() // nil without an embedded server
}

// joinCluster starts the embedded NATS server when asked to and joins the
// cluster. The caller calls leave after the server has shut down.
func joinCluster(ctx context.Context, cc config.Cluster, stateDir string, log *slog.Logger) (*clusterNode, error) {
	cn := &clusterNode{}
	key, err := clusterKey(cc, stateDir, log)
	if err != nil {
		return nil, err
	}
	url := strings.Join(cc.URLs, ",")
	var inProcess inProcessNATS
	if cc.Embedded {
		ns, err := startEmbeddedNATS(filepath.Join(stateDir, "nats"), cc, key, log)
		if err != nil {
			return nil, fmt.Errorf("--cluster embedded: %w", err)
		}
		cn.stopNATS, url = ns.stop, ns.url
		if cc.TLSCert != "" {
			// Its own server's certificate names the host other nodes
			// reach it by; in the process there is nothing to encrypt.
			inProcess, url = ns.inProcess, ns.inProcessURL
		}
		log.Info("embedded NATS listening", "url", ns.url, "tls", cc.TLSCert != "", "routes", ns.routes, "replicas", cc.Replicas)
	}
	jctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	ncfg := cluster.Config{NodeID: cc.NodeID, URL: url, LeaseTTL: cc.LeaseTTL, Replicas: cc.Replicas, Logger: log, Key: key, NATS: cluster.Credentials(cc.NATS)}
	if inProcess != nil {
		ncfg.InProcess = inProcess
	}
	node, err := cluster.Join(jctx, ncfg)
	if err != nil {
		if cn.stopNATS != nil {
			cn.stopNATS()
		}
		return nil, fmt.Errorf("--cluster %s: %w", cc.Spec, err)
	}
	cn.node = node
	log.Info("joined the cluster", "node", cc.NodeID, "nats", url, "lease_ttl", cc.LeaseTTL)
	return cn, nil
}

// inProcessNATS connects to the embedded server without a socket.
type inProcessNATS interface{ InProcessConn() (net.Conn, error) }

// embeddedNATS is a running embedded NATS server.
type embeddedNATS struct {
	url, inProcessURL string
	routes            string // where it takes routes; "" when it forms no cluster
	inProcess         inProcessNATS
	stop              func()
}

// clusterKey reads the cluster key: from --cluster-key, which must
// exist, or from the state directory, where the first start makes it.
func clusterKey(cc config.Cluster, stateDir string, log *slog.Logger) (*cluster.Key, error) {
	if cc.KeyFile != "" {
		key, err := cluster.LoadKey(cc.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--cluster-key: %w (copy the file of the node that started the cluster, <data-dir>/server/cluster.key)", err)
		}
		return key, nil
	}
	path := filepath.Join(stateDir, "cluster.key")
	key, created, err := cluster.LoadOrCreateKey(path)
	if err != nil {
		return nil, fmt.Errorf("--cluster: %w", err)
	}
	if created {
		log.Info("made the cluster key; give every other node a copy with --cluster-key", "path", path, "public_key", key.PublicKey())
	}
	return key, nil
}

// leave releases what the server did not hand over (it handed its
// sessions over in Shutdown) and stops NATS last.
func (cn *clusterNode) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	_ = cn.node.Drain(ctx)
	if cn.stopNATS != nil {
		cn.stopNATS()
	}
}

// clusterMetrics adds the cluster's gauges to the server's registry.
func clusterMetrics(reg *metrics.Registry, srv *server.Server) error {
	read := func(f func(*server.ClusterStatus) float64) func() float64 {
		return func() float64 {
			if st := srv.ClusterStatus(); st != nil {
				return f(st)
			}
			return 0
		}
	}
	gauge := func(name, help string, f func(*server.ClusterStatus) float64) metrics.Collector {
		return metrics.NewGaugeFunc(name, help, read(f))
	}
	counter := func(name, help string, f func(*server.ClusterStatus) float64) metrics.Collector {
		return metrics.NewCounterFunc(name, help, read(f))
	}
	for _, c := range []metrics.Collector{
		gauge("agentd_cluster_connected", "1 while this node is connected to NATS.", func(st *server.ClusterStatus) float64 {
			if st.Connected {
				return 1
			}
			return 0
		}),
		gauge("agentd_cluster_leases", "Sessions this node owns.", func(st *server.ClusterStatus) float64 { return float64(st.Leases) }),
		gauge("agentd_cluster_members", "Live nodes this node last saw.", func(st *server.ClusterStatus) float64 { return float64(st.Members) }),
		gauge("agentd_cluster_followed_sessions", "Sessions owned elsewhere that clients of this node watch.", func(st *server.ClusterStatus) float64 { return float64(st.Followed) }),
		counter("agentd_cluster_forwarded_commands_total", "Commands this node sent to another node.", func(st *server.ClusterStatus) float64 { return float64(st.Forwarded) }),
		counter("agentd_cluster_received_commands_total", "Commands other nodes sent to this node.", func(st *server.ClusterStatus) float64 { return float64(st.Received) }),
		counter("agentd_cluster_takeovers_total", "Sessions this node took over from a node whose lease had expired.", func(st *server.ClusterStatus) float64 { return float64(st.Takeovers) }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// sessionOfRequest is the session an HTTP request names: a REST
// conversation or a per-session WebSocket; "" for none, and for a
// request every node serves itself (a conversation's event stream, fed
// from the cluster's stream: convapi.ServedEverywhere, and a session's
// WebSocket: sessionws.ServedEverywhere).
func sessionOfRequest(r *http.Request) string {
	if convapi.ServedEverywhere(r) || sessionws.ServedEverywhere(r) {
		return ""
	}
	for _, prefix := range []string{"/api/v2/conversations/", "/api/conversations/", sessionws.SessionsPath, sessionws.ConversionsPath} {
		if rest, ok := strings.CutPrefix(r.URL.Path, prefix); ok {
			id, _, _ := strings.Cut(rest, "/")
			return id
		}
	}
	return ""
}

// advertised is the address other nodes reach this one's clients at: the
// listener's, with the host name in place of an unspecified address.
func advertised(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return net.JoinHostPort(host, port)
}
