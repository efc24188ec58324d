package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// --cluster is off unless given; its URLs, the embedded server's listen
// address, the node id and the lease TTL are checked before anything
// starts, each error naming the flag and what was wrong.
func TestServeCluster(t *testing.T) {
	host, _ := os.Hostname()
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    string // error substring, "" for none
		check   func(t *testing.T, c Cluster)
		enabled bool
	}{
		{name: "off by default", check: func(t *testing.T, c Cluster) {
			if c.Embedded || c.URLs != nil || c.NodeID != "" {
				t.Errorf("no --cluster, yet %+v", c)
			}
		}},
		{name: "embedded", args: []string{"--cluster", "embedded", "--port", "4000"}, enabled: true, check: func(t *testing.T, c Cluster) {
			if !c.Embedded || c.Listen != "127.0.0.1:4222" || c.URLs != nil {
				t.Errorf("embedded: %+v", c)
			}
			if want := strings.Trim(nodeIDStrip().ReplaceAllString(host, "-"), "-") + "-4000"; c.NodeID != want {
				t.Errorf("default node id %q, want %q", c.NodeID, want)
			}
		}},
		{name: "several URLs", args: []string{"--cluster", "nats://n1:4222, nats://n2:4222", "--node-id", "a_1"}, enabled: true,
			check: func(t *testing.T, c Cluster) {
				if !reflect.DeepEqual(c.URLs, []string{"nats://n1:4222", "nats://n2:4222"}) || c.NodeID != "a_1" {
					t.Errorf("URLs: %+v", c)
				}
			}},
		{name: "from the environment", env: map[string]string{"AGENTD_CLUSTER": "nats://n1:4222", "AGENTD_NODE_ID": "env-node"}, enabled: true,
			check: func(t *testing.T, c Cluster) {
				if c.NodeID != "env-node" || len(c.URLs) != 1 {
					t.Errorf("environment: %+v", c)
				}
			}},
		{name: "port 0 has no stable id", args: []string{"--cluster", "embedded", "--port", "0"}, enabled: true, check: func(t *testing.T, c Cluster) {
			if !strings.Contains(c.NodeID, "-pid") {
				t.Errorf("node id with --port 0: %q", c.NodeID)
			}
		}},
		{name: "not a NATS URL", args: []string{"--cluster", "http://n1:4222"}, want: `"http://n1:4222": want embedded, or NATS URLs like nats://host:4222`},
		{name: "no port", args: []string{"--cluster", "nats://n1"}, want: `"nats://n1" needs a host and a port`},
		{name: "a typo of embedded", args: []string{"--cluster", "embeded"}, want: `"embeded": want embedded, or NATS URLs`},
		{name: "bad listen address", args: []string{"--cluster", "embedded", "--cluster-listen", "4222"}, want: `--cluster-listen "4222": want host:port`},
		{name: "bad node id", args: []string{"--cluster", "embedded", "--node-id", "a.b"}, want: `--node-id "a.b": use letters, digits`},
		{name: "TTL too short", args: []string{"--cluster", "embedded", "--cluster-lease-ttl", "10ms"}, want: "--cluster-lease-ttl 10ms: at least 300ms"},
		{name: "replicas", args: []string{"--cluster", "embedded", "--cluster-replicas", "6"}, want: "--cluster-replicas 6: from 1 to 5"},
		{name: "stdio", args: []string{"--cluster", "embedded", "--stdio"}, want: "--cluster: a --stdio server has one client"},
		// Off loopback the embedded NATS takes TLS or does not start.
		{name: "every address without TLS", args: []string{"--cluster", "embedded", "--cluster-listen", "0.0.0.0:4222"},
			want: "--cluster-listen 0.0.0.0:4222 is reachable from other hosts: the embedded NATS needs TLS there; set --cluster-tls-cert and --cluster-tls-key"},
		{name: "empty host without TLS", args: []string{"--cluster", "embedded", "--cluster-listen", ":4222"}, want: "--cluster-listen :4222 is reachable from other hosts"},
		{name: "a host name without TLS", args: []string{"--cluster", "embedded", "--cluster-listen", "node1.example:4222"}, want: "is reachable from other hosts"},
		{name: "IPv6 any without TLS", args: []string{"--cluster", "embedded", "--cluster-listen", "[::]:4222"}, want: "is reachable from other hosts"},
		{name: "loopback needs no TLS", args: []string{"--cluster", "embedded", "--cluster-listen", "[::1]:4222"}, enabled: true},
		{name: "localhost needs no TLS", args: []string{"--cluster", "embedded", "--cluster-listen", "localhost:4222"}, enabled: true},
		{name: "every address with TLS", args: []string{"--cluster", "embedded", "--cluster-listen", "0.0.0.0:4222", "--cluster-tls-cert", "c.pem", "--cluster-tls-key", "k.pem"},
			enabled: true, check: func(t *testing.T, c Cluster) {
				if c.TLSCert != "c.pem" || c.TLSKey != "k.pem" {
					t.Errorf("TLS %q %q", c.TLSCert, c.TLSKey)
				}
			}},
		{name: "certificate without key", args: []string{"--cluster", "embedded", "--cluster-tls-cert", "c.pem"}, want: "--cluster-tls-cert and --cluster-tls-key: give both"},
		{name: "listener TLS for an external NATS", args: []string{"--cluster", "nats://n1:4222", "--cluster-tls-cert", "c.pem", "--cluster-tls-key", "k.pem"}, want: "only with --cluster embedded"},
		{name: "NATS credentials with embedded", args: []string{"--cluster", "embedded", "--nats-token-file", "t"}, want: "--nats-*: only with --cluster nats://"},
		{name: "user without password", args: []string{"--cluster", "nats://n1:4222", "--nats-user", "u"}, want: "--nats-user and --nats-password-file: give both"},
		{name: "two credentials", args: []string{"--cluster", "nats://n1:4222", "--nats-token-file", "t", "--nats-creds", "c"}, want: "give one NATS credential"},
		{name: "client certificate without key", args: []string{"--cluster", "nats://n1:4222", "--nats-tls-cert", "c"}, want: "--nats-tls-cert and --nats-tls-key: give both"},
		{name: "external NATS credentials", args: []string{"--cluster", "tls://n1:4222", "--nats-user", "u", "--nats-password-file", "p", "--nats-tls-ca", "ca.pem", "--cluster-key", "k"}, enabled: true,
			check: func(t *testing.T, c Cluster) {
				if c.NATS.User != "u" || c.NATS.PasswordFile != "p" || c.NATS.TLSCA != "ca.pem" || c.KeyFile != "k" {
					t.Errorf("%+v", c)
				}
			}},
		{name: "key from the environment", env: map[string]string{"AGENTD_CLUSTER": "nats://n1:4222", "AGENTD_CLUSTER_KEY": "/k"}, enabled: true,
			check: func(t *testing.T, c Cluster) {
				if c.KeyFile != "/k" {
					t.Errorf("key file %q", c.KeyFile)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseServe(tt.env, tt.args)
			if wantError(t, err, tt.want) {
				return
			}
			if s.Cluster.Enabled() != tt.enabled {
				t.Errorf("Enabled %v, want %v", s.Cluster.Enabled(), tt.enabled)
			}
			if tt.check != nil {
				tt.check(t, s.Cluster)
			}
		})
	}
}
