package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// wsRun is one run of the load over pi-server's WebSocket (Run on one
// node): what its phases share besides phases.
type wsRun struct {
	phases
	interval time.Duration // the session WebSocket's progress interval
	obs      *client       // the bench's own connection
	clients  []*client     // nil where a session could not be created
	watchers []*watcher    // on the per-session WebSocket; nil where one failed
	prev     memory        // the server's settled memory before the sessions
	idle     memory        // and with them
	results  []sessionResult
}

// runWS is Run on one node over pi-server's WebSocket, phase by phase.
func runWS(ctx context.Context, o Options) (Report, error) {
	r := &wsRun{phases: newPhases(o, Report{Sessions: o.Sessions, Rounds: o.Rounds, Chunks: o.Chunks, GetStates: o.GetStates,
		StreamFormat: o.StreamFormat, ReadDelay: o.ReadDelay, OwnLifecycle: o.OwnLifecycle, IdleWait: o.IdleWait,
		Planned: o.Sessions * o.Rounds * (1 + o.GetStates)}, o.Logger.With("sessions", o.Sessions))}

	if o.Watchers > 0 {
		var err error
		if r.interval, err = progressIntervalOf(o.ServerArgs); err != nil {
			return r.rep, err
		}
		r.rep.SessionWS = &WatchReport{Watchers: o.Watchers, ProgressInterval: r.interval, PlanSteps: o.PlanSteps}
	}

	run, err := launch(ctx, o, o.Sessions+o.IdleSessions+o.Watchers+10, r.log)
	if err != nil {
		return r.rep, err
	}
	defer run.close(o)
	r.launched(run)
	r.hc = &http.Client{Transport: &http.Transport{}}
	defer r.hc.CloseIdleConnections()

	defer func() {
		if r.obs != nil {
			r.obs.close()
		}
	}()
	defer func() { closeAll(r.clients) }()
	defer r.closeWatchers()
	for _, step := range []func(context.Context) error{r.first, r.connect, r.watch, r.load, r.idleWait} {
		if err := step(ctx); err != nil {
			return r.rep, err
		}
	}
	r.rep.SendBudgetCuts = sendBudgetCuts(ctx, r.obs, o.CommandTimeout, r.log)
	r.stop()

	summarize(&r.rep, r.results, r.mk, &r.probs)
	countClients(&r.rep, r.clients)
	r.rep.Errors, r.rep.ErrorKinds, r.rep.ErrorSamples = r.probs.result()
	if err := r.baseline(ctx); err != nil {
		return r.rep, err
	}
	return r.rep, nil
}

// first is phase 0: the bench's own connection, for what is not the
// load: it creates the first session and the idle sessions; it asks for
// the server's counters at the end.
func (r *wsRun) first(ctx context.Context) error {
	o := r.o
	obs, err := dial(ctx, r.hc, "ws://"+r.srv.addr+"/?lifecycle=own", "", &clientOptions{timeout: o.CommandTimeout, faults: &r.probs})
	if err != nil {
		return fmt.Errorf("the bench's own connection: %w", err)
	}
	r.obs = obs
	if err := createSession(ctx, obs, "bench-first", o.CommandTimeout); err != nil {
		return err
	}
	r.prev, err = r.firstAndIdle(ctx, func(ctx context.Context, id string) error {
		return createSession(ctx, obs, id, o.CommandTimeout)
	})
	return err
}

// connect is phase 1: connect and create every session.
func (r *wsRun) connect(ctx context.Context) error {
	o := r.o
	start := time.Now()
	url := "ws://" + r.srv.addr + "/"
	if o.OwnLifecycle {
		url += "?lifecycle=own"
	}
	co := &clientOptions{timeout: o.CommandTimeout, readDelay: o.ReadDelay, answer: r.mk.answer,
		delta: o.StreamFormat == "delta", faults: &r.probs}
	r.clients = connectAll(ctx, o, r.hc, url, co)
	r.rep.Setup = time.Since(start)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("connecting sessions: %w", err)
	}
	var err error
	if r.idle, err = r.sessionsMemory(ctx, r.prev, int64(len(r.clients)-countNil(r.clients))); err != nil {
		return err
	}
	r.log.Info("sessions created", "took", r.rep.Setup.Round(time.Millisecond), "rss", r.idle.RSS)
	return nil
}

// watch is phase 1b: the watchers on the per-session WebSocket, idle.
func (r *wsRun) watch(ctx context.Context) error {
	sw := r.rep.SessionWS
	if sw == nil {
		return nil
	}
	o := r.o
	start := time.Now()
	r.watchers = watchAll(ctx, o, r.hc, r.srv.addr, r.clients, &watchOptions{timeout: o.CommandTimeout, interval: r.interval, faults: &r.probs})
	sw.Setup = time.Since(start)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("connecting watchers: %w", err)
	}
	sw.Failed = countNilWatchers(r.watchers)
	m, err := settledMemory(ctx, r.srv.pid(), o.Settle)
	if err != nil {
		return err
	}
	sw.RSSWatchers = m.RSS
	if n := int64(len(r.watchers) - sw.Failed); n > 0 {
		sw.RSSPerWatcher = (m.RSS - r.idle.RSS) / n
	}
	r.log.Info("watchers subscribed", "took", sw.Setup.Round(time.Millisecond), "rss", m.RSS)
	return nil
}

// closeWatchers closes every watcher, together.
func (r *wsRun) closeWatchers() {
	var wg sync.WaitGroup
	for _, w := range r.watchers {
		if w != nil {
			wg.Go(w.close)
		}
	}
	wg.Wait()
}

// load is phase 2: the load, every session at once, bounded as a whole;
// then the watchers' totals, once each has every run's completed.
func (r *wsRun) load(ctx context.Context) error {
	o := r.o
	frames0, bytes0, events0 := countFrames(r.clients)
	watch0 := markWatchers(r.watchers)
	cpu0, cpuErr := readCPU(r.srv.pid())
	r.results, r.rep.Duration = driveAll(ctx, o, r.clients, driveClients(o, &r.probs))
	frames1, bytes1, events1 := countFrames(r.clients)
	watch1 := markWatchers(r.watchers)
	after, err := endLoad(ctx, r.srv.pid(), cpu0, cpuErr, &r.rep, r.log)
	if err != nil {
		return err
	}
	r.rep.Frames, r.rep.Bytes, r.rep.SessionEvents = frames1-frames0, bytes1-bytes0, events1-events0
	r.log.Info("load done", "took", r.rep.Duration.Round(time.Millisecond), "rss", after.RSS, "peak", after.Peak)

	if sw := r.rep.SessionWS; sw != nil {
		// Every session's driver knows how many runs it ended: each
		// watcher must get a completed for every one.
		runsOf := map[string]int64{}
		for _, c := range r.clients {
			if c != nil {
				runsOf[c.sid] = c.agentEnds.Load()
			}
		}
		runs := func(sid string) int64 { return runsOf[sid] }
		awaitCompleted(ctx, r.watchers, runs, 10*time.Second+2*r.interval)
		sw.watchTotals(r.watchers, watch0, watch1, r.rep.Duration, runs, &r.probs)
	}
	return nil
}

// stop is phase 3: SIGTERM with every connection still open, as in a
// deployment's rolling restart. Slow readers catch up at full speed
// now: otherwise the shutdown would time the library's wait for their
// close frames behind what they have yet to read.
func (r *wsRun) stop() {
	for _, c := range r.clients {
		if c != nil {
			c.hurry.Store(true)
		}
	}
	for _, w := range r.watchers {
		if w != nil {
			w.ending.Store(true)
		}
	}
	code, took, killed := r.srv.stop(r.o.ShutdownGrace)
	if sw := r.rep.SessionWS; sw != nil {
		awaitClosed(r.watchers, 5*time.Second)
		sw.watchEnd(r.watchers, &r.probs)
	}
	r.stopped(code, took, killed)
}

// baseline runs last, with agentd gone: the library alone, shaped like
// the load the clients just received (o.Baseline).
func (r *wsRun) baseline(ctx context.Context) error {
	o, rep := r.o, &r.rep
	if !o.Baseline || rep.Frames <= 0 {
		return nil
	}
	b, err := Baseline(ctx, BaselineOptions{Binary: o.BaselineBinary, Connections: o.Sessions,
		Messages: int(max(1, rep.Frames/int64(o.Sessions))), Size: int(max(1, rep.Bytes/rep.Frames)),
		DialConcurrency: o.DialConcurrency, Timeout: o.LoadTimeout, StartTimeout: o.StartTimeout, Logger: o.Logger})
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	rep.Baseline = &b
	if b.MessagesPerSec > 0 {
		rep.BaselineFraction = rep.EventsPerSec / b.MessagesPerSec
		rep.SessionEventsFraction = rep.SessionEventsPerSec / b.MessagesPerSec
	}
	return nil
}
