package config

import (
	"reflect"
	"testing"
)

// --cluster-route-listen and --cluster-routes form a NATS cluster of the
// nodes' embedded servers: checked before anything starts, with TLS
// wherever the route secret would cross the network, and the replicas
// following the number of nodes unless given.
func TestServeClusterRoutes(t *testing.T) {
	emb := []string{"--cluster", "embedded"}
	three := []string{"--cluster-route-listen", "127.0.0.1:6222", "--cluster-routes", "127.0.0.1:6222, 127.0.0.1:6223,127.0.0.1:6224"}
	tls := []string{"--cluster-tls-cert", "c.pem", "--cluster-tls-key", "k.pem"}
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name  string
		args  []string
		want  string // error substring, "" for none
		check func(t *testing.T, c Cluster)
	}{
		{name: "one embedded server keeps one replica", args: emb, check: func(t *testing.T, c Cluster) {
			if c.Replicas != 1 || c.RouteListen != "" || c.Routes != nil {
				t.Errorf("%+v", c)
			}
		}},
		{name: "three nodes, own address listed", args: cat(emb, three), check: func(t *testing.T, c Cluster) {
			if c.Replicas != 3 || !reflect.DeepEqual(c.Routes, []string{"127.0.0.1:6222", "127.0.0.1:6223", "127.0.0.1:6224"}) {
				t.Errorf("%+v", c)
			}
		}},
		{name: "two nodes keep two", args: cat(emb, []string{"--cluster-route-listen", "127.0.0.1:6222", "--cluster-routes", "127.0.0.1:6223"}),
			check: func(t *testing.T, c Cluster) {
				if c.Replicas != 2 {
					t.Errorf("replicas %d, want 2", c.Replicas)
				}
			}},
		{name: "five nodes keep three", args: cat(emb, []string{"--cluster-route-listen", "127.0.0.1:1", "--cluster-routes", "127.0.0.1:2,127.0.0.1:3,127.0.0.1:4,127.0.0.1:5"}),
			check: func(t *testing.T, c Cluster) {
				if c.Replicas != 3 {
					t.Errorf("replicas %d, want 3", c.Replicas)
				}
			}},
		{name: "replicas given", args: cat(emb, three, []string{"--cluster-replicas", "2"}), check: func(t *testing.T, c Cluster) {
			if c.Replicas != 2 {
				t.Errorf("replicas %d, want 2", c.Replicas)
			}
		}},
		{name: "a route listener without routes", args: cat(emb, []string{"--cluster-route-listen", "127.0.0.1:6222"}), want: "--cluster-route-listen 127.0.0.1:6222: needs --cluster-routes"},
		{name: "routes without a route listener", args: cat(emb, []string{"--cluster-routes", "127.0.0.1:6223"}), want: "--cluster-routes: needs --cluster-route-listen"},
		{name: "routes on an external NATS", args: []string{"--cluster", "nats://n1:4222", "--cluster-route-listen", "127.0.0.1:6222"}, want: "only with --cluster embedded"},
		{name: "bad route listener", args: cat(emb, []string{"--cluster-route-listen", "6222"}), want: `--cluster-route-listen "6222": want host:port`},
		{name: "bad route", args: cat(emb, []string{"--cluster-route-listen", "127.0.0.1:6222", "--cluster-routes", "127.0.0.1:x"}), want: `--cluster-routes "127.0.0.1:x": port "x"`},
		{name: "off loopback without a certificate (the derived one)", args: cat(emb, []string{"--cluster-route-listen", "0.0.0.0:6222",
			"--cluster-routes", "node2.example:6222,node3.example:6222"}), check: func(t *testing.T, c Cluster) {
			if c.TLSCert != "" || c.Replicas != 3 {
				t.Errorf("%+v", c)
			}
		}},
		{name: "off loopback with TLS", args: cat(emb, tls, []string{"--cluster-listen", "0.0.0.0:4222", "--cluster-route-listen", "0.0.0.0:6222",
			"--cluster-routes", "node2.example:6222,node3.example:6222", "--cluster-tls-ca", "ca.pem"}), check: func(t *testing.T, c Cluster) {
			if c.TLSCA != "ca.pem" || c.Replicas != 3 {
				t.Errorf("%+v", c)
			}
		}},
		{name: "a CA without a certificate", args: cat(emb, []string{"--cluster-route-listen", "127.0.0.1:6222", "--cluster-tls-ca", "ca.pem"}), want: "--cluster-tls-ca: only with --cluster-tls-cert"},
		{name: "a CA without routes", args: cat(emb, tls, []string{"--cluster-tls-ca", "ca.pem"}), want: "--cluster-tls-ca: only with --cluster-route-listen"},
		{name: "negative replicas", args: cat(emb, []string{"--cluster-replicas", "-1"}), want: "--cluster-replicas -1: from 1 to 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseServe(nil, tt.args)
			if wantError(t, err, tt.want) {
				return
			}
			if tt.check != nil {
				tt.check(t, s.Cluster)
			}
		})
	}
}
