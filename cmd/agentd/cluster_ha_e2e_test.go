package main

import (
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentd-dev/agentd/internal/cluster"
	"github.com/agentd-dev/agentd/internal/cluster/clustertest"
)

// Three agentd processes with --cluster embedded and nothing else: each
// runs its own NATS server, the three routed to each other into one NATS
// cluster with JetStream's state in 3 replicas, and each node a client of
// its own server only. Any one of them can die: the others go on. The
// lease is the default 10 s, longer than JetStream takes to elect new
// leaders for what the dead server led.

var clNATSURLRe = regexp.MustCompile(`embedded NATS listening.*? url=(\S+)`)

// natsURL is the client address of node id's embedded NATS, from its log.
func (h *clHA) natsURL(t *testing.T, id string) string {
	t.Helper()
	m := clNATSURLRe.FindStringSubmatch(h.nodes[id].stderr.String())
	if m == nil {
		t.Fatalf("node %s logged no embedded NATS URL:\n%s", id, h.nodes[id].stderrTail(3000))
	}
	return strings.Trim(m[1], `"`)
}

// wantReplicas checks, as a NATS client of node id's server holding the
// cluster key, that the event stream and the lease bucket are kept in
// want replicas, all of them current.
func (h *clHA) wantReplicas(t *testing.T, id string, want int) {
	t.Helper()
	auth, err := nats.NkeyOptionFromSeed(h.keyPath)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(h.natsURL(t, id), auth, nats.NoReconnect())
	if err != nil {
		t.Fatalf("connecting to node %s's NATS: %v", id, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), svWait)
	defer cancel()
	for _, name := range []string{cluster.EventStream, "KV_" + cluster.LeaseBucket} {
		svWaitUntil(t, name+" has "+strconv.Itoa(want)+" current replicas", func() bool {
			st, err := js.Stream(ctx, name)
			if err != nil {
				return false
			}
			info, err := st.Info(ctx)
			if err != nil || info.Config.Replicas != want || info.Cluster == nil || info.Cluster.Leader == "" {
				return false
			}
			current := 1 // the leader
			for _, p := range info.Cluster.Replicas {
				if p.Current && !p.Offline {
					current++
				}
			}
			return current == want
		})
	}
}

// A session on node B streams a tool's output, driven by a client of C
// and watched by clients of A, B and C; node A (the first started, the
// one whose NATS every node used before --cluster-routes) is killed -9
// mid-stream. The run goes on on B; the clients of B and C see every
// event, each once, in order; B keeps the session (no takeover), and the
// surviving two nodes go on: a further prompt, and a new session. A,
// restarted, rejoins with all three replicas current.
func TestClusterEmbeddedHAKillANode(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	h := clStartHA(t, e)
	h.wantReplicas(t, "B", 3)
	nodes := h.nodes
	sid := clSessionOn("B", "A", "B", "C")
	release := clFIFO(t, e)

	c := clCreate(nodes, "C", sid)
	b := clFollow(nodes, "B", sid)
	clFollow(nodes, "A", sid) // A's client watches until A is killed
	startsBefore := len(b.events(sid))

	c.send(svM{"id": "p1", "type": "prompt", "sessionId": sid,
		"message": "CMD:for i in $(seq 1 40); do echo pre-$i; sleep 0.05; done; cat release; for i in $(seq 1 40); do echo post-$i; sleep 0.01; done"})
	c.waitFor(0, "C's client sees the tool stream", func(f svFrame) bool {
		return f.isEvent(sid, "tool_execution_update") && strings.Contains(f.raw, "pre-")
	})
	nodes["A"].kill9()
	killed := time.Now()
	// The rest of the run streams while JetStream elects new leaders for
	// what A's server led.
	release()

	svWantOK(t, c.response("p1"))
	b.waitEvent(sid, "agent_end")
	truth := clSeqs(b, sid)[startsBefore:]
	end := truth[len(truth)-1]
	if err := clReachSeq(c, sid, end); err != nil {
		t.Fatalf("the client of C did not reach seq %d: %v\n%s\n--- C ---\n%s", end, err, c.tail(10), nodes["C"].stderrTail(4000))
	}
	recovered := time.Since(killed)
	seqs := clSeqs(c, sid)
	clCheckSeqs(t, "client of C", seqs)
	lost, dup := clTally(truth, seqs)
	if lost != 0 || dup != 0 {
		t.Errorf("client of C: %d of %d events lost, %d duplicated", lost, len(truth), dup)
	}
	clCheckSeqs(t, "client of B", clSeqs(b, sid))
	if starts := clCount(b, sid, "tool_execution_start"); starts != 1 {
		t.Errorf("the tool started %d times, want 1", starts)
	}
	if st := clStatus(t, nodes["B"]); st.Leases != 1 {
		t.Errorf("node B after A died: %+v, want it to keep the session", st)
	}
	if st := clStatus(t, nodes["C"]); st.Takeovers != 0 || st.Leases != 0 {
		t.Errorf("node C: %+v, want no takeover", st)
	}
	msgs := c.must("get_messages", svM{"id": "c-msgs", "sessionId": sid})
	for _, want := range []string{"pre-40", "post-40"} {
		if !strings.Contains(msgs.raw, want) {
			t.Errorf("the history lacks %q: %s", want, e2eClip(msgs.raw, 1500))
		}
	}
	// The two left go on: a prompt, and a session made anew (a write to
	// every replicated bucket), from either.
	svWantOK(t, c.must("prompt", svM{"id": "p2", "sessionId": sid, "message": "CMD:echo after-a-died"}))
	svCreate(b, clSessionOn("C", "B", "C"))
	// A, restarted on its data directory, rejoins the routes and JetStream
	// and serves what happened while it was away.
	nodes["A"] = nodes["A"].restart()
	svWaitUntil(t, "the restarted A sees three members", func() bool { return clStatus(t, nodes["A"]).Members == 3 })
	a2 := nodes["A"].dial("a-again")
	if msgs := a2.must("get_messages", svM{"id": "a2-msgs", "sessionId": sid}); !strings.Contains(msgs.raw, "after-a-died") {
		t.Errorf("get_messages through the restarted A lacks the run made while it was away: %s", e2eClip(msgs.raw, 1500))
	}
	h.wantReplicas(t, "A", 3)
	t.Logf("fault table: kill -9 of a node (not the owner) of 3 embedded NATS, 1 run, %d events, lost 0, duplicated 0, re-run 0; the run's last event reached C's client %v after the kill",
		len(truth), recovered.Round(100*time.Millisecond))
}

// The owner, node B, is killed -9 while its run's tool sleeps, watched by
// clients of A and C. One of them takes the session over once B's lease
// has run out: the watchers have every event B published, each once, then
// see the interrupted run end; the tool is not run again; the session
// goes on on the new owner.
func TestClusterEmbeddedHAKillTheOwner(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	h := clStartHA(t, e)
	nodes := h.nodes
	sid := clSessionOn("B", "A", "B", "C")

	b := clCreate(nodes, "B", sid)
	watchers := map[string]*svConn{"A": nodes["A"].dial("a"), "C": nodes["C"].dial("c")}
	for id, w := range watchers {
		w.must("switch_session", svM{"id": "switch-" + id, "sessionId": sid})
	}
	b.send(svM{"id": "p1", "type": "prompt", "sessionId": sid,
		"message": "CMD:echo start >> run.log; for i in $(seq 1 20); do echo line-$i; done; sleep 120; echo end >> run.log"})
	b.waitFor(0, "the owner's client sees the tool's output", func(f svFrame) bool {
		return f.isEvent(sid, "tool_execution_update") && strings.Contains(f.raw, "line-20")
	})
	// Everything B emitted so far has reached both watchers (the tool
	// now sleeps): that is what they must keep.
	truth := clSeqs(b, sid)
	last := truth[len(truth)-1]
	for id, w := range watchers {
		if _, _, err := w.tryWaitFor(0, svWait, func(f svFrame) bool {
			n, _ := svNum(f.m, "seq")
			return f.isEvent(sid, "") && uint64(n) >= last
		}); err != nil {
			t.Fatalf("the watcher on %s did not reach seq %d before the kill: %v\n%s", id, last, err, w.tail(5))
		}
	}
	nodes["B"].kill9()
	killed := time.Now()
	ended := map[string]time.Duration{}
	for id, w := range watchers {
		if _, _, err := w.tryWaitFor(0, 3*cluster.DefaultLeaseTTL, func(f svFrame) bool { return f.isEvent(sid, "agent_end") }); err != nil {
			t.Fatalf("the watcher on %s never saw the interrupted run end: %v\n%s", id, err, w.tail(10))
		}
		ended[id] = time.Since(killed)
	}
	owner := ""
	svWaitUntil(t, "A or C holds the session", func() bool {
		for _, id := range []string{"A", "C"} {
			if clStatus(t, nodes[id]).Leases == 1 {
				owner = id
				return true
			}
		}
		return false
	})
	if n := clStatus(t, nodes["A"]).Leases + clStatus(t, nodes["C"]).Leases; n != 1 {
		t.Errorf("A and C hold %d leases, want 1", n)
	}
	for id, w := range watchers {
		seqs := clSeqs(w, sid)
		clCheckSeqs(t, "watcher on "+id, seqs)
		lost, dup := clTally(truth, seqs)
		if lost != 0 || dup != 0 {
			t.Errorf("watcher on %s: %d of the %d events B published lost, %d duplicated", id, lost, len(truth), dup)
		}
	}
	if got := strings.Join(svLines(t, filepath.Join(e.cwd, "run.log")), ","); got != "start" {
		t.Errorf("run.log reads %q: the interrupted tool ran again", got)
	}
	svWantOK(t, watchers["C"].must("prompt", svM{"id": "p2", "sessionId": sid, "message": "CMD:echo after-the-owner-died"}))
	t.Logf("fault table: kill -9 of the owner of 3 embedded NATS, 1 run, %d events before the kill, lost 0, duplicated 0, re-run 0; taken over by %s, run ended for the watchers %v after the kill (lease %v)",
		len(truth), owner, ended, cluster.DefaultLeaseTTL)
}

// A node that holds another cluster key cannot join the routes: its
// embedded NATS routes to node A's route address with TLS derived from
// the wrong secret and is refused at the handshake (before any password
// crosses), the nodes of the cluster stay three, and the intruder never
// gets as far as serving.
func TestClusterEmbeddedRoutesRefuseAnotherKey(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	h := clStartHA(t, e)
	mark := len(h.nodes["A"].stderr.String())
	intruder := svLaunch(t, e, svOpts{noReady: true}, clNodeArgs(e, "X", "--cluster", "embedded", "--cluster-listen", "127.0.0.1:0",
		"--cluster-route-listen", clustertest.FreeAddr(t), "--cluster-routes", h.routes["A"])...)
	svWaitUntil(t, "node A's NATS refuses the intruder's route", func() bool {
		return strings.Contains(h.nodes["A"].stderr.String()[mark:], "handshake error")
	})
	svWaitUntil(t, "the intruder is refused too", func() bool {
		return strings.Contains(intruder.stderr.String(), "handshake error")
	})
	for id, n := range h.nodes {
		if st := clStatus(t, n); st.Members != 3 {
			t.Errorf("node %s sees %d members, want 3", id, st.Members)
		}
	}
	if strings.Contains(intruder.stderr.String(), "addr=") || strings.Contains(intruder.stderr.String(), "joined the cluster") {
		t.Errorf("the intruder joined:\n%s", intruder.stderrTail(3000))
	}
}

// With a certificate the routes speak TLS both ways, each server
// verifying the others' certificates with --cluster-tls-ca (here one
// self-signed certificate for all three, its own CA): the three form the
// cluster, its state in 3 replicas, and a session on B is driven from C.
func TestClusterEmbeddedRoutesWithTLS(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	cert, key := clustertest.WriteCert(t, e.root)
	h := clStartHA(t, e, "--cluster-tls-cert", cert, "--cluster-tls-key", key, "--cluster-tls-ca", cert)
	if !strings.Contains(h.nodes["A"].stderr.String(), "tls=true") {
		t.Errorf("node A's embedded NATS does not say TLS:\n%s", h.nodes["A"].stderrTail(2000))
	}
	sid := clSessionOn("B", "A", "B", "C")
	c := clCreate(h.nodes, "C", sid)
	svWantOK(t, c.must("prompt", svM{"id": "p1", "sessionId": sid, "message": "CMD:echo over-tls-routes"}))
	a := h.nodes["A"].dial("a")
	msgs := a.must("get_messages", svM{"id": "a-msgs", "sessionId": sid})
	if !strings.Contains(msgs.raw, "over-tls-routes") {
		t.Errorf("get_messages through A: %s", e2eClip(msgs.raw, 1500))
	}
	if st := clStatus(t, h.nodes["B"]); st.Leases != 1 {
		t.Errorf("node B: %+v, want the session's lease", st)
	}
}

// SIGTERM on the owner, node B, hands its session over and stops B's
// NATS server after: the next prompt, from a client of A, runs on the
// node that took it over, on the two servers left, and C's watcher sees
// both runs with no seq missing or twice.
func TestClusterEmbeddedHASigtermTheOwner(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	h := clStartHA(t, e, "--shutdown-timeout", "20s")
	nodes := h.nodes
	sid := clSessionOn("B", "A", "B", "C")

	a := clCreate(nodes, "A", sid)
	c := clFollow(nodes, "C", sid)
	a.send(svM{"id": "p1", "type": "prompt", "sessionId": sid, "message": "CMD:sleep 1; echo before-the-drain"})
	c.waitEvent(sid, "tool_execution_start")
	nodes["B"].sigterm()
	stopped := time.Now()
	if code := nodes["B"].waitExit(); code != 0 {
		t.Errorf("node B exited with %d after SIGTERM\n%s", code, nodes["B"].stderrTail(3000))
	}
	svWantOK(t, a.response("p1"))
	svWantOK(t, a.must("prompt", svM{"id": "p2", "sessionId": sid, "message": "CMD:echo after-the-drain"}))
	c.waitFor(0, "the second run's tool end", func(f svFrame) bool {
		return f.isEvent(sid, "tool_execution_end") && strings.Contains(f.raw, "after-the-drain")
	})
	c.waitEvent(sid, "agent_end")
	took := time.Since(stopped)
	if n := clStatus(t, nodes["A"]).Leases + clStatus(t, nodes["C"]).Leases; n != 1 {
		t.Errorf("A and C hold %d leases after the drain, want 1", n)
	}
	seqs := clSeqs(c, sid)
	clCheckSeqs(t, "client of C", seqs)
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Errorf("the watcher's seqs jump from %d to %d: %v", seqs[i-1], seqs[i], seqs)
		}
	}
	msgs := c.must("get_messages", svM{"id": "c-msgs", "sessionId": sid})
	for _, want := range []string{"before-the-drain", "after-the-drain"} {
		if !strings.Contains(msgs.raw, want) {
			t.Errorf("the conversation lacks %q: %s", want, e2eClip(msgs.raw, 2000))
		}
	}
	t.Logf("fault table: SIGTERM of the owner of 3 embedded NATS, 2 runs, %d events seen by C, lost 0, duplicated 0, re-run 0; the second run ended %v after the SIGTERM",
		len(seqs), took.Round(100*time.Millisecond))
}
