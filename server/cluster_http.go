package server

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// hdrProxied marks a request one node passed on to another: it is served
// where it arrives, never passed on again.
const hdrProxied = "Agentd-Proxied-By"

// AdvertiseHTTP tells the other nodes of a cluster where this node serves
// its clients (host:port), so they can pass requests for its sessions on
// to it. A no-op without a cluster.
func (s *Server) AdvertiseHTTP(ctx context.Context, addr string) error {
	if s.cl == nil || s.cl.member == nil {
		return nil
	}
	return s.cl.member.Advertise(ctx, addr)
}

// ClusterProxy passes an HTTP request that names a session another node
// runs (sessionOf says which, "" for none) on to that node, and serves
// everything else with next: so a face that looks sessions up directly
// (the REST face's reads and event stream, the per-session WebSocket)
// answers on every node. WebSocket upgrades and streamed responses pass
// through; the client's credentials go along unchanged. Without a cluster
// it is next.
func (s *Server) ClusterProxy(sessionOf func(*http.Request) string, next http.Handler) http.Handler {
	cs := s.cl
	if cs == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := sessionOf(r)
		if id == "" || r.Header.Get(hdrProxied) != "" || cs.hostsOrMakes(id) {
			next.ServeHTTP(w, r)
			return
		}
		addr := cs.ownerAddr(r.Context(), id)
		if addr == "" {
			next.ServeHTTP(w, r) // nobody else runs it: served (or taken over) here
			return
		}
		proxy := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(&url.URL{Scheme: "http", Host: addr})
				pr.Out.Host = addr
				pr.Out.Header.Set(hdrProxied, cs.node.ID())
				pr.SetXForwarded()
			},
			Transport:     cs.httpTransport,
			FlushInterval: -1, // event streams go out as they come
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				s.log.Warn("cluster: passing a request on", "session", id, "to", addr, "err", err)
				http.Error(w, "The node running session "+id+" did not answer; try again", http.StatusBadGateway)
			},
		}
		proxy.ServeHTTP(w, r)
	})
}

// ownerAddr is the client address of the live node, other than this one,
// that runs session id; "" when there is none.
func (cs *clusterState) ownerAddr(ctx context.Context, id string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	owner, live, held, err := cs.node.LeaseOwner(ctx, id)
	if err != nil || !held || !live || owner == cs.node.ID() {
		return ""
	}
	nodes, err := cs.node.Nodes(ctx)
	if err != nil {
		return ""
	}
	addr := nodes[owner].Addr
	if h, _, err := net.SplitHostPort(addr); err != nil || h == "" {
		return ""
	}
	return addr
}
