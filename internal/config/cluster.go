package config

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Cluster is how `agentd serve` joins a cluster of nodes on NATS
// JetStream. Without --cluster it is off and serve is a server on its own.
type Cluster struct {
	// Spec is --cluster as given ($AGENTD_CLUSTER): "embedded", or one or
	// more NATS URLs, comma-separated.
	Spec string
	// Embedded: run a NATS server with JetStream in this process, its
	// store under the state directory, listening at Listen so that other
	// nodes can join it.
	Embedded bool
	// URLs are the NATS servers to connect to (checked from Spec); empty
	// when Embedded, which connects to its own.
	URLs []string
	// Listen is the embedded NATS server's client address.
	Listen string
	// NodeID names this node; unique in the cluster. The default is
	// <hostname>-<port>: stable across restarts of the same server, and
	// different for two servers on one host. With --port 0 there is no
	// stable port, so it is <hostname>-pid<pid>.
	NodeID string
	// LeaseTTL is how long a session stays owned by a node that stopped
	// renewing its leases (a crash): the longest a dead node's sessions
	// wait before another node takes them over.
	LeaseTTL time.Duration
	// Spread places new sessions on their home node (rendezvous hashing
	// over the live nodes) instead of the node that created them.
	Spread bool
	// Replicas is how many copies JetStream keeps of the cluster's state
	// when this node is the first to create it: 1 for one NATS server, 3
	// for a NATS cluster. 0 (the default) is 1, or with RouteListen the
	// number of embedded servers up to 3 (check sets it).
	Replicas int
	// RouteListen is where the embedded NATS server takes routes from
	// the embedded servers of other nodes (--cluster-route-listen); with
	// it, the nodes' embedded servers form one NATS cluster with
	// JetStream replicated among them, and no node is needed by all.
	RouteListen string
	// Routes are the route addresses (host:port) of the other nodes'
	// embedded servers (--cluster-routes); this node's own may be among
	// them, so every node can be given the same list.
	Routes []string
	// TLSCA verifies the certificates route peers present when routes
	// speak TLS (with TLSCert); empty means the system's roots.
	TLSCA string
	// KeyFile is the cluster key's file (--cluster-key), the same key on
	// every node. Empty means cluster.key in the server's state
	// directory, made there on the first start.
	KeyFile string
	// TLSCert and TLSKey are the embedded NATS listener's certificate:
	// required when it listens off loopback.
	TLSCert, TLSKey string
	// NATS is how a node authenticates to an external NATS and checks
	// its certificate; with no credential it uses the cluster key.
	NATS NATSCredentials
}

// NATSCredentials are the flags of cluster.Credentials, field for field
// (cli converts one to the other, so the compiler keeps them alike):
// config holds plain values and does not import the NATS client.
type NATSCredentials struct {
	User         string
	PasswordFile string
	TokenFile    string
	NkeyFile     string // a user nkey seed
	CredsFile    string // a .creds file (user JWT and seed)
	// TLSCA verifies the server's certificate instead of the system's
	// roots; TLSCert and TLSKey are this node's client certificate.
	TLSCA, TLSCert, TLSKey string
}

// HasAuth reports whether any credential other than the cluster key is
// given.
func (c NATSCredentials) HasAuth() bool {
	return c.User != "" || c.PasswordFile != "" || c.TokenFile != "" || c.NkeyFile != "" || c.CredsFile != ""
}

// DefaultLeaseTTL is --cluster-lease-ttl's default: cluster.DefaultLeaseTTL
// (cli's tests check they agree).
const DefaultLeaseTTL = 10 * time.Second

// ValidNodeID is cluster.ValidID's rule (cli's tests check they agree):
// one NATS subject token of letters, digits, '-' and '_', at most 200.
func ValidNodeID(id string) bool {
	if len(id) == 0 || len(id) > 200 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ClusterDefaults reads the environment's cluster settings.
func ClusterDefaults(getenv func(string) string) Cluster {
	return Cluster{Spec: getenv("AGENTD_CLUSTER"), NodeID: getenv("AGENTD_NODE_ID"), Listen: "127.0.0.1:4222", LeaseTTL: DefaultLeaseTTL,
		KeyFile: getenv("AGENTD_CLUSTER_KEY")}
}

// Register adds the cluster flags.
func (c *Cluster) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.Spec, "cluster", c.Spec, "join a cluster: nats://host:port (comma-separated for several NATS servers), or \"embedded\" to run NATS with JetStream in this process for other nodes to join (env AGENTD_CLUSTER)")
	fs.StringVar(&c.Listen, "cluster-listen", c.Listen, "with --cluster embedded: where the embedded NATS server takes clients (other nodes join with --cluster nats://this-address)")
	fs.StringVar(&c.NodeID, "node-id", c.NodeID, "this node's id in the cluster, unique among nodes: letters, digits, '-' and '_' (default <hostname>-<port>) (env AGENTD_NODE_ID)")
	fs.DurationVar(&c.LeaseTTL, "cluster-lease-ttl", c.LeaseTTL, "how long a node's sessions stay its own after it stops renewing them (a crash); another node takes them over after that")
	fs.BoolVar(&c.Spread, "cluster-spread", c.Spread, "place each new session on a node chosen by hashing its id over the live nodes, instead of the node that received the command creating it")
	fs.IntVar(&c.Replicas, "cluster-replicas", c.Replicas, "copies JetStream keeps of the cluster's state (set by the first node to start): 1 for one NATS server, 3 for a NATS cluster (default 1; with --cluster-route-listen, the number of nodes up to 3)")
	fs.StringVar(&c.RouteListen, "cluster-route-listen", c.RouteListen, "with --cluster embedded: where the embedded NATS server takes routes from the other nodes' embedded servers, host:port; with it the nodes form one NATS cluster with JetStream replicated among them (3 nodes: any one may die). Routes are authenticated with the cluster key and always speak TLS: with --cluster-tls-cert, or a certificate derived from the key")
	fs.Func("cluster-routes", "with --cluster-route-listen: the other nodes' route addresses, host:port, comma-separated (this node's own may be listed too, so every node can be given the same list)", func(v string) error {
		c.Routes = nil
		for _, r := range strings.Split(v, ",") {
			if r = strings.TrimSpace(r); r != "" {
				c.Routes = append(c.Routes, r)
			}
		}
		return nil
	})
	fs.StringVar(&c.TLSCA, "cluster-tls-ca", c.TLSCA, "with --cluster-route-listen and --cluster-tls-cert: CA certificates (PEM) that verify the other nodes' route certificates, which must allow server and client authentication (default: the system's)")
	fs.StringVar(&c.KeyFile, "cluster-key", c.KeyFile, "the cluster key file (0600), the same on every node: nodes sign what they send each other with it, and authenticate to the embedded NATS with it (default <data-dir>/server/cluster.key, made on first start; give other nodes a copy) (env AGENTD_CLUSTER_KEY)")
	fs.StringVar(&c.TLSCert, "cluster-tls-cert", c.TLSCert, "with --cluster embedded: the NATS listener's TLS certificate (PEM), and its routes' with --cluster-route-listen; required off loopback")
	fs.StringVar(&c.TLSKey, "cluster-tls-key", c.TLSKey, "with --cluster embedded: the key of --cluster-tls-cert (PEM)")
	fs.StringVar(&c.NATS.User, "nats-user", c.NATS.User, "with --cluster nats://…: the NATS user name (with --nats-password-file)")
	fs.StringVar(&c.NATS.PasswordFile, "nats-password-file", c.NATS.PasswordFile, "with --cluster nats://…: file holding the NATS password of --nats-user")
	fs.StringVar(&c.NATS.TokenFile, "nats-token-file", c.NATS.TokenFile, "with --cluster nats://…: file holding a NATS token")
	fs.StringVar(&c.NATS.NkeyFile, "nats-nkey", c.NATS.NkeyFile, "with --cluster nats://…: a NATS user nkey seed file")
	fs.StringVar(&c.NATS.CredsFile, "nats-creds", c.NATS.CredsFile, "with --cluster nats://…: a NATS .creds file (user JWT and seed)")
	fs.StringVar(&c.NATS.TLSCA, "nats-tls-ca", c.NATS.TLSCA, "with --cluster nats://…: CA certificates (PEM) that verify the NATS server (default: the system's)")
	fs.StringVar(&c.NATS.TLSCert, "nats-tls-cert", c.NATS.TLSCert, "with --cluster nats://…: this node's TLS client certificate (PEM), for a NATS server that asks for one")
	fs.StringVar(&c.NATS.TLSKey, "nats-tls-key", c.NATS.TLSKey, "with --cluster nats://…: the key of --nats-tls-cert (PEM)")
}

// Enabled reports whether serve runs as a cluster node.
func (c *Cluster) Enabled() bool { return c.Spec != "" }

// check validates the cluster settings and fills what they imply.
func (c *Cluster) check(port int, stdio bool) []error {
	c.Spec = strings.TrimSpace(c.Spec)
	if c.Spec == "" {
		return nil
	}
	var errs []error
	if stdio {
		errs = append(errs, errors.New("--cluster: a --stdio server has one client and cannot be a cluster node"))
	}
	c.Embedded, c.URLs = false, nil
	if c.Spec == "embedded" {
		c.Embedded = true
		if h, p, err := net.SplitHostPort(c.Listen); err != nil {
			errs = append(errs, fmt.Errorf("--cluster-listen %q: want host:port (%v)", c.Listen, err))
		} else if n, err := strconv.Atoi(p); err != nil || n < 0 || n > 65535 {
			errs = append(errs, fmt.Errorf("--cluster-listen %q: port %q is not a number from 0 to 65535", c.Listen, p))
		} else if !loopbackHost(h) && c.TLSCert == "" {
			// Clients always need the cluster key; off loopback what
			// crosses the network must be encrypted as well.
			errs = append(errs, fmt.Errorf("--cluster-listen %s is reachable from other hosts: the embedded NATS needs TLS there; set --cluster-tls-cert and --cluster-tls-key (other nodes verify it with --nats-tls-ca), or listen on 127.0.0.1", c.Listen))
		}
		errs = append(errs, c.checkRoutes()...)
		if c.NATS.HasAuth() || c.NATS.TLSCA != "" || c.NATS.TLSCert != "" || c.NATS.TLSKey != "" {
			errs = append(errs, errors.New("--nats-*: only with --cluster nats://…; with --cluster embedded the node connects to its own NATS server with the cluster key"))
		}
	} else {
		if c.TLSCert != "" || c.TLSKey != "" {
			errs = append(errs, errors.New("--cluster-tls-cert, --cluster-tls-key: only with --cluster embedded (for the TLS of an external NATS, see --nats-tls-ca, --nats-tls-cert)"))
		}
		if c.RouteListen != "" || len(c.Routes) > 0 || c.TLSCA != "" {
			errs = append(errs, errors.New("--cluster-route-listen, --cluster-routes, --cluster-tls-ca: only with --cluster embedded (an external NATS forms its own cluster)"))
		}
		for _, raw := range strings.Split(c.Spec, ",") {
			raw = strings.TrimSpace(raw)
			u, err := url.Parse(raw)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("--cluster %q: %q is not a URL: %v", c.Spec, raw, err))
			case u.Scheme != "nats" && u.Scheme != "tls" && u.Scheme != "ws" && u.Scheme != "wss":
				errs = append(errs, fmt.Errorf("--cluster %q: %q: want embedded, or NATS URLs like nats://host:4222", c.Spec, raw))
			case u.Hostname() == "" || u.Port() == "":
				errs = append(errs, fmt.Errorf("--cluster %q: %q needs a host and a port, like nats://host:4222", c.Spec, raw))
			default:
				c.URLs = append(c.URLs, raw)
			}
		}
	}
	if c.NodeID == "" {
		c.NodeID = defaultNodeID(port)
	}
	if !ValidNodeID(c.NodeID) {
		errs = append(errs, fmt.Errorf("--node-id %q: use letters, digits, '-' and '_' only (at most 200)", c.NodeID))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("--cluster-tls-cert and --cluster-tls-key: give both"))
	}
	if (c.NATS.User == "") != (c.NATS.PasswordFile == "") {
		errs = append(errs, errors.New("--nats-user and --nats-password-file: give both"))
	}
	if (c.NATS.TLSCert == "") != (c.NATS.TLSKey == "") {
		errs = append(errs, errors.New("--nats-tls-cert and --nats-tls-key: give both"))
	}
	creds := 0
	for _, set := range []string{c.NATS.User + c.NATS.PasswordFile, c.NATS.TokenFile, c.NATS.NkeyFile, c.NATS.CredsFile} {
		if set != "" {
			creds++
		}
	}
	if creds > 1 {
		errs = append(errs, errors.New("--nats-user, --nats-token-file, --nats-nkey, --nats-creds: give one NATS credential"))
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("--cluster-replicas %d: from 1 to 5 (JetStream's limit)", c.Replicas))
	} else if c.Replicas == 0 {
		c.Replicas = 1
		if c.Embedded && c.RouteListen != "" {
			c.Replicas = min(3, c.routedNodes())
		}
	}
	if c.LeaseTTL < 300*time.Millisecond {
		errs = append(errs, fmt.Errorf("--cluster-lease-ttl %s: at least 300ms (renewals run every third of it)", c.LeaseTTL))
	}
	return errs
}

// loopbackHost reports whether a listen host is reachable from this host
// only: localhost or a loopback address. An empty host is every address.
func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// nodeIDStrip is compiled on first use: only a cluster node without an id
// of its own needs it.
var nodeIDStrip = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[^A-Za-z0-9_-]+`) })

// defaultNodeID is <hostname>-<port>, with anything a NATS subject token
// cannot hold replaced (what ValidNodeID allows).
func defaultNodeID(port int) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "agentd"
	}
	host = strings.Trim(nodeIDStrip().ReplaceAllString(host, "-"), "-")
	if len(host) > 150 {
		host = host[:150]
	}
	if port == 0 {
		return host + "-pid" + strconv.Itoa(os.Getpid())
	}
	return host + "-" + strconv.Itoa(port)
}
