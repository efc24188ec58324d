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
//
// The owner is looked up as commands' is, from the owners cache; a node
// that gets a request passed on by a stale entry, for a session it does
// not run, reads the lease again and passes it on once more.
func (s *Server) ClusterProxy(sessionOf func(*http.Request) string, next http.Handler) http.Handler {
	cs := s.cl
	if cs == nil {
		return next
	}
	// One proxy for every node: the target travels in the request's
	// context, so nothing is built per request.
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(proxyTargetKey{}).(*proxyTarget)
			pr.SetURL(&url.URL{Scheme: "http", Host: t.addr})
			pr.Out.Host = t.addr
			pr.Out.Header.Add(hdrProxied, cs.node.ID())
			pr.SetXForwarded()
		},
		Transport:      cs.httpTransport,
		FlushInterval:  -1, // event streams go out as they come
		ModifyResponse: cutStreams,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			t := r.Context().Value(proxyTargetKey{}).(*proxyTarget)
			if r.Context().Err() != nil {
				// The client left (or the server stops): nobody reads an
				// answer, and the node said nothing about itself.
				s.log.Debug("cluster: a request passed on ended with its client", "session", t.id, "to", t.addr, "err", err)
				return
			}
			s.log.Warn("cluster: passing a request on", "session", t.id, "to", t.addr, "err", err)
			// The node may be gone: the next request looks its sessions up again.
			cs.forgetMembers()
			if t.retry {
				t.failed = errOwnerGone // ClusterProxy waits for the next owner
				return
			}
			http.Error(w, "The node running session "+t.id+" did not answer; try again", http.StatusBadGateway)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := sessionOf(r)
		hops := len(r.Header.Values(hdrProxied))
		if id == "" || hops >= proxyHops || cs.hostsOrMakes(id) {
			next.ServeHTTP(w, r)
			return
		}
		addr := cs.ownerAddr(r.Context(), id, hops > 0)
		if addr == "" {
			next.ServeHTTP(w, r) // nobody else runs it: served (or taken over) here
			return
		}
		// A bodiless request can be sent again: to the session's next
		// owner when this one does not answer (awaitOwner).
		retry := r.Method == http.MethodGet || r.Method == http.MethodHead
		for {
			t := &proxyTarget{id: id, addr: addr, retry: retry}
			proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), proxyTargetKey{}, t)))
			if t.failed == nil {
				return
			}
			to, ok := cs.awaitOwner(r.Context(), id, addr)
			if !ok {
				http.Error(w, "The node running session "+id+" did not answer and no node has taken the session over yet; try again", http.StatusBadGateway)
				return
			}
			if to == "" {
				break
			}
			addr = to
		}
		next.ServeHTTP(w, r) // nobody else runs it now: served (or taken over) here
	})
}

// proxyHops bounds how many nodes pass one request on: the first by its
// owners cache, the second (when the first's entry was stale) by a fresh
// read of the lease.
const proxyHops = 2

type proxyTargetKey struct{}

// proxyTarget is where ClusterProxy passes a request on.
type proxyTarget struct {
	id, addr string
	retry    bool  // the request may be sent again
	failed   error // set when the node did not answer and retry is set
}

// ownerAddr is the client address of the live node, other than this one,
// that runs session id; "" when there is none. The owner comes from the
// owners cache unless fresh, the address from the node list read at most
// every third of a lease TTL.
func (cs *clusterState) ownerAddr(ctx context.Context, id string, fresh bool) string {
	ctx, cancel := context.WithTimeout(ctx, clusterReadTimeout)
	defer cancel()
	owner, held, err := cs.leaseHolder(ctx, id, fresh)
	if err != nil || !held || owner == cs.node.ID() {
		return ""
	}
	addr := cs.nodeAddr(ctx, owner)
	if h, _, err := net.SplitHostPort(addr); err != nil || h == "" {
		return ""
	}
	return addr
}

// nodeAddr is the client address node announced, from the node list read
// at most every third of a lease TTL, or again when the list had none for
// it (it just joined, or had not advertised its address yet).
func (cs *clusterState) nodeAddr(ctx context.Context, node string) string {
	cs.mu.Lock()
	addr := cs.nodes[node].Addr
	recent := time.Since(cs.nodesAt) < cs.node.LeaseTTL()/3
	cs.mu.Unlock()
	if addr != "" && recent {
		return addr
	}
	nodes, err := cs.node.Nodes(ctx)
	if err != nil {
		return ""
	}
	cs.rememberNodes(nodes)
	return nodes[node].Addr
}
