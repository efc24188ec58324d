package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// restRun is one run of the load over the conversation API (runREST):
// what its phases share besides phases.
type restRun struct {
	phases
	rr       *RESTReport
	whc      *http.Client // the watchers' own, counted on the wire
	wire     atomic.Int64 // bytes the watchers' connections read
	api      string       // the conversation API's URL
	so       *sseOptions
	convs    []*restConv  // nil where one could not be created
	streams  []*sseStream // every one open, closed at the end
	watchers []*sseStream
	prev     memory    // the server's settled memory before the conversations
	idle     memory    // and with them
	start    time.Time // when the watchers began to attach: the span's start
	results  []sessionResult
}

// runREST is Run for the conversation API: N conversations created with
// PUT, each with its driver's event stream and o.SSEWatchers watchers,
// driven by POSTing a user message and a step with auto_confirm, o.Rounds
// times back to back, each step waited for by its run_ended. The
// watchers pause o.ReadDelay after each event; the drivers read at full
// speed.
func runREST(ctx context.Context, o Options) (Report, error) {
	rep := Report{Sessions: o.Sessions, Rounds: o.Rounds, Chunks: o.Chunks, StreamFormat: o.StreamFormat, IdleWait: o.IdleWait,
		Planned: o.Sessions * o.Rounds, OwnLifecycle: true}
	rr := &RESTReport{WatchersPerConversation: o.SSEWatchers, Watchers: o.Sessions * o.SSEWatchers, ReadDelay: o.ReadDelay}
	rep.REST = rr
	r := &restRun{phases: newPhases(o, rep, o.Logger.With("sessions", o.Sessions, "face", "rest")), rr: rr}

	run, err := launch(ctx, o, o.Sessions*(1+o.SSEWatchers)+o.IdleSessions+20, r.log)
	if err != nil {
		return r.rep, err
	}
	defer run.close(o)
	r.launched(run)
	// Every driver keeps its connection for its POSTs between steps.
	r.hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.Sessions + 16}}
	defer r.hc.CloseIdleConnections()
	// The watchers have connections of their own, counted on the wire.
	r.whc = &http.Client{Transport: &http.Transport{DialContext: countingDial(&r.wire)}}
	defer r.whc.CloseIdleConnections()
	r.api = "http://" + r.srv.addr + convPath
	r.so = &sseOptions{timeout: o.CommandTimeout, answer: r.mk.answer, faults: &r.probs}

	defer r.closeStreams()
	for _, step := range []func(context.Context) error{r.first, r.conversations, r.watch, r.load, r.idleWait} {
		if err := step(ctx); err != nil {
			return r.rep, err
		}
	}
	r.askSendBudgetCuts(ctx)
	r.stop()

	summarize(&r.rep, r.results, r.mk, &r.probs)
	for _, c := range r.convs {
		if c != nil {
			r.rep.AnswersChecked += c.driver.answers.Load()
		}
	}
	r.rep.Errors, r.rep.ErrorKinds, r.rep.ErrorSamples = r.probs.result()
	rr.Duplicated, rr.OutOfOrder = int64(r.rep.ErrorKinds["sse event twice"]), int64(r.rep.ErrorKinds["sse event out of order"])
	return r.rep, nil
}

// first is phase 0: a first conversation with a stream and the idle
// conversations, without streams.
func (r *restRun) first(ctx context.Context) error {
	o := r.o
	if _, err := putConversation(ctx, r.hc, r.api, "bench-first", o.CommandTimeout); err != nil {
		return err
	}
	first, err := openSSE(ctx, r.hc, r.api+"bench-first/events", "bench-first", "first stream", 0, r.so)
	if err != nil {
		return fmt.Errorf("the first conversation's stream: %w", err)
	}
	first.close()
	r.prev, err = r.firstAndIdle(ctx, func(ctx context.Context, id string) error {
		_, err := putConversation(ctx, r.hc, r.api, id, o.CommandTimeout)
		return err
	})
	return err
}

// closeStreams closes every stream still open, together.
func (r *restRun) closeStreams() {
	var wg sync.WaitGroup
	for _, s := range r.streams {
		wg.Go(s.close)
	}
	wg.Wait()
}

// conversations is phase 1: the conversations, each with its
// driver's stream.
func (r *restRun) conversations(ctx context.Context) error {
	start := time.Now()
	r.convs = createConversations(ctx, r.o, r.hc, r.api, r.so, &r.probs)
	for _, c := range r.convs {
		if c != nil {
			r.streams = append(r.streams, c.driver)
		}
	}
	r.rep.Setup = time.Since(start)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("creating conversations: %w", err)
	}
	var err error
	if r.idle, err = r.sessionsMemory(ctx, r.prev, int64(len(r.streams))); err != nil {
		return err
	}
	r.log.Info("conversations created", "took", r.rep.Setup.Round(time.Millisecond), "rss", r.idle.RSS)
	return nil
}

// watch is phase 1b: the watchers, idle.
func (r *restRun) watch(ctx context.Context) error {
	o, rr := r.o, r.rr
	r.start = time.Now()
	if o.SSEWatchers > 0 {
		wo := *r.so
		wo.readDelay = o.ReadDelay
		r.watchers = attachWatchers(ctx, o, r.whc, r.api, r.convs, &wo, &r.probs)
		r.streams = append(r.streams, r.watchers...)
	}
	rr.Setup = time.Since(r.start)
	rr.Failed = rr.Watchers - len(r.watchers)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("attaching watchers: %w", err)
	}
	if o.SSEWatchers > 0 {
		m, err := settledMemory(ctx, r.srv.pid(), o.Settle)
		if err != nil {
			return err
		}
		rr.RSSWatchers = m.RSS
		if len(r.watchers) > 0 {
			rr.RSSPerWatcher = (m.RSS - r.idle.RSS) / int64(len(r.watchers))
		}
		r.log.Info("watchers attached", "took", rr.Setup.Round(time.Millisecond), "rss", m.RSS)
	}
	return nil
}

// load is phase 2: the load, every conversation at once, bounded as a
// whole; then the watchers' totals, once each has every run's end.
func (r *restRun) load(ctx context.Context) error {
	o, rr := r.o, r.rr
	w0, wire0 := markStreams(r.watchers), r.wire.Load()
	d0 := markStreams(drivers(r.convs))
	cpu0, cpuErr := readCPU(r.srv.pid())
	r.results, r.rep.Duration = driveAll(ctx, o, r.convs, func(ctx context.Context, c *restConv) sessionResult {
		return driveConversation(ctx, o, r.hc, r.api, c, &r.probs)
	})
	after, err := endLoad(ctx, r.srv.pid(), cpu0, cpuErr, &r.rep, r.log)
	if err != nil {
		return err
	}
	d1 := markStreams(drivers(r.convs))
	r.rep.Frames, r.rep.Bytes = d1.events()-d0.events(), d1.bytes-d0.bytes
	r.log.Info("load done", "took", r.rep.Duration.Round(time.Millisecond), "rss", after.RSS, "peak", after.Peak)

	// A watcher's last events may come a moment after its driver's, or
	// long after for a slow one.
	wait := 10 * time.Second
	if o.ReadDelay > 0 {
		wait = max(wait, o.CommandTimeout)
	}
	awaitRunEnds(ctx, r.convs, wait)
	rr.Span = time.Since(r.start)
	w1 := markStreams(r.watchers)
	rr.WireBytes = r.wire.Load() - wire0
	rr.loadTotals(w0, w1, len(r.watchers), r.mk.requestsBy(), r.convs, o.Chunks, &r.probs)
	return nil
}

// askSendBudgetCuts asks the server, over a connection of the bench's own,
// how many clients its send budget cut off (-1 if it cannot say).
func (r *restRun) askSendBudgetCuts(ctx context.Context) {
	o := r.o
	r.rep.SendBudgetCuts = -1
	if obs, err := dial(ctx, r.hc, "ws://"+r.srv.addr+"/?lifecycle=own", "", &clientOptions{timeout: o.CommandTimeout, faults: &r.probs}); err != nil {
		r.log.Warn("the bench's own connection, for get_metrics", "err", err)
	} else {
		r.rep.SendBudgetCuts = sendBudgetCuts(ctx, obs, o.CommandTimeout, r.log)
		obs.close()
	}
}

// stop is phase 3: SIGTERM with every stream still open.
func (r *restRun) stop() {
	for _, s := range r.streams {
		s.ending.Store(true)
	}
	code, took, killed := r.srv.stop(r.o.ShutdownGrace)
	awaitStreamsEnded(r.streams, 5*time.Second)
	r.rr.streamEnds(r.streams)
	r.stopped(code, took, killed)
}
