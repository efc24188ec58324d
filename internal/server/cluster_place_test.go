package server

import (
	"context"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/pipeline"
)

// believeMembers makes n place sessions by members until the test ends
// (a later read of the node list, checkNodes's, replaces it).
func believeMembers(n *testNode, members ...string) {
	cs := n.srv.cl
	cs.mu.Lock()
	cs.members, cs.nodesAt = members, time.Now().Add(time.Hour)
	cs.mu.Unlock()
}

// Just after a cluster starts, two nodes' lists of members may disagree:
// each places a new session on the other. The node a create was passed
// to runs it, rather than pass it back until the hops run out.
func TestClusterPassedOnRunsHere(t *testing.T) {
	nodes := startCluster(t, "a", "b")
	a, b := nodes["a"], nodes["b"]
	believeMembers(a, "b")
	believeMembers(b, "a")
	sid := "fresh"
	r := submit(t, a, pipeline.Command{Type: "t.create", SessionID: sid})
	if r.Err != nil || string(r.Data) != `"b"` {
		t.Fatalf("create through a, which places it on b, which places it on a: %+v %s, want it made on b", r.Err, r.Data)
	}
}

// The same for a session that exists and that nobody runs: the node it
// was passed to takes it over.
func TestClusterPassedOnTakesOver(t *testing.T) {
	nodes := startCluster(t, "a", "b")
	a, b := nodes["a"], nodes["b"]
	sid := sessionOn("b", "a", "b")
	if r := submit(t, b, pipeline.Command{Type: "t.create", SessionID: sid}); r.Err != nil {
		t.Fatal(r.Err)
	}
	h, err := b.srv.Session(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.srv.unload(h, false); err != nil { // its lease is let go
		t.Fatal(err)
	}
	believeMembers(a, "b")
	believeMembers(b, "a")
	r := submit(t, a, pipeline.Command{Type: "t.where", SessionID: sid})
	if r.Err != nil || string(r.Data) != `"b"` {
		t.Fatalf("t.where through a, which places it on b, which places it on a: %+v %s, want it run on b", r.Err, r.Data)
	}
}

// A node whose owners cache still names itself for a session it no longer
// runs (it let the session go, another node took it) reads the lease
// again rather than run the command here, where the session cannot be
// opened.
func TestClusterStaleSelfOwner(t *testing.T) {
	nodes := startClusterSpread(t, false, "a", "b")
	a, b := nodes["a"], nodes["b"]
	const sid = "on-b"
	if r := submit(t, b, pipeline.Command{Type: "t.create", SessionID: sid}); r.Err != nil {
		t.Fatal(r.Err)
	}
	a.srv.cl.rememberOwner(sid, "a")
	if r := submit(t, a, pipeline.Command{Type: "t.where", SessionID: sid}); r.Err != nil || string(r.Data) != `"b"` {
		t.Fatalf("t.where through a, whose cache says a runs it: %+v %s, want it run on b", r.Err, r.Data)
	}
}
