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
			if want := strings.Trim(nodeIDStrip.ReplaceAllString(host, "-"), "-") + "-4000"; c.NodeID != want {
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
		{name: "replicas", args: []string{"--cluster", "embedded", "--cluster-replicas", "0"}, want: "--cluster-replicas 0: from 1 to 5"},
		{name: "stdio", args: []string{"--cluster", "embedded", "--stdio"}, want: "--cluster: a --stdio server has one client"},
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
