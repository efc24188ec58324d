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
	"time"

	"github.com/agentd-dev/agentd/cluster"
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
	// for a NATS cluster.
	Replicas int
}

// ClusterDefaults reads the environment's cluster settings.
func ClusterDefaults(getenv func(string) string) Cluster {
	return Cluster{Spec: getenv("AGENTD_CLUSTER"), NodeID: getenv("AGENTD_NODE_ID"), Listen: "127.0.0.1:4222", LeaseTTL: cluster.DefaultLeaseTTL, Replicas: 1}
}

// Register adds the cluster flags.
func (c *Cluster) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.Spec, "cluster", c.Spec, "join a cluster: nats://host:port (comma-separated for several NATS servers), or \"embedded\" to run NATS with JetStream in this process for other nodes to join (env AGENTD_CLUSTER)")
	fs.StringVar(&c.Listen, "cluster-listen", c.Listen, "with --cluster embedded: where the embedded NATS server takes clients (other nodes join with --cluster nats://this-address)")
	fs.StringVar(&c.NodeID, "node-id", c.NodeID, "this node's id in the cluster, unique among nodes: letters, digits, '-' and '_' (default <hostname>-<port>) (env AGENTD_NODE_ID)")
	fs.DurationVar(&c.LeaseTTL, "cluster-lease-ttl", c.LeaseTTL, "how long a node's sessions stay its own after it stops renewing them (a crash); another node takes them over after that")
	fs.BoolVar(&c.Spread, "cluster-spread", c.Spread, "place each new session on a node chosen by hashing its id over the live nodes, instead of the node that received the command creating it")
	fs.IntVar(&c.Replicas, "cluster-replicas", c.Replicas, "copies JetStream keeps of the cluster's state (set by the first node to start): 1 for one NATS server, 3 for a NATS cluster")
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
		if _, p, err := net.SplitHostPort(c.Listen); err != nil {
			errs = append(errs, fmt.Errorf("--cluster-listen %q: want host:port (%v)", c.Listen, err))
		} else if n, err := strconv.Atoi(p); err != nil || n < 0 || n > 65535 {
			errs = append(errs, fmt.Errorf("--cluster-listen %q: port %q is not a number from 0 to 65535", c.Listen, p))
		}
	} else {
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
	if !cluster.ValidID(c.NodeID) {
		errs = append(errs, fmt.Errorf("--node-id %q: use letters, digits, '-' and '_' only (at most 200)", c.NodeID))
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("--cluster-replicas %d: from 1 to 5 (JetStream's limit)", c.Replicas))
	}
	if c.LeaseTTL < 300*time.Millisecond {
		errs = append(errs, fmt.Errorf("--cluster-lease-ttl %s: at least 300ms (renewals run every third of it)", c.LeaseTTL))
	}
	return errs
}

var nodeIDStrip = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// defaultNodeID is <hostname>-<port>, with anything a NATS subject token
// cannot hold replaced (what cluster.ValidID allows).
func defaultNodeID(port int) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "agentd"
	}
	host = strings.Trim(nodeIDStrip.ReplaceAllString(host, "-"), "-")
	if len(host) > 150 {
		host = host[:150]
	}
	if port == 0 {
		return host + "-pid" + strconv.Itoa(os.Getpid())
	}
	return host + "-" + strconv.Itoa(port)
}
