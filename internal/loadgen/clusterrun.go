package loadgen

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	agentd "github.com/agentd-dev/agentd/internal/server"
)

// clusterRun is one run of the load against a cluster (runCluster): what
// its phases share.
type clusterRun struct {
	o       Options
	rep     Report
	cr      *ClusterReport // rep.Cluster
	log     *slog.Logger
	probs   tally
	mk      *mock
	nodes   []clusterNode
	ids     []string // the nodes' ids, in order
	mem     *nodesMemory
	hc      *http.Client
	first   memory // the nodes' memory with the bench's first sessions
	firstOK bool   // whether first could be read
	clients []*client
	lag     *lagWatchers // nil without lag watchers
	victim  int          // the index of the node killed
	results []sessionResult
}

// runCluster is Run against o.ClusterNodes nodes. With --cluster-spread
// each session lives on the node its id hashes to (its home); its client
// connects to another node, creates the session there and drives it on
// that one connection, so every command is forwarded to the owner and
// its events come back through the stream. After the load one node that
// owns sessions is killed and their takeover timed.
func runCluster(ctx context.Context, o Options) (Report, error) {
	r := &clusterRun{o: o, rep: Report{Sessions: o.Sessions, Rounds: o.Rounds, Chunks: o.Chunks, GetStates: o.GetStates,
		StreamFormat: o.StreamFormat, ReadDelay: o.ReadDelay, OwnLifecycle: o.OwnLifecycle,
		Planned: o.Sessions * o.Rounds * (1 + o.GetStates), Cluster: &ClusterReport{Nodes: o.ClusterNodes}},
		log: o.Logger.With("sessions", o.Sessions, "nodes", o.ClusterNodes)}
	r.cr = r.rep.Cluster
	dir, mk, nodes, err := launchCluster(ctx, o, o.Sessions+20, r.log)
	if err != nil {
		return r.rep, err
	}
	defer closeCluster(o, dir, mk, nodes)
	r.mk, r.nodes = mk, nodes
	r.ids = make([]string, len(nodes))
	for i, n := range nodes {
		r.ids[i] = n.id
	}
	r.mem = &nodesMemory{nodes: nodes, log: r.log, failed: &r.cr.RSSErrors}
	if m, ok := r.mem.read(ctx, "baseline", o.Settle); ok {
		r.rep.RSSBaseline = m.RSS
	}

	r.probs = tally{log: r.log}
	r.hc = &http.Client{Transport: &http.Transport{}}
	defer r.hc.CloseIdleConnections()

	// As on one node, the bench's own connections create a first
	// session on each node, so that no figure per session carries a
	// node's one-time initialisation, and the sessions' RSS is measured
	// from the reading after them.
	closeOwn, err := firstSessions(ctx, o, r.hc, nodes, r.ids, &r.probs)
	defer closeOwn()
	if err != nil {
		return r.rep, err
	}
	r.first, r.firstOK = r.mem.read(ctx, "after the first sessions", o.Settle)
	if r.firstOK {
		r.rep.RSSFirstSession = r.first.RSS
	}

	defer func() { closeAll(r.clients) }()
	defer func() {
		if r.lag != nil {
			r.lag.closeAll()
		}
	}()
	for _, step := range []func(context.Context) error{r.connect, r.openLag, r.load, r.killOne} {
		if err := step(ctx); err != nil {
			return r.rep, err
		}
	}
	r.stopSurvivors()

	summarize(&r.rep, r.results, mk, &r.probs)
	countClients(&r.rep, r.clients)
	if r.rep.Commands > 0 {
		r.cr.ForwardedFraction = float64(r.cr.Forwarded) / float64(r.rep.Commands)
	}
	r.rep.Errors, r.rep.ErrorKinds, r.rep.ErrorSamples = r.probs.result()
	return r.rep, nil
}

// clusterSession is the id of the load's session i, its number first:
// the cluster's placement hash (FNV-1a of node and id) spreads ids that
// differ only in their last bytes badly (bench-%06d: 10/30/60 % over
// three nodes, the first dozen all on one), while random ids, like
// these, spread evenly.
func clusterSession(i int) string { return fmt.Sprintf("%06d-bench", i) }

// connect connects and creates every session. Session i's client
// connects to a node other than the session's home, round-robin over the
// others, so that every command is forwarded to the owner and every
// event comes back through the stream: the cluster's whole cost on every
// command. (A create sent to the session's own home also waits 30 s in
// cluster-route's dispatch, for the session it is to create.)
func (r *clusterRun) connect(ctx context.Context) error {
	o := r.o
	start := time.Now()
	co := &clientOptions{timeout: o.CommandTimeout, readDelay: o.ReadDelay, answer: r.mk.answer,
		delta: o.StreamFormat == "delta", faults: &r.probs}
	q := ""
	if o.OwnLifecycle {
		q = "?lifecycle=own"
	}
	r.clients = connectAllTo(ctx, o, r.hc, func(i int) string {
		return "ws://" + r.nodes[awayFrom(clusterSession(i), r.ids, i)].srv.addr + "/" + q
	}, clusterSession, co)
	r.rep.Setup = time.Since(start)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("connecting sessions: %w", err)
	}
	if m, ok := r.mem.read(ctx, "with the sessions", o.Settle); ok {
		r.rep.RSSSessions = m.RSS
		if n := int64(len(r.clients) - countNil(r.clients)); n > 0 && r.firstOK {
			// Per session that exists: a failed create holds nothing.
			r.rep.RSSPerSession = (m.RSS - r.first.RSS) / n
		}
	}
	r.log.Info("sessions created", "took", r.rep.Setup.Round(time.Millisecond))
	return nil
}

// openLag opens watchers on every face, on each watched session's node
// and on another, through the load (lag.go).
func (r *clusterRun) openLag(ctx context.Context) error {
	n := lagSessionsOf(r.o)
	if n <= 0 {
		return nil
	}
	var sids []string
	var drivers []int
	for i, c := range r.clients {
		if c != nil && len(sids) < n {
			sids, drivers = append(sids, c.sid), append(drivers, awayFrom(clusterSession(i), r.ids, i))
		}
	}
	r.lag = openLagWatchers(ctx, r.o, r.hc, r.nodes, r.ids, sids, func(i int) int { return drivers[i] })
	r.log.Info("lag watchers open", "sessions", len(sids), "watchers", len(r.lag.ws), "failed", len(r.lag.failed))
	return nil
}

// totals are the nodes' counters together: commands forwarded,
// takeovers.
func (r *clusterRun) totals(ctx context.Context) (fwd, took int64) {
	for _, n := range r.nodes {
		st, err := clusterStatus(ctx, r.hc, n.srv.addr)
		if err != nil {
			r.log.Warn("cluster status", "node", n.id, "err", err)
			continue
		}
		fwd, took = fwd+st.Forwarded, took+st.Takeovers
	}
	return fwd, took
}

// load is the load, as on one node, with the nodes' CPU together, the
// commands forwarded and the takeovers meanwhile, and then the lag
// watchers' report.
func (r *clusterRun) load(ctx context.Context) error {
	o, rep, cr := r.o, &r.rep, r.cr
	frames0, bytes0, events0 := countFrames(r.clients)
	fwd0, took0 := r.totals(ctx)
	cpu0 := make([]cpuMark, len(r.nodes))
	var cpuErr error
	for i, n := range r.nodes {
		var err error
		if cpu0[i], err = readCPU(n.srv.pid()); err != nil {
			cpuErr = err
		}
	}
	r.results, rep.Duration = driveAll(ctx, o, r.clients, driveClients(o, &r.probs))
	frames1, bytes1, events1 := countFrames(r.clients)
	// One machine: the first node's mark has the machine's and the
	// bench's times; the servers' are the nodes' together.
	for i, n := range r.nodes {
		if cpuErr != nil {
			break
		}
		m1, err := readCPU(n.srv.pid())
		if err != nil {
			cpuErr = err
			break
		}
		u := m1.since(cpu0[i])
		if i == 0 {
			rep.LoadCPU = u
			continue
		}
		rep.LoadCPU.Server += u.Server
		rep.LoadCPU.Others = max(0, rep.LoadCPU.Others-u.Server)
	}
	if cpuErr != nil {
		r.log.Warn("cpu times", "err", cpuErr)
		rep.LoadCPU = CPUUse{}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("load phase: %w", err)
	}
	fwd1, took1 := r.totals(ctx)
	cr.Forwarded, cr.LoadTakeovers = fwd1-fwd0, took1-took0
	if m, ok := r.mem.read(ctx, "after the load", -1); ok {
		rep.RSSAfter, rep.RSSPeak = m.RSS, m.Peak
	}
	rep.Frames, rep.Bytes, rep.SessionEvents = frames1-frames0, bytes1-bytes0, events1-events0
	r.log.Info("load done", "took", rep.Duration.Round(time.Millisecond))
	if r.lag != nil {
		r.lag.settle(ctx, 15*time.Second)
		cr.Lag = r.lag.report(len(r.lag.sessions()))
		for _, f := range cr.Lag.Failed {
			r.probs.add("lag watcher", f)
		}
	}
	return nil
}

// killOne finds who owns what (each node's leases, and the sessions of
// the node to kill by the placement every node computes), kills the node
// other than the first that owns the most, and times the takeover.
func (r *clusterRun) killOne(ctx context.Context) error {
	cr, nodes := r.cr, r.nodes
	cr.Leases = map[string]int{}
	for _, n := range nodes {
		if st, err := clusterStatus(ctx, r.hc, n.srv.addr); err == nil {
			cr.Leases[n.id] = st.Leases - 1 // the bench's first session there
		}
	}
	r.victim = 1
	for i := 2; i < len(nodes); i++ {
		if cr.Leases[nodes[i].id] > cr.Leases[nodes[r.victim].id] {
			r.victim = i
		}
	}
	var owned []string
	for _, c := range r.clients {
		if c != nil && agentd.PlaceSession(c.sid, r.ids) == nodes[r.victim].id {
			owned = append(owned, c.sid)
		}
	}
	cr.Killed, cr.KilledSessions = nodes[r.victim].id, len(owned)
	return takeover(ctx, r.o, r.hc, nodes, r.victim, owned, cr, &r.probs, r.log)
}

// stopSurvivors stops the nodes left with SIGTERM, the last first; the
// killed node's clients lost their connections, which is not the load's
// error.
func (r *clusterRun) stopSurvivors() {
	o, rep := r.o, &r.rep
	for _, c := range r.clients {
		if c != nil {
			c.hurry.Store(true)
		}
	}
	shutStart := time.Now()
	for i, n := range slices.Backward(r.nodes) {
		if i == r.victim {
			continue
		}
		code, _, killed := n.srv.stop(o.ShutdownGrace)
		switch {
		case killed:
			r.probs.add("server killed", fmt.Sprintf("node %s did not exit within %s of SIGTERM; killed", n.id, o.ShutdownGrace))
		case code != 0:
			r.probs.add("server exit code", fmt.Sprintf("node %s exited with code %d after SIGTERM; stderr:\n%s", n.id, code, n.srv.log.tail()))
		}
		rep.ServerExit = max(rep.ServerExit, code)
		w, samples := n.srv.log.problemLines()
		rep.ServerWarnings += w
		rep.ServerWarningSamples = append(rep.ServerWarningSamples, samples...)
	}
	rep.Shutdown = time.Since(shutStart)
	rep.ModelRequests = r.mk.requestCount()
	rep.SendBudgetCuts = -1
}
