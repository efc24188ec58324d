package config

import (
	"errors"
	"fmt"
	"net"
	"strconv"
)

// checkRoutes checks the embedded server's routes: addresses that are
// host:port. Routes need no certificate off loopback: without one every
// node derives the same certificate from the cluster key and trusts it
// alone (embeddednats' secretRouteTLS), so the route secret only crosses
// TLS to a peer that holds the key. Three machines form a cluster with
// nothing but the key copied to each.
func (c *Cluster) checkRoutes() []error {
	var errs []error
	if c.RouteListen == "" {
		if len(c.Routes) > 0 {
			errs = append(errs, errors.New("--cluster-routes: needs --cluster-route-listen, where this node's embedded NATS takes the routes of the others"))
		}
		if c.TLSCA != "" {
			errs = append(errs, errors.New("--cluster-tls-ca: only with --cluster-route-listen (it verifies route peers)"))
		}
		return errs
	}
	checkAddr := func(flag, addr string) {
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q: want host:port (%v)", flag, addr, err))
			return
		}
		if n, err := strconv.Atoi(p); err != nil || n < 0 || n > 65535 {
			errs = append(errs, fmt.Errorf("%s %q: port %q is not a number from 0 to 65535", flag, addr, p))
		}
	}
	if len(c.Routes) == 0 {
		// A lone node with a route listener waits at start for routes
		// that never come (NATS: "Waiting for routing to be established")
		// and fails its start-up timeout; say so here instead.
		errs = append(errs, fmt.Errorf("--cluster-route-listen %s: needs --cluster-routes with the route addresses of the other nodes (the same list on every node, this one's may be in it); an embedded cluster of one needs neither flag", c.RouteListen))
	}
	checkAddr("--cluster-route-listen", c.RouteListen)
	for _, r := range c.Routes {
		checkAddr("--cluster-routes", r)
	}
	if c.TLSCA != "" && c.TLSCert == "" {
		errs = append(errs, errors.New("--cluster-tls-ca: only with --cluster-tls-cert (without a certificate, routes trust only the one derived from the cluster key)"))
	}
	return errs
}

// routedNodes is how many embedded servers the routes name, this one
// included: the routes other than its own route address, plus one.
func (c *Cluster) routedNodes() int {
	seen := map[string]bool{c.RouteListen: true}
	for _, r := range c.Routes {
		seen[r] = true
	}
	return len(seen)
}
