package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/cluster"
	"github.com/agentd-dev/agentd/internal/pipeline"
)

// proxyNodes serves each node's ClusterProxy on 127.0.0.1 and advertises
// it, in front of a handler that answers the node's id and how many nodes
// passed the request on. A request for /s/ID names session ID.
func proxyNodes(t testing.TB, nodes map[string]*testNode) map[string]string {
	t.Helper()
	urls := map[string]string{}
	for id, n := range nodes {
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s %d", id, len(r.Header.Values(hdrProxied)))
		})
		sessionOf := func(r *http.Request) string { return strings.TrimPrefix(r.URL.Path, "/s/") }
		hs := httptest.NewServer(n.srv.ClusterProxy(sessionOf, next))
		t.Cleanup(hs.Close)
		if err := n.srv.AdvertiseHTTP(context.Background(), hs.Listener.Addr().String()); err != nil {
			t.Fatal(err)
		}
		urls[id] = hs.URL
	}
	return urls
}

func get(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %q %v", url, resp.Status, b, err)
	}
	return string(b)
}

// A request for a session another node runs is passed on to it, by the
// owners cache commands use; a node that gets one by a stale entry reads
// the lease again and passes it on once more.
func TestClusterProxy(t *testing.T) {
	nodes := startClusterSpread(t, false, "a", "b", "c")
	urls := proxyNodes(t, nodes)
	const onB, free = "on-b", "free"
	if r := submit(t, nodes["b"], pipeline.Command{Type: "t.create", SessionID: onB}); r.Err != nil {
		t.Fatal(r.Err)
	}
	tests := []struct {
		name   string
		at, id string
		cached string // the owner the node at has in its cache for id
		noAddr string // a node the node list last read at had no address for
		want   string // the node that served it, and how many passed it on
	}{
		{"hosted here", "b", onB, "", "", "b 0"},
		{"owned elsewhere", "a", onB, "", "", "b 1"},
		{"no session named", "a", "", "", "", "a 0"},
		{"nobody owns it", "a", free, "", "", "a 0"},
		// c does not run it, reads the lease and finds nobody: served there.
		{"cached owner", "a", free, "c", "", "c 1"},
		{"stale cached owner", "a", onB, "c", "", "b 2"},
		// a let the session go since it cached itself as its owner.
		{"stale cached self", "a", onB, "a", "", "b 1"},
		// b had not advertised its address when a last read the list.
		{"address not known yet", "a", onB, "", "b", "b 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs := nodes[tc.at].srv.cl
			cs.forgetMembers()
			if tc.cached != "" {
				cs.mu.Lock()
				cs.owners[tc.id] = ownerSeen{node: tc.cached, at: time.Now()}
				cs.mu.Unlock()
			}
			if tc.noAddr != "" {
				cs.mu.Lock()
				cs.nodes, cs.nodesAt = map[string]cluster.NodeInfo{tc.noAddr: {}}, time.Now()
				cs.mu.Unlock()
			}
			if got := get(t, urls[tc.at]+"/s/"+tc.id); got != tc.want {
				t.Errorf("served as %q, want %q", got, tc.want)
			}
		})
	}
}

// BenchmarkClusterProxy is a request for a session another node runs,
// passed on to it.
func BenchmarkClusterProxy(b *testing.B) {
	nodes := startClusterSpread(b, false, "a", "b")
	urls := proxyNodes(b, nodes)
	if r := submit(b, nodes["b"], pipeline.Command{Type: "t.create", SessionID: "s1"}); r.Err != nil {
		b.Fatal(r.Err)
	}
	for b.Loop() {
		if got := get(b, urls["a"]+"/s/s1"); got != "b 1" {
			b.Fatalf("served as %q", got)
		}
	}
}

// A client that gives up on a request passed on to another node, before
// that node answered, says nothing about the node: the owners cache
// stays as it was (it was emptied, and every session's next request read
// its lease again).
func TestClusterProxyClientGone(t *testing.T) {
	nodes := startClusterSpread(t, false, "a", "b")
	const id = "on-b"
	if r := submit(t, nodes["b"], pipeline.Command{Type: "t.create", SessionID: id}); r.Err != nil {
		t.Fatal(r.Err)
	}
	sessionOf := func(r *http.Request) string { return strings.TrimPrefix(r.URL.Path, "/s/") }
	arrived := make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done() // answers nothing until the request ends
	})
	hb := httptest.NewServer(nodes["b"].srv.ClusterProxy(sessionOf, slow))
	t.Cleanup(hb.Close)
	if err := nodes["b"].srv.AdvertiseHTTP(context.Background(), hb.Listener.Addr().String()); err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	proxy := nodes["a"].srv.ClusterProxy(sessionOf, http.NotFoundHandler())
	ha := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(served)
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(ha.Close)
	cs := nodes["a"].srv.cl
	cs.forgetMembers()

	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ha.URL+"/s/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		<-arrived
		cancel()
	}()
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the request was answered: %s", resp.Status)
	}
	<-served
	cs.mu.Lock()
	seen, ok := cs.owners[id]
	addrsKnown := !cs.nodesAt.IsZero()
	cs.mu.Unlock()
	if !ok || seen.node != "b" || !addrsKnown {
		t.Errorf("after the client left, a's owners cache has %q (%v) for %s, addresses known %v; want b, kept", seen.node, ok, id, addrsKnown)
	}
}
