package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/agentd-dev/agentd/internal/cluster"
	"github.com/agentd-dev/agentd/internal/cluster/clustertest"
	"github.com/agentd-dev/agentd/internal/cluster/embeddednats"
	"github.com/agentd-dev/agentd/internal/server"
)

// The harness of the cluster tests: real `agentd serve` processes on
// 127.0.0.1 as the nodes of one cluster, each with its own data
// directory, in one of three transports. clStart: node A with --cluster
// embedded (the NATS server with JetStream inside it), B and C joining it
// with --cluster nats://. clStartExternal: every node a client of a NATS
// server in the test process. clStartHA: every node with its own embedded
// NATS, the three routed into one NATS cluster. The clients are pi-server
// WebSocket clients, the model is the wire-level mock.

// clLogTail is how much of each node's log a failed test shows.
const clLogTail = 16 << 10

// clNodes are the nodes of one test cluster, by id.
type clNodes map[string]*svServer

// clABC are the ids of a three-node test cluster.
var clABC = []string{"A", "B", "C"}

// clNodeArgs are the flags of node id: its own data directory and node
// id, then args (how it reaches the cluster, and the test's own).
func clNodeArgs(e *e2eEnv, id string, args ...string) []string {
	return append([]string{"--data-dir", filepath.Join(e.root, "node-"+id), "--node-id", id}, args...)
}

// clLaunch starts the nodes ids, node id with clNodeArgs(e, id,
// flags(id)...), and waits until each sees all of them as members. One
// after another, each node is ready before the next starts, so flags may
// use what the ones before made (node A's cluster key). together, they
// start at once and are waited for after: a clustered JetStream has no
// leader until a majority of its servers is up, so no node is ready
// before the others start.
func clLaunch(t *testing.T, e *e2eEnv, together bool, ids []string, flags func(id string) []string) clNodes {
	t.Helper()
	nodes := clNodes{}
	for _, id := range ids {
		nodes[id] = svLaunch(t, e, svOpts{noReady: together}, clNodeArgs(e, id, flags(id)...)...)
	}
	if together {
		for _, id := range ids {
			nodes[id].waitListening()
		}
	}
	// A failure shows every node's log, not only the one a wait names:
	// a cluster test fails on one node for what another did (a takeover,
	// a lease lost, a stream not read), and a flake leaves nothing else.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, id := range slices.Sorted(maps.Keys(nodes)) {
			t.Logf("--- node %s's log (tail) ---\n%s", id, nodes[id].stderrTail(clLogTail))
		}
	})
	for _, id := range ids {
		n := nodes[id]
		svWaitUntil(t, fmt.Sprintf("node %s sees %d members", id, len(ids)), func() bool { return clStatus(t, n).Members == len(ids) })
	}
	return nodes
}

// clStart starts nodes A (embedded NATS), B and C with --cluster-spread,
// and waits until each sees all three as members.
func clStart(t *testing.T, e *e2eEnv, extra ...string) clNodes {
	t.Helper()
	// --cluster-spread: a session created through one node may live on
	// another, which most of these tests need.
	return clStartWith(t, e, clABC, append([]string{"--cluster-spread"}, extra...)...)
}

// clStartWith starts node ids[0] with NATS embedded, then the others
// joining it with a copy of the cluster key it made, all with a lease of
// 1 s and extra, and waits until each sees all of them as members.
func clStartWith(t *testing.T, e *e2eEnv, ids []string, extra ...string) clNodes {
	t.Helper()
	natsAddr := clustertest.FreeAddr(t)
	common := append([]string{"--cluster-lease-ttl", "1s"}, extra...)
	key := ""
	return clLaunch(t, e, false, ids, func(id string) []string {
		if id == ids[0] {
			return append([]string{"--cluster", "embedded", "--cluster-listen", natsAddr}, common...)
		}
		if key == "" {
			key = clKeyCopy(t, e, ids[0])
		}
		return append([]string{"--cluster", "nats://" + natsAddr, "--cluster-key", key}, common...)
	})
}

// clKeyCopy copies the cluster key node id made (0600, as another host
// would get it) and returns the copy's path.
func clKeyCopy(t *testing.T, e *e2eEnv, id string) string {
	t.Helper()
	b, err := os.ReadFile(clKeyPath(e, id))
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(e.root, "cluster-"+id+".key")
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}

// clKeyPath is where node id keeps the cluster key it made.
func clKeyPath(e *e2eEnv, id string) string {
	return filepath.Join(e.root, "node-"+id, "server", "cluster.key")
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

// clExternalNATS is a NATS server outside the nodes, restartable on its
// address with its store kept.
type clExternalNATS struct {
	t    *testing.T
	dir  string
	addr string
	key  *cluster.Key
	srv  *embeddednats.Server
}

// clStartExternal starts a NATS server in the test process, then nodes
// A, B and C as its clients with --cluster-spread and extra, and waits
// until each sees all three as members.
func clStartExternal(t *testing.T, e *e2eEnv, extra ...string) (*clExternalNATS, clNodes) {
	t.Helper()
	ns, keyPath := clStartNATS(t, e)
	return ns, clLaunch(t, e, false, clABC, func(string) []string {
		return append([]string{"--cluster", "nats://" + ns.addr, "--cluster-key", keyPath, "--cluster-spread"}, extra...)
	})
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

// clHA is a cluster of nodes on their embedded, routed NATS servers.
type clHA struct {
	nodes   clNodes
	routes  map[string]string // route address by node
	keyPath string
}

// clStartHA starts nodes A, B and C at once, each with its own embedded
// NATS and --cluster-routes naming all three, with --cluster-spread and
// extra, and waits until each sees all three as members.
func clStartHA(t *testing.T, e *e2eEnv, extra ...string) *clHA {
	t.Helper()
	keyPath := filepath.Join(e.root, "cluster.key")
	if _, _, err := cluster.LoadOrCreateKey(keyPath); err != nil {
		t.Fatal(err)
	}
	h := &clHA{routes: map[string]string{}, keyPath: keyPath}
	var all []string
	for _, id := range clABC {
		h.routes[id] = clustertest.FreeAddr(t)
		all = append(all, h.routes[id])
	}
	h.nodes = clLaunch(t, e, true, clABC, func(id string) []string {
		return append([]string{"--cluster", "embedded", "--cluster-listen", "127.0.0.1:0", "--cluster-key", keyPath,
			"--cluster-route-listen", h.routes[id], "--cluster-routes", strings.Join(all, ","), "--cluster-spread"}, extra...)
	})
	return h
}

// clFIFO makes the FIFO "release" in the working directory: a run's
// command that reads it (cat release) waits until the test calls the
// release function returned, which writes a line to it.
func clFIFO(t *testing.T, e *e2eEnv) (release func()) {
	t.Helper()
	fifo := filepath.Join(e.cwd, "release")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.WriteString("released\n")
		w.Close()
	}
}

// clCount is how many events of type typ c has of session sid.
func clCount(c *svConn, sid, typ string) int {
	n := 0
	for _, f := range c.events(sid) {
		if f.isEvent(sid, typ) {
			n++
		}
	}
	return n
}

// clReachSeq waits until c has an event of session sid with seq end or
// later.
func clReachSeq(c *svConn, sid string, end uint64) error {
	_, _, err := c.tryWaitFor(0, svWait, func(f svFrame) bool {
		n, _ := svNum(f.m, "seq")
		return f.isEvent(sid, "") && uint64(n) >= end
	})
	return err
}

// clCreate dials a client of node id (named for it: "a" on A) and
// creates session sid through it.
func clCreate(nodes clNodes, id, sid string) *svConn {
	nodes[id].t.Helper()
	c := nodes[id].dial(strings.ToLower(id))
	svCreate(c, sid)
	return c
}

// clFollow dials a client of node id (named for it) that switches to
// session sid, to watch its events.
func clFollow(nodes clNodes, id, sid string) *svConn {
	nodes[id].t.Helper()
	name := strings.ToLower(id)
	c := nodes[id].dial(name)
	c.must("switch_session", svM{"id": name + "-switch", "sessionId": sid})
	return c
}

// clStarted says whether the tool a test runs wrote its first line,
// "start", to run.log in the working directory. The file exists a moment
// before the line is in it (the shell opens it, then writes): a node
// killed in between takes the tool with it, and run.log stays empty.
func clStarted(e *e2eEnv) bool {
	b, err := os.ReadFile(filepath.Join(e.cwd, "run.log"))
	return err == nil && string(b) == "start\n"
}

// clOwnerGo is one way the owner of a watched session goes, for the
// tests of clients that keep watching through another node.
type clOwnerGo struct {
	name string
	stop func(b *svServer)
	// cmd is the run in progress when the owner goes.
	cmd string
	// interrupted: the run is cut, and its tool must not run again.
	interrupted bool
}

// clOwnerGoes are kill -9 mid-run and SIGTERM with the run finishing
// first (the node must then exit 0).
func clOwnerGoes(t *testing.T) []clOwnerGo {
	return []clOwnerGo{
		{name: "kill9", stop: func(b *svServer) { b.kill9() }, cmd: "CMD:echo start >> run.log; sleep 120", interrupted: true},
		{name: "sigterm", stop: func(b *svServer) {
			b.sigterm()
			if code := b.waitExit(); code != 0 {
				t.Errorf("node B exited with %d after SIGTERM", code)
			}
		}, cmd: "CMD:echo start >> run.log; sleep 2; echo drained-run"},
	}
}
