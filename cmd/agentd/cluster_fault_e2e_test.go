package main

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/cluster"
	"github.com/agentd-dev/agentd/cluster/embeddednats"
)

// Faults of the cluster's transport, as an operator meets them: NATS is a
// server of its own (here in the test process, an external NATS to the
// nodes), restarted under running sessions. The lease is the default
// 10 s: no test here depends on a short one.

// clExternalNATS is a NATS server outside the nodes, restartable on its
// address with its store kept.
type clExternalNATS struct {
	t    *testing.T
	dir  string
	addr string
	key  *cluster.Key
	srv  *embeddednats.Server
}

func clStartNATS(t *testing.T, e *e2eEnv) (*clExternalNATS, string) {
	t.Helper()
	keyPath := filepath.Join(e.root, "cluster.key")
	key, _, err := cluster.LoadOrCreateKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	n := &clExternalNATS{t: t, dir: filepath.Join(e.root, "nats"), key: key}
	n.start("127.0.0.1:0")
	u, err := url.Parse(n.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	n.addr = u.Host
	t.Cleanup(func() {
		if n.srv != nil {
			n.srv.Shutdown()
		}
	})
	return n, keyPath
}

func (n *clExternalNATS) start(addr string) {
	n.t.Helper()
	srv, err := embeddednats.Start(embeddednats.Config{StoreDir: n.dir, Nkey: n.key.PublicKey(), Listen: addr})
	if err != nil {
		n.t.Fatal(err)
	}
	n.srv = srv
}

func (n *clExternalNATS) stop() {
	n.srv.Shutdown()
	n.srv = nil
}

// clStartOn starts nodes A, B and C on an external NATS and waits until
// each sees all three as members.
func clStartOn(t *testing.T, e *e2eEnv, natsAddr, keyPath string, extra ...string) clNodes {
	t.Helper()
	nodes := clNodes{}
	for _, id := range []string{"A", "B", "C"} {
		nodes[id] = svStart(t, e, append([]string{"--data-dir", filepath.Join(e.root, "node-"+id), "--node-id", id,
			"--cluster", "nats://" + natsAddr, "--cluster-key", keyPath, "--cluster-spread"}, extra...)...)
	}
	for id, n := range nodes {
		svWaitUntil(t, "node "+id+" sees three members", func() bool { return clStatus(t, n).Members == 3 })
	}
	return nodes
}

// clTally compares what a client saw of a session with what the owner's
// own client saw (every event the session emitted): events missing,
// events that came twice.
func clTally(truth, got []uint64) (lost, dup int) {
	seen := map[uint64]int{}
	for _, s := range got {
		seen[s]++
	}
	for _, s := range truth {
		if seen[s] == 0 {
			lost++
		}
	}
	for _, c := range seen {
		if c > 1 {
			dup += c - 1
		}
	}
	return lost, dup
}

// NATS restarts for three seconds while a run streams on node B, driven
// by a client of A and watched by clients of B and C. The run goes on
// through the outage (its tool's output keeps streaming on B) and ends;
// B keeps its lease (one owner, no takeover); the clients of A and C,
// fed through the stream, catch up with every event B's client saw, each
// once, in order; the prompt answers success, the tool ran once, and
// the conversation's history holds the whole run.
func TestClusterNATSRestartMidRun(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	ns, keyPath := clStartNATS(t, e)
	nodes := clStartOn(t, e, ns.addr, keyPath)
	sid := clSessionOn("B", "A", "B", "C")
	fifo := filepath.Join(e.cwd, "release")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}

	a := nodes["A"].dial("a")
	svCreate(a, sid)
	b := nodes["B"].dial("b")
	b.must("switch_session", svM{"id": "b-switch", "sessionId": sid})
	c := nodes["C"].dial("c")
	c.must("switch_session", svM{"id": "c-switch", "sessionId": sid})
	startsBefore := len(b.events(sid))

	// Output streams before and during the outage; the run then waits on
	// the FIFO until NATS is back, and streams again.
	a.send(svM{"id": "p1", "type": "prompt", "sessionId": sid,
		"message": "CMD:for i in $(seq 1 60); do echo pre-$i; sleep 0.05; done; cat release; for i in $(seq 1 20); do echo post-$i; done"})
	b.waitFor(0, "B's client sees the tool stream", func(f svFrame) bool {
		return f.isEvent(sid, "tool_execution_update") && strings.Contains(f.raw, "pre-")
	})
	ns.stop()
	down := time.Now()
	svWaitUntil(t, "node B notices NATS is gone", func() bool { return !clStatus(t, nodes["B"]).Connected })
	time.Sleep(3 * time.Second) // the outage
	ns.start(ns.addr)
	up := time.Now()
	for id, n := range nodes {
		svWaitUntil(t, "node "+id+" is connected again", func() bool { return clStatus(t, n).Connected })
	}
	// Release the rest of the run.
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.WriteString("released\n")
	w.Close()

	svWantOK(t, a.response("p1"))
	b.waitEvent(sid, "agent_end")
	truth := clSeqs(b, sid)[startsBefore:]
	end := truth[len(truth)-1]
	caught := map[string]time.Duration{}
	for name, cl := range map[string]*svConn{"A": a, "C": c} {
		if _, _, err := cl.tryWaitFor(0, svWait, func(f svFrame) bool {
			n, _ := svNum(f.m, "seq")
			return f.isEvent(sid, "") && uint64(n) >= end
		}); err != nil {
			t.Errorf("the client of %s did not catch up to seq %d: %v\n%s", name, end, err, cl.tail(10))
			continue
		}
		caught[name] = time.Since(up)
	}
	for name, cl := range map[string]*svConn{"A": a, "C": c} {
		seqs := clSeqs(cl, sid)
		clCheckSeqs(t, "client of "+name, seqs)
		lost, dup := clTally(truth, seqs)
		if lost != 0 || dup != 0 {
			t.Errorf("client of %s: %d of %d events lost, %d duplicated", name, lost, len(truth), dup)
		}
	}
	// The tool ran once; B kept the session throughout.
	starts := 0
	for _, f := range b.events(sid) {
		if f.isEvent(sid, "tool_execution_start") {
			starts++
		}
	}
	if starts != 1 {
		t.Errorf("the tool started %d times, want 1", starts)
	}
	if st := clStatus(t, nodes["B"]); st.Leases != 1 {
		t.Errorf("node B after the outage: %+v, want it to keep the session's lease", st)
	}
	for _, id := range []string{"A", "C"} {
		if st := clStatus(t, nodes[id]); st.Takeovers != 0 || st.Leases != 0 {
			t.Errorf("node %s: %+v, want no takeover", id, st)
		}
	}
	msgs := c.must("get_messages", svM{"id": "c-msgs", "sessionId": sid})
	for _, want := range []string{"pre-60", "post-20"} {
		if !strings.Contains(msgs.raw, want) {
			t.Errorf("the history lacks %q: %s", want, e2eClip(msgs.raw, 1500))
		}
	}
	// The next prompt runs as usual.
	svWantOK(t, a.must("prompt", svM{"id": "p2", "sessionId": sid, "message": "CMD:echo after-the-outage"}))
	t.Logf("fault table: NATS restart (outage %v) mid-run, 1 run, %d events, lost 0, duplicated 0, re-run 0; remote clients caught up %v after NATS was back",
		up.Sub(down).Round(100*time.Millisecond), len(truth), caught)
}
