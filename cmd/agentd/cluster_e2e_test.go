package main

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/server"
)

// These tests run agentd as a cluster of real `agentd serve` processes on
// 127.0.0.1: node A with --cluster embedded (the NATS server with
// JetStream inside it), B and C joining it with --cluster nats://. Each
// node has its own data directory; the clients are pi-server WebSocket
// clients, the model is the wire-level mock.

// clNodes are the nodes of one test cluster, by id.
type clNodes map[string]*svServer

func clFreeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// clStart starts nodes A (embedded NATS), B and C, and waits until each
// sees all three as members.
func clStart(t *testing.T, e *e2eEnv, extra ...string) clNodes {
	t.Helper()
	natsAddr := clFreeAddr(t)
	common := append([]string{"--cluster-lease-ttl", "1s"}, extra...)
	nodes := clNodes{}
	nodes["A"] = svStart(t, e, append([]string{"--data-dir", filepath.Join(e.root, "node-A"), "--node-id", "A",
		"--cluster", "embedded", "--cluster-listen", natsAddr}, common...)...)
	for _, id := range []string{"B", "C"} {
		nodes[id] = svStart(t, e, append([]string{"--data-dir", filepath.Join(e.root, "node-"+id), "--node-id", id,
			"--cluster", "nats://" + natsAddr}, common...)...)
	}
	for id, n := range nodes {
		svWaitUntil(t, "node "+id+" sees three members", func() bool { return clStatus(t, n).Members == 3 })
	}
	return nodes
}

// clStatus is a node's cluster state from /healthz.
func clStatus(t *testing.T, s *svServer) server.ClusterStatus {
	t.Helper()
	code, _, body := svHTTPGet(t, s, "/healthz")
	var h struct {
		Status  string               `json:"status"`
		Cluster server.ClusterStatus `json:"cluster"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &h) != nil {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	return h.Cluster
}

// clSessionOn is a session id that a cluster of nodes places on node want.
func clSessionOn(want string, nodes ...string) string {
	for i := 0; ; i++ {
		id := fmt.Sprintf("s-%s-%d", strings.ToLower(want), i)
		if server.PlaceSession(id, nodes) == want {
			return id
		}
	}
}

// clSeqs are the seqs of a connection's events of session sid, in order.
func clSeqs(c *svConn, sid string) []uint64 {
	var out []uint64
	for _, f := range c.events(sid) {
		if n, ok := svNum(f.m, "seq"); ok {
			out = append(out, uint64(n))
		}
	}
	return out
}

func clCheckSeqs(t *testing.T, who string, seqs []uint64) {
	t.Helper()
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Errorf("%s: seq %d after %d: a seq went back or came twice (%v)", who, seqs[i], seqs[i-1], seqs)
			return
		}
	}
}

// A client of node A creates a session that node B owns, a client of C
// watches it, and a fourth connection (on C) answers its approval: every
// client sees the same events with the same seqs, as from one server.
func TestClusterCommandsAndEventsAcrossNodes(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	nodes := clStart(t, e, "--policy", e.writePolicy(`{"rules":[{"tool":"bash","action":"ask"}]}`))
	sid := clSessionOn("B", "A", "B", "C")

	a := nodes["A"].dial("a")
	svCreate(a, sid)
	if st := clStatus(t, nodes["B"]); st.Leases != 1 {
		t.Fatalf("node B holds %d leases after a create placed on it, want 1: %+v", st.Leases, st)
	}
	if st := clStatus(t, nodes["A"]); st.Leases != 0 || st.Forwarded == 0 {
		t.Fatalf("node A: %+v, want no lease and a forwarded command", st)
	}

	c := nodes["C"].dial("c")
	c.must("switch_session", svM{"id": "c-switch", "sessionId": sid})
	approver := nodes["C"].dial("approver")

	a.send(svM{"id": "p1", "type": "prompt", "sessionId": sid, "message": "CMD:echo across-nodes"})
	req := c.waitEvent(sid, "extension_ui_request")
	rid := svStr(req.m, "event", "requestId")
	if rid == "" {
		t.Fatalf("no requestId: %s", req)
	}
	svWantOK(t, approver.call(svM{"id": "ans", "type": "extension_ui_response", "sessionId": sid, "requestId": rid,
		"response": svM{"method": "select", "value": "Allow"}}))
	svWantOK(t, a.response("p1"))
	te := c.waitEvent(sid, "tool_execution_end")
	if !strings.Contains(te.raw, "across-nodes") {
		t.Errorf("the approved tool's output did not reach node C's client: %s", te)
	}
	c.waitEvent(sid, "agent_end")
	a.waitEvent(sid, "agent_end")

	// Both clients saw the same events, in the same order, with the same
	// seqs: the one on C from the stream, the one on A likewise.
	sa, sc := clSeqs(a, sid), clSeqs(c, sid)
	clCheckSeqs(t, "client of A", sa)
	clCheckSeqs(t, "client of C", sc)
	last := func(s []uint64) uint64 {
		if len(s) == 0 {
			return 0
		}
		return s[len(s)-1]
	}
	if last(sa) != last(sc) || last(sa) == 0 {
		t.Errorf("last seq: client of A %d, client of C %d", last(sa), last(sc))
	}
	// A client of A that resumes from a cursor gets exactly what follows.
	cursor := sc[len(sc)/2]
	r := nodes["A"].dial("resume")
	r.must("switch_session", svM{"id": "r-switch", "sessionId": sid, "afterSeq": cursor})
	end := last(sc)
	if _, _, err := r.tryWaitFor(0, svWait, func(f svFrame) bool {
		n, _ := svNum(f.m, "seq")
		return f.isEvent(sid, "") && uint64(n) == end
	}); err != nil {
		t.Fatalf("the client resuming on A after %d did not catch up to %d: %v\n%s", cursor, last(sc), err, r.tail(20))
	}
	rs := clSeqs(r, sid)
	clCheckSeqs(t, "resumed client", rs)
	if rs[0] <= cursor {
		t.Errorf("resumed after %d, first event %d", cursor, rs[0])
	}
	var want []uint64
	for _, s := range sc {
		if s > cursor {
			want = append(want, s)
		}
	}
	svEq(t, "resumed seqs", rs, want)

	// Reads from any node answer from the owner.
	st := c.must("get_state", svM{"id": "c-state", "sessionId": sid})
	if svStr(st.m, "data", "sessionId") == "" && !svHas(st.m, "data") {
		t.Errorf("get_state through C: %s", st)
	}
	msgs := a.must("get_messages", svM{"id": "a-msgs", "sessionId": sid})
	if !strings.Contains(msgs.raw, "across-nodes") {
		t.Errorf("get_messages through A lacks the run: %s", msgs)
	}
}
