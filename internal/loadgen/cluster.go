package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	agentd "github.com/agentd-dev/agentd/internal/server"
)

// ClusterReport is what a run against a cluster measured besides the
// single-node figures (see Options.ClusterNodes).
type ClusterReport struct {
	// Nodes is how many `agentd serve` nodes formed the cluster.
	Nodes int `json:"nodes"`
	// Forwarded is how many commands the nodes passed to another node
	// that owned the session, from the nodes' /healthz, over the load
	// phase; ForwardedFraction is that over the commands answered.
	Forwarded         int64   `json:"forwarded"`
	ForwardedFraction float64 `json:"forwarded_fraction"`
	// LoadTakeovers is how many sessions changed owner during the load
	// phase, with every node alive: leases not renewed in time (the
	// nodes' /healthz takeovers). Each may fail the commands in flight.
	LoadTakeovers int64 `json:"load_takeovers"`
	// Leases is how many of the load's sessions each node owned after
	// the load, by node id (the bench's own first session on each node
	// not counted).
	Leases map[string]int `json:"leases"`

	// RSSErrors says which memory readings failed, one line each
	// (reading, node, error): the RSS figures that needed them are left
	// at 0. Each is also logged as a warning.
	RSSErrors []string `json:"rss_errors,omitempty"`

	// The takeover: after the load, node Killed (never the first, which
	// runs the NATS server) is killed with SIGKILL, and each of the
	// KilledSessions sessions it owned is sent get_state through a
	// surviving node until it answers. Takeover is from the kill to the
	// last of them answering, TakeoverP50 the median session's time;
	// TakenOver how many answered within the command timeout, and
	// TakeoverFailed how many commands failed meanwhile (each is retried).
	Killed         string        `json:"killed_node"`
	KilledSessions int           `json:"killed_sessions"`
	TakenOver      int           `json:"taken_over"`
	Takeover       time.Duration `json:"takeover_ns"`
	TakeoverP50    time.Duration `json:"takeover_p50_ns"`
	TakeoverFailed int           `json:"takeover_failed_commands"`

	// Lag is how far watchers on every face trail the first client to
	// see each event, on the session's node and on another (lag.go).
	Lag *LagReport `json:"lag,omitempty"`
}

// clusterNode is one node of a bench cluster.
type clusterNode struct {
	id  string
	srv *server
}

// launchCluster starts the mock and o.ClusterNodes nodes: the first with
// the embedded NATS server, the rest joining it; every node with
// --cluster-spread, so that where a session lives does not depend on the
// node its client reached. It waits until every node sees all of them.
func launchCluster(ctx context.Context, o Options, conns int, log *slog.Logger) (dir string, mk *mock, nodes []clusterNode, err error) {
	dir, err = os.MkdirTemp("", "agentd-bench-cluster-")
	if err != nil {
		return "", nil, nil, fmt.Errorf("temp dir: %w", err)
	}
	defer func() {
		if err != nil {
			closeCluster(o, dir, mk, nodes)
			dir, mk, nodes = "", nil, nil
		}
	}()
	if mk, err = startMock(o.Chunks, o.PlanSteps); err != nil {
		return dir, mk, nodes, err
	}
	env, err := writeEnv(dir, mk.openAIURL())
	if err != nil {
		return dir, mk, nodes, err
	}
	natsAddr, err := freeAddr()
	if err != nil {
		return dir, mk, nodes, err
	}
	for i := range o.ClusterNodes {
		id := fmt.Sprintf("n%d", i+1)
		e := env
		e.data = filepath.Join(dir, "data-"+id)
		if err := os.MkdirAll(e.data, 0o755); err != nil {
			return dir, mk, nodes, fmt.Errorf("bench dirs: %w", err)
		}
		// The first node makes the cluster key on its start; the others
		// join with it.
		join := []string{"--cluster", "nats://" + natsAddr, "--cluster-key", filepath.Join(dir, "data-n1", "server", "cluster.key")}
		if i == 0 {
			join = []string{"--cluster", "embedded", "--cluster-listen", natsAddr}
		}
		// The bench's cluster flags come before ServerArgs, so that
		// --server-flags can override them (e.g. --cluster-lease-ttl).
		o2 := o
		o2.ServerArgs = append(append([]string{"--node-id", id, "--cluster-spread"}, join...), o.ServerArgs...)
		srv, err := startServer(ctx, o.Binary, serveArgs(o2, e, conns), e.work, e.environ, o.ServerLog, o.StartTimeout)
		if err != nil {
			return dir, mk, nodes, fmt.Errorf("node %s: %w", id, err)
		}
		nodes = append(nodes, clusterNode{id: id, srv: srv})
		log.Info("node ready", "node", id, "addr", srv.addr, "pid", srv.pid())
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(o.StartTimeout)
	for _, n := range nodes {
		for {
			st, err := clusterStatus(ctx, hc, n.srv.addr)
			if err == nil && st.Members == len(nodes) {
				break
			}
			if time.Now().After(deadline) {
				return dir, mk, nodes, fmt.Errorf("node %s does not see %d members after %s (status %+v, %v)", n.id, len(nodes), o.StartTimeout, st, err)
			}
			select {
			case <-ctx.Done():
				return dir, mk, nodes, fmt.Errorf("waiting for the cluster: %w", ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return dir, mk, nodes, nil
}

func closeCluster(o Options, dir string, mk *mock, nodes []clusterNode) {
	var wg sync.WaitGroup
	// The first node runs NATS: the others stop first, so that their
	// drain can still hand sessions over.
	for _, n := range nodes[min(1, len(nodes)):] {
		wg.Go(func() { n.srv.stop(o.ShutdownGrace) })
	}
	wg.Wait()
	if len(nodes) > 0 {
		nodes[0].srv.stop(o.ShutdownGrace)
	}
	if mk != nil {
		mk.close()
	}
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}

// freeAddr is a 127.0.0.1 address nothing listens on now, for the
// embedded NATS server.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("a port for NATS: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// clusterStatus is the cluster object of a node's /healthz.
func clusterStatus(ctx context.Context, hc *http.Client, addr string) (agentd.ClusterStatus, error) {
	var h struct {
		Cluster *agentd.ClusterStatus `json:"cluster"`
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		return agentd.ClusterStatus{}, fmt.Errorf("healthz: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return agentd.ClusterStatus{}, fmt.Errorf("healthz of %s: %w", addr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return agentd.ClusterStatus{}, fmt.Errorf("healthz of %s: %w", addr, err)
	}
	if err := json.Unmarshal(b, &h); err != nil || h.Cluster == nil {
		return agentd.ClusterStatus{}, fmt.Errorf("healthz of %s: no cluster object in %q", addr, prefix(b, 200))
	}
	return *h.Cluster, nil
}

// nodesMemory reads the memory of a cluster's running nodes together. A
// node whose memory cannot be read fails the reading, which is logged as
// a warning and kept for the report: a figure left at 0 says why.
type nodesMemory struct {
	nodes  []clusterNode
	log    *slog.Logger
	failed *[]string // ClusterReport.RSSErrors
}

// read sums the memory of the nodes still running, each read once its
// RSS held still for settle (settledMemory; negative: at once); ok is
// false if any could not be read.
func (nm *nodesMemory) read(ctx context.Context, what string, settle time.Duration) (sum memory, ok bool) {
	ms := make([]memory, len(nm.nodes))
	errs := make([]error, len(nm.nodes))
	var wg sync.WaitGroup
	for i, n := range nm.nodes {
		select {
		case <-n.srv.exited:
			continue
		default:
		}
		wg.Go(func() { ms[i], errs[i] = settledMemory(ctx, n.srv.pid(), settle) })
	}
	wg.Wait()
	ok = true
	for i, n := range nm.nodes {
		if errs[i] != nil {
			ok = false
			nm.log.Warn("cannot read a node's memory: the RSS figures that need this reading are left at 0", "reading", what, "node", n.id, "err", errs[i])
			*nm.failed = append(*nm.failed, fmt.Sprintf("%s: node %s: %v", what, n.id, errs[i]))
			continue
		}
		sum.RSS, sum.Peak = sum.RSS+ms[i].RSS, sum.Peak+ms[i].Peak
	}
	return sum, ok
}

// firstSessions creates a session on each node, through a connection of
// the bench's own on another node (a create sent to the session's home
// waits in cluster-route's dispatch). It returns a func closing the
// connections, to call however it ended.
func firstSessions(ctx context.Context, o Options, hc *http.Client, nodes []clusterNode, ids []string, probs *tally) (func(), error) {
	var own []*client
	closeOwn := func() {
		for _, c := range own {
			c.close()
		}
	}
	for _, n := range nodes {
		c, err := dial(ctx, hc, "ws://"+n.srv.addr+"/?lifecycle=own", "", &clientOptions{timeout: o.CommandTimeout, faults: probs})
		if err != nil {
			return closeOwn, fmt.Errorf("the bench's own connection to node %s: %w", n.id, err)
		}
		own = append(own, c)
	}
	for k := range nodes {
		sid, ok := firstSessionOn(ids, k)
		if !ok {
			return closeOwn, fmt.Errorf("no id of bench-first-0 to -%d is placed on node %s", maxFirstIDs-1, nodes[k].id)
		}
		if err := createSession(ctx, own[(k+1)%len(own)], sid, o.CommandTimeout); err != nil {
			return closeOwn, fmt.Errorf("first session on node %s: %w", nodes[k].id, err)
		}
	}
	return closeOwn, nil
}

// firstSessionOn is the id of the bench's first session on node ids[k]:
// the first of bench-first-0, -1, ... that the placement puts there.
func firstSessionOn(ids []string, k int) (string, bool) {
	for j := range maxFirstIDs {
		if sid := fmt.Sprintf("bench-first-%d", j); agentd.PlaceSession(sid, ids) == ids[k] {
			return sid, true
		}
	}
	return "", false
}

// maxFirstIDs bounds the search of firstSessionOn: the placement spreads
// ids evenly, so with n nodes one in n is on each.
const maxFirstIDs = 10000

// awayFrom is the index of the node in ids, other than session sid's
// home, that its client i connects to: the others in turn.
func awayFrom(sid string, ids []string, i int) int {
	home := slices.Index(ids, agentd.PlaceSession(sid, ids))
	return (home + 1 + i%(len(ids)-1)) % len(ids)
}

// takeover kills nodes[victim] with SIGKILL and sends get_state for each
// session in owned through the surviving nodes, in turn, until each
// answers: a command that fails is counted and sent again.
func takeover(ctx context.Context, o Options, hc *http.Client, nodes []clusterNode, victim int, owned []string, cr *ClusterReport, probs *tally, log *slog.Logger) error {
	var probes []*client
	for i, n := range nodes {
		if i == victim {
			continue
		}
		c, err := dial(ctx, hc, "ws://"+n.srv.addr+"/?lifecycle=own", "", &clientOptions{timeout: o.CommandTimeout, faults: probs})
		if err != nil {
			return fmt.Errorf("takeover probe on node %s: %w", n.id, err)
		}
		defer c.close()
		probes = append(probes, c)
	}
	v := nodes[victim].srv
	if err := v.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill node %s: %w", nodes[victim].id, err)
	}
	killed := time.Now()
	<-v.exited
	log.Info("node killed", "node", nodes[victim].id, "sessions", len(owned))

	times := make([]time.Duration, len(owned))
	fails := make([]int, len(owned))
	deadline := killed.Add(o.CommandTimeout)
	sem := make(chan struct{}, o.DialConcurrency)
	var wg sync.WaitGroup
	for i, sid := range owned {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			p := probes[i%len(probes)]
			for try := 0; time.Now().Before(deadline); try++ {
				cctx, cancel := context.WithDeadline(ctx, deadline)
				r, _, err := p.call(cctx, fmt.Sprintf("takeover.%s.%d", sid, try), map[string]any{"type": "get_state", "sessionId": sid})
				cancel()
				if err == nil && r.Success {
					times[i] = time.Since(killed)
					return
				}
				fails[i]++
				if ctx.Err() != nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	var got []time.Duration
	for i, t := range times {
		cr.TakeoverFailed += fails[i]
		if t > 0 {
			got = append(got, t)
		} else {
			probs.add("not taken over", fmt.Sprintf("session %s of killed node %s did not answer within %s", owned[i], nodes[victim].id, o.CommandTimeout))
		}
	}
	cr.TakenOver = len(got)
	if len(got) > 0 {
		cr.Takeover = slices.Max(got)
		cr.TakeoverP50 = percentile(got, 50)
	}
	log.Info("taken over", "sessions", len(got), "of", len(owned), "took", cr.Takeover.Round(time.Millisecond), "failed", cr.TakeoverFailed)
	return nil
}

// clusterRows are WriteTable's rows of a cluster run ("-" for a run on
// one node).
var clusterRows = []tableRow{
	{"cluster nodes", clusterVal(func(c *ClusterReport) string { return strconv.Itoa(c.Nodes) })},
	{"  commands forwarded (of answered)", clusterVal(func(c *ClusterReport) string {
		return fmt.Sprintf("%d (%.0f %%)", c.Forwarded, 100*c.ForwardedFraction)
	})},
	{"  takeovers during the load", clusterVal(func(c *ClusterReport) string { return strconv.FormatInt(c.LoadTakeovers, 10) })},
	{"  node killed (its sessions)", clusterVal(func(c *ClusterReport) string { return fmt.Sprintf("%s (%d)", c.Killed, c.KilledSessions) })},
	{"  takeover: all / p50", clusterVal(func(c *ClusterReport) string {
		return fmt.Sprintf("%s / %s (%d answered)", fmtDur(c.Takeover), fmtDur(c.TakeoverP50), c.TakenOver)
	})},
	{"  commands failed meanwhile", clusterVal(func(c *ClusterReport) string { return strconv.Itoa(c.TakeoverFailed) })},
	{"  RSS readings failed", clusterVal(func(c *ClusterReport) string { return strconv.Itoa(len(c.RSSErrors)) })},
}

func clusterVal(f func(c *ClusterReport) string) func(r Report) string {
	return func(r Report) string {
		if r.Cluster == nil {
			return "-"
		}
		return f(r.Cluster)
	}
}
