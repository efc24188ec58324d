// Package loadgen measures `agentd serve`: it starts the server as a child
// process against an in-process mock model, drives N sessions over real
// WebSocket connections, and reports throughput, latency (raw, and added
// over the model's own time) and memory per session. `agentd bench` and
// the package's Go benchmark use it.
package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/agentd-dev/agentd/internal/jsonfield"
	"github.com/agentd-dev/agentd/internal/piclient"
)

// Options says what to run.
type Options struct {
	// Binary is the agentd executable to start as `agentd serve`; empty
	// means this process's own executable.
	Binary string
	// Sessions is N: connections, one session each.
	Sessions int
	// Rounds is how many prompts each session sends, one after the other
	// (default 5).
	Rounds int
	// Chunks is how many text deltas (tokens, 4 bytes each) the mock
	// streams per answer (default 20).
	Chunks int
	// StreamFormat is serve's --stream-format: "full" (pi's: every
	// message_update carries the whole message so far) or "delta"; empty
	// leaves serve's default (full).
	StreamFormat string
	// ReadDelay is slept by every client after each frame it reads, up
	// to the shutdown: a client that reads slower than the model writes,
	// where the server's queues grow. 0 reads at full speed.
	ReadDelay time.Duration
	// GetStates is how many get_state commands each session sends after
	// each prompt (default 1; negative means none): a command that never
	// reaches the model, to measure command overhead alone.
	GetStates int
	// DialConcurrency bounds connections being opened at once (default 64),
	// so a large N does not overflow the listen backlog.
	DialConcurrency int
	// CommandTimeout bounds each command's wait for its response
	// (default 2 minutes).
	CommandTimeout time.Duration
	// IdleSessions is how many more sessions the bench's own connection
	// creates before the N, to measure the memory of a session without
	// a connection of its own (default none).
	IdleSessions int
	// LoadTimeout bounds the whole load phase (default 10 minutes): a
	// command still waiting then is counted as an error of kind "load
	// timeout", and the commands its session had yet to send as not run.
	LoadTimeout time.Duration
	// Settle is how long the server's RSS must hold still (within 1 % or
	// 256 KiB) before the idle readings (before any connection, and with
	// N idle sessions) are taken; they wait at most ten times as long.
	// Default 1 s; negative reads at once.
	Settle time.Duration
	// IdleWait, when positive, keeps the connections open and idle that
	// long after the load and reads the RSS again: memory held by the
	// load should have been returned by then.
	IdleWait time.Duration
	// StartTimeout bounds the wait for the server's ready line (default 30 s).
	StartTimeout time.Duration
	// ShutdownGrace is how long the server may take to exit after SIGTERM
	// before it is killed (default 60 s).
	ShutdownGrace time.Duration
	// OwnLifecycle connects with ?lifecycle=own: each client receives the
	// lifecycle events of its own commands only, not every client's.
	OwnLifecycle bool
	// Baseline, after the server has stopped, measures coder/websocket's
	// own rate over as many connections, with as many messages per
	// connection and of the same mean size as the server sent (see
	// Baseline), for the report's events/s fraction.
	Baseline bool
	// BaselineBinary is the agentd executable that runs the baseline's
	// server (`agentd bench __baseline-server`); empty means this
	// process's own executable. It may differ from Binary, which can be
	// an older agentd.
	BaselineBinary string
	// Watchers, when positive, measures the per-session WebSocket face
	// as well: after the sessions are created, this many connections to
	// /api/v1/ws/sessions/{id}, spread evenly over them (at least one
	// each), subscribe and watch the load (see WatchReport). A
	// --ws-progress-interval in ServerArgs is the rate their
	// progress_updates are held to.
	Watchers int
	// PlanSteps, when positive, makes the mock work through a plan of
	// that many steps in every run, calling the todo tool once per step
	// and once more to finish, so each prompt's run has PlanSteps+2
	// turns (model requests), each streaming Chunks tokens of text, and
	// the session's progress moves.
	PlanSteps int
	// REST measures the conversation API's face instead of pi-server's
	// (see RunREST): the sessions are conversations created and driven
	// over /api/v2, and SSEWatchers more event streams per conversation
	// watch the load.
	REST bool
	// SSEWatchers is, with REST, how many event streams each
	// conversation has besides its driver's (see RESTReport).
	SSEWatchers int
	// ClusterNodes, when above 1, runs that many `agentd serve` nodes as
	// a cluster (the first with the embedded NATS server, all with
	// --cluster-spread) and spreads the sessions' connections over them
	// round-robin; the report then has a Cluster part with the takeover
	// after one node is killed (see ClusterReport). The pi face only:
	// not with REST, Watchers, IdleSessions, IdleWait or Baseline.
	ClusterNodes int
	// LagSessions is how many of a cluster run's sessions get watchers on
	// every face, on their owner and on another node, whose lag the
	// report gives (ClusterReport.Lag; lag.go): default 10, negative none.
	LagSessions int
	// ServerArgs are extra `agentd serve` flags, after the bench's own.
	ServerArgs []string
	// ServerLog, if set, gets a copy of the server's stderr.
	ServerLog io.Writer
	// Logger gets progress messages; nil discards them.
	Logger *slog.Logger
}

func (o Options) withDefaults() (Options, error) {
	if o.Sessions < 1 {
		return o, fmt.Errorf("sessions %d: must be at least 1", o.Sessions)
	}
	if o.Rounds == 0 {
		o.Rounds = 5
	}
	if o.Rounds < 0 {
		return o, fmt.Errorf("rounds %d: must not be negative", o.Rounds)
	}
	if o.Chunks == 0 {
		o.Chunks = 20
	}
	if o.Chunks < 0 {
		return o, fmt.Errorf("chunks %d: must not be negative", o.Chunks)
	}
	switch {
	case o.GetStates == 0:
		o.GetStates = 1
	case o.GetStates < 0:
		o.GetStates = 0
	}
	if o.DialConcurrency <= 0 {
		o.DialConcurrency = 64
	}
	if o.CommandTimeout <= 0 {
		o.CommandTimeout = 2 * time.Minute
	}
	if o.LoadTimeout <= 0 {
		o.LoadTimeout = 10 * time.Minute
	}
	if o.Settle == 0 {
		o.Settle = time.Second
	}
	if o.ReadDelay < 0 || o.IdleWait < 0 || o.IdleSessions < 0 {
		return o, fmt.Errorf("read delay %s, idle wait %s, idle sessions %d: must not be negative", o.ReadDelay, o.IdleWait, o.IdleSessions)
	}
	if o.PlanSteps < 0 {
		return o, fmt.Errorf("plan steps %d: must not be negative", o.PlanSteps)
	}
	if o.SSEWatchers < 0 || (o.SSEWatchers > 0 && !o.REST) || (o.REST && o.Watchers > 0) {
		return o, fmt.Errorf("sse watchers %d, watchers %d, rest %t: SSE watchers are for the REST face, and watchers for the per-session WebSocket are not", o.SSEWatchers, o.Watchers, o.REST)
	}
	if o.Watchers < 0 || (o.Watchers > 0 && o.Watchers < o.Sessions) {
		return o, fmt.Errorf("watchers %d: want at least one per session (%d), or none", o.Watchers, o.Sessions)
	}
	switch o.StreamFormat {
	case "":
		o.StreamFormat = "full" // serve's default, named in the report
	case "full", "delta":
	default:
		return o, fmt.Errorf("stream format %q: want full or delta", o.StreamFormat)
	}
	if o.ClusterNodes > 1 && (o.REST || o.Watchers > 0 || o.IdleSessions > 0 || o.IdleWait > 0 || o.Baseline) {
		return o, fmt.Errorf("cluster nodes %d: only the pi face's load, without watchers, REST, idle sessions, idle wait or baseline", o.ClusterNodes)
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 30 * time.Second
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = time.Minute
	}
	if o.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return o, fmt.Errorf("agentd binary: %w", err)
		}
		o.Binary = exe
	}
	if o.Baseline && o.BaselineBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return o, fmt.Errorf("baseline binary: %w", err)
		}
		o.BaselineBinary = exe
	}
	// The server runs in its own work directory: a relative path would
	// be looked up there.
	if abs, err := filepath.Abs(o.Binary); err == nil {
		o.Binary = abs
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// Report is what one run measured. Durations are in nanoseconds in JSON,
// sizes in bytes.
type Report struct {
	Sessions  int `json:"sessions"`
	Rounds    int `json:"rounds"`
	Chunks    int `json:"chunks"`
	GetStates int `json:"get_states_per_round"`
	// StreamFormat is the server's message_update format, ReadDelay the
	// clients' pause after each frame.
	StreamFormat string        `json:"stream_format"`
	ReadDelay    time.Duration `json:"read_delay_ns"`
	OwnLifecycle bool          `json:"own_lifecycle"`

	// Setup is connecting all sessions and creating them.
	Setup time.Duration `json:"setup_ns"`
	// Commands are the load phase's commands (prompts and get_states)
	// that got a response, out of Planned; NotRun were never sent
	// because their session had stopped (its connection lost, a command
	// timed out, the load phase's time ran out). Duration is that phase's
	// wall time.
	Commands       int           `json:"commands"`
	Planned        int           `json:"commands_planned"`
	NotRun         int           `json:"commands_not_run"`
	Prompts        int           `json:"prompts"`
	Duration       time.Duration `json:"duration_ns"`
	CommandsPerSec float64       `json:"commands_per_sec"`
	// LateResponses came after their command had stopped waiting (they
	// are not errors again: the timeout was counted).
	LateResponses int `json:"late_responses"`
	// Frames counts every frame the clients received in the load phase
	// (responses, lifecycle broadcasts, session events) and Bytes their
	// payload; SessionEvents the session events they delivered (a frame
	// into which a lagging client's deltas were merged counts as the
	// events it stands for). EventsPerSec is Frames per second of the
	// load phase, SessionEventsPerSec SessionEvents per second.
	Frames              int64   `json:"frames"`
	Bytes               int64   `json:"bytes"`
	SessionEvents       int64   `json:"session_events"`
	EventsPerSec        float64 `json:"events_per_sec"`
	SessionEventsPerSec float64 `json:"session_events_per_sec"`
	// LoadCPU is the CPU time of the load phase: the server's, the
	// bench's (clients and mock) and the rest of the machine's.
	LoadCPU CPUUse `json:"load_cpu"`
	// AnswersChecked counts assistant messages whose final text the
	// clients compared with the mock's answer (a mismatch is an error).
	AnswersChecked int64 `json:"answers_checked"`

	// PromptP50/P99: send to response of a prompt (the whole agent run).
	PromptP50 time.Duration `json:"prompt_p50_ns"`
	PromptP99 time.Duration `json:"prompt_p99_ns"`
	// MockP50/P99: the mock model's own time per prompt, from its request
	// arriving to its last byte.
	MockP50 time.Duration `json:"mock_p50_ns"`
	MockP99 time.Duration `json:"mock_p99_ns"`
	// AddedP50/P99: prompt latency minus the mock's time, per prompt.
	AddedP50 time.Duration `json:"added_p50_ns"`
	AddedP99 time.Duration `json:"added_p99_ns"`
	// GetStateP50/P99: send to response of get_state, which has no model.
	GetStateP50 time.Duration `json:"get_state_p50_ns"`
	GetStateP99 time.Duration `json:"get_state_p99_ns"`

	// The idle readings, each once the RSS held still (Options.Settle):
	// RSSBaseline is the server's VmRSS before any connection,
	// RSSFirstSession after the bench's own connection created a first
	// session (which pays the server's one-time lazy initialisation),
	// and RSSSessions after the N sessions were created, each with its
	// connection. RSSPerIdleSession is the RSS per session of the
	// IdleSessions more the bench's own connection created before them
	// (sessions without a connection of their own); RSSPerSession the
	// RSS per session of the N, connection included, from the reading
	// before them.
	//
	// RSSAfter is the VmRSS right after the load phase (every client
	// has its last response), RSSPeak the VmHWM then: the most the load
	// ever held. RSSIdle is the VmRSS after IdleWait more with every
	// connection open and idle, RSSIdleSamples its course on the way.
	RSSBaseline       int64         `json:"rss_baseline_bytes"`
	RSSFirstSession   int64         `json:"rss_first_session_bytes"`
	IdleSessions      int           `json:"idle_sessions,omitempty"`
	RSSPerIdleSession int64         `json:"rss_per_idle_session_bytes,omitempty"`
	RSSSessions       int64         `json:"rss_sessions_bytes"`
	RSSPerSession     int64         `json:"rss_per_session_bytes"`
	RSSAfter          int64         `json:"rss_after_bytes"`
	RSSPeak           int64         `json:"rss_peak_bytes"`
	IdleWait          time.Duration `json:"idle_wait_ns,omitempty"`
	RSSIdle           int64         `json:"rss_after_idle_bytes,omitempty"`
	RSSIdleSamples    []RSSSample   `json:"rss_idle_samples,omitempty"`

	// RSSAnonBaseline is the RssAnon of the RSSBaseline reading;
	// RSSAnonIdle that of RSSIdle, and HeapLiveIdle the server's live
	// heap then (go_gc_heap_live_bytes on its /metrics: what its last
	// collection found live), which an idle server's RSS is measured
	// against. Zero when not read.
	RSSAnonBaseline int64 `json:"rss_anon_baseline_bytes,omitempty"`
	RSSAnonIdle     int64 `json:"rss_anon_after_idle_bytes,omitempty"`
	HeapLiveIdle    int64 `json:"heap_live_after_idle_bytes,omitempty"`

	// SessionWS is what the per-session WebSocket's watchers measured
	// (nil without Options.Watchers).
	SessionWS *WatchReport `json:"session_ws,omitempty"`
	// REST is what the conversation API's event streams measured (nil
	// unless Options.REST); the figures above are its drivers'.
	REST *RESTReport `json:"rest,omitempty"`

	// Cluster is what a run against several nodes measured besides
	// (nil unless Options.ClusterNodes); there the RSS figures are the
	// nodes' together, LoadCPU.Server their CPU together, and
	// Shutdown the surviving nodes' after the takeover.
	Cluster *ClusterReport `json:"cluster,omitempty"`

	// Baseline is coder/websocket's own rate in the same run (nil
	// unless asked for); BaselineFraction is EventsPerSec over its
	// MessagesPerSec, SessionEventsFraction SessionEventsPerSec over it.
	Baseline              *BaselineReport `json:"baseline,omitempty"`
	BaselineFraction      float64         `json:"events_per_sec_fraction_of_baseline,omitempty"`
	SessionEventsFraction float64         `json:"session_events_per_sec_fraction_of_baseline,omitempty"`
	// BaselineRounds are the rounds of RunInterleaved, whose median
	// fraction BaselineFraction then is (nil from Run).
	BaselineRounds []BaselineRound `json:"baseline_rounds,omitempty"`

	// ModelRequests is how many requests the mock answered.
	ModelRequests int `json:"model_requests"`
	// ServerExit is the server's exit code after SIGTERM (-1: killed);
	// Shutdown how long it took to exit; ShutdownNotices how many
	// connections got server_shutdown.
	ServerExit      int           `json:"server_exit_code"`
	Shutdown        time.Duration `json:"shutdown_ns"`
	ShutdownNotices int           `json:"shutdown_notices"`
	// SendBudgetCuts is how many clients the server cut off because the
	// bytes queued for all clients together exceeded its send budget
	// (get_metrics' commandsRejected.sendBudget, asked just before the
	// shutdown; -1 if the server could not say). Such a client's
	// commands end as "connection lost".
	SendBudgetCuts int64 `json:"send_budget_cuts"`
	// ServerWarnings counts the server's warning and error log lines.
	ServerWarnings       int      `json:"server_warnings"`
	ServerWarningSamples []string `json:"server_warning_samples,omitempty"`

	// Errors counts failed commands, lost connections, protocol faults
	// and an unclean server exit; ErrorKinds splits them by kind and
	// ErrorSamples are the first few messages.
	Errors       int            `json:"errors"`
	ErrorKinds   map[string]int `json:"error_kinds,omitempty"`
	ErrorSamples []string       `json:"error_samples,omitempty"`
}

// RSSSample is the server's VmRSS some time after the load phase.
type RSSSample struct {
	After time.Duration `json:"after_ns"`
	RSS   int64         `json:"rss_bytes"`
}

// tally counts problems by kind and keeps the first few messages of each
// kind. The session goroutines and connection readers all add to one.
type tally struct {
	log *slog.Logger // every problem at debug level; samples are few

	mu      sync.Mutex
	n       int
	kinds   map[string]int
	samples map[string][]string
}

const samplesPerKind = 3

func (t *tally) add(kind, msg string) {
	if t.log != nil {
		t.log.Debug("problem", "kind", kind, "msg", msg)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n++
	if t.kinds == nil {
		t.kinds, t.samples = map[string]int{}, map[string][]string{}
	}
	t.kinds[kind]++
	if len(t.samples[kind]) < samplesPerKind {
		t.samples[kind] = append(t.samples[kind], msg)
	}
}

// result is the count, the count by kind and the samples, kind by kind.
func (t *tally) result() (int, map[string]int, []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var samples []string
	for _, k := range slices.Sorted(maps.Keys(t.samples)) {
		samples = append(samples, t.samples[k]...)
	}
	return t.n, maps.Clone(t.kinds), samples
}

// promptSample is one prompt's latency, with its tag to find the mock's time.
type promptSample struct {
	tag     string
	latency time.Duration
}

// sessionResult is what one session goroutine measured; each goroutine
// writes only its own.
type sessionResult struct {
	prompts []promptSample
	gets    []time.Duration
	done    int // commands answered in the load phase
	failed  int // commands sent that got no response
}

// driveAll drives every session that connected (a nil one did not) at
// once with drive, the whole load bounded by o.LoadTimeout, and returns
// what each measured and how long the load took. Every bench drives
// through it: a WebSocket client or a REST conversation.
func driveAll[C any](ctx context.Context, o Options, sessions []*C, drive func(context.Context, *C) sessionResult) ([]sessionResult, time.Duration) {
	start := time.Now()
	results := make([]sessionResult, len(sessions))
	lctx, cancel := context.WithTimeout(ctx, o.LoadTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, c := range sessions {
		if c != nil {
			wg.Go(func() { results[i] = drive(lctx, c) })
		}
	}
	wg.Wait()
	return results, time.Since(start)
}

// driveClients is drive for driveAll.
func driveClients(o Options, probs *tally) func(context.Context, *client) sessionResult {
	return func(ctx context.Context, c *client) sessionResult { return drive(ctx, o, c, probs) }
}

// endLoad closes the load phase of the server with pid: rep gets its CPU
// times since cpu0 (when they could be read; cpuErr is why not) and its
// memory after the load, which it returns.
func endLoad(ctx context.Context, pid int, cpu0 cpuMark, cpuErr error, rep *Report, log *slog.Logger) (memory, error) {
	if cpuErr == nil {
		var cpu1 cpuMark
		if cpu1, cpuErr = readCPU(pid); cpuErr == nil {
			rep.LoadCPU = cpu1.since(cpu0)
		}
	}
	if cpuErr != nil {
		log.Warn("cpu times", "err", cpuErr)
	}
	if err := ctx.Err(); err != nil {
		return memory{}, fmt.Errorf("load phase: %w", err)
	}
	after, err := readMemory(pid)
	if err != nil {
		return memory{}, err
	}
	rep.RSSAfter, rep.RSSPeak = after.RSS, after.Peak
	return after, nil
}

// summarize fills rep's counts, latencies and rates from the sessions'
// results, after the load; every bench (WebSocket, cluster, REST) shares it.
func summarize(rep *Report, results []sessionResult, mk *mock, probs *tally) {
	var lat, added, mockT, gets []time.Duration
	failed := 0
	for _, r := range results {
		rep.Commands += r.done
		rep.Prompts += len(r.prompts)
		failed += r.failed
		gets = append(gets, r.gets...)
		for _, p := range r.prompts {
			lat = append(lat, p.latency)
			m, ok := mk.time(p.tag)
			if !ok {
				probs.add("prompt without model request", "the mock got no request for prompt "+p.tag)
				continue
			}
			mockT = append(mockT, m)
			added = append(added, p.latency-m)
		}
	}
	rep.NotRun = rep.Planned - rep.Commands - failed
	rep.PromptP50, rep.PromptP99 = percentile(lat, 50), percentile(lat, 99)
	rep.MockP50, rep.MockP99 = percentile(mockT, 50), percentile(mockT, 99)
	rep.AddedP50, rep.AddedP99 = percentile(added, 50), percentile(added, 99)
	rep.GetStateP50, rep.GetStateP99 = percentile(gets, 50), percentile(gets, 99)
	if s := rep.Duration.Seconds(); s > 0 {
		rep.CommandsPerSec = float64(rep.Commands) / s
		rep.EventsPerSec = float64(rep.Frames) / s
		rep.SessionEventsPerSec = float64(rep.SessionEvents) / s
	}
}

// countClients adds what the WebSocket clients saw themselves: shutdown
// notices, late responses, answers checked.
func countClients(rep *Report, clients []*client) {
	for _, c := range clients {
		if c == nil {
			continue
		}
		if c.shutdown.Load() {
			rep.ShutdownNotices++
		}
		rep.LateResponses += int(c.conn.Late())
		rep.AnswersChecked += c.answers.Load()
	}
}

// closeAll closes every client that connected, together, and waits.
func closeAll(clients []*client) {
	var wg sync.WaitGroup
	for _, c := range clients {
		if c != nil {
			wg.Go(c.close)
		}
	}
	wg.Wait()
}

// Run starts a mock model and `agentd serve`, drives o.Sessions sessions
// and reports. It returns an error only when the run itself could not be
// set up (no server, no mock); problems under load are counted in the
// report's Errors.
func Run(ctx context.Context, o Options) (Report, error) {
	o, err := o.withDefaults()
	if err != nil {
		return Report{}, err
	}
	if o.REST {
		return runREST(ctx, o)
	}
	if o.ClusterNodes > 1 {
		return runCluster(ctx, o)
	}
	rep := Report{Sessions: o.Sessions, Rounds: o.Rounds, Chunks: o.Chunks, GetStates: o.GetStates,
		StreamFormat: o.StreamFormat, ReadDelay: o.ReadDelay, OwnLifecycle: o.OwnLifecycle, IdleWait: o.IdleWait,
		Planned: o.Sessions * o.Rounds * (1 + o.GetStates)}
	log := o.Logger.With("sessions", o.Sessions)

	var interval time.Duration
	if o.Watchers > 0 {
		var err error
		if interval, err = progressIntervalOf(o.ServerArgs); err != nil {
			return rep, err
		}
		rep.SessionWS = &WatchReport{Watchers: o.Watchers, ProgressInterval: interval, PlanSteps: o.PlanSteps}
	}

	run, err := launch(ctx, o, o.Sessions+o.IdleSessions+o.Watchers+10, log)
	if err != nil {
		return rep, err
	}
	defer run.close(o)
	mk, srv, base := run.mk, run.srv, run.base
	rep.RSSBaseline, rep.RSSAnonBaseline = base.RSS, base.Anon

	probs := tally{log: log}
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()

	// Phase 0: the bench's own connection, for what is not the load: it
	// creates the first session, so that no figure per session carries
	// the server's one-time initialisation, and the idle sessions; it
	// asks for the server's counters at the end.
	obs, err := dial(ctx, hc, "ws://"+srv.addr+"/?lifecycle=own", "", &clientOptions{timeout: o.CommandTimeout, faults: &probs})
	if err != nil {
		return rep, fmt.Errorf("the bench's own connection: %w", err)
	}
	defer obs.close()
	if err := createSession(ctx, obs, "bench-first", o.CommandTimeout); err != nil {
		return rep, err
	}
	prev, err := settledMemory(ctx, srv.pid(), o.Settle)
	if err != nil {
		return rep, err
	}
	rep.RSSFirstSession = prev.RSS
	if o.IdleSessions > 0 {
		for i := range o.IdleSessions {
			if err := createSession(ctx, obs, fmt.Sprintf("bench-idle-%06d", i), o.CommandTimeout); err != nil {
				return rep, err
			}
		}
		m, err := settledMemory(ctx, srv.pid(), o.Settle)
		if err != nil {
			return rep, err
		}
		rep.IdleSessions, rep.RSSPerIdleSession = o.IdleSessions, (m.RSS-prev.RSS)/int64(o.IdleSessions)
		prev = m
	}

	// Phase 1: connect and create every session.
	start := time.Now()
	url := "ws://" + srv.addr + "/"
	if o.OwnLifecycle {
		url += "?lifecycle=own"
	}
	co := &clientOptions{timeout: o.CommandTimeout, readDelay: o.ReadDelay, answer: mk.answer,
		delta: o.StreamFormat == "delta", faults: &probs}
	clients := connectAll(ctx, o, hc, url, co)
	defer closeAll(clients)
	rep.Setup = time.Since(start)
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("connecting sessions: %w", err)
	}
	idle, err := settledMemory(ctx, srv.pid(), o.Settle)
	if err != nil {
		return rep, err
	}
	rep.RSSSessions = idle.RSS
	if n := int64(len(clients) - countNil(clients)); n > 0 {
		// Per session that exists: a failed create holds nothing.
		rep.RSSPerSession = (idle.RSS - prev.RSS) / n
	}
	log.Info("sessions created", "took", rep.Setup.Round(time.Millisecond), "rss", idle.RSS)

	// Phase 1b: the watchers on the per-session WebSocket, idle.
	var watchers []*watcher
	defer func() {
		var wg sync.WaitGroup
		for _, w := range watchers {
			if w != nil {
				wg.Go(w.close)
			}
		}
		wg.Wait()
	}()
	if sw := rep.SessionWS; sw != nil {
		start := time.Now()
		watchers = watchAll(ctx, o, hc, srv.addr, clients, &watchOptions{timeout: o.CommandTimeout, interval: interval, faults: &probs})
		sw.Setup = time.Since(start)
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("connecting watchers: %w", err)
		}
		sw.Failed = countNilWatchers(watchers)
		m, err := settledMemory(ctx, srv.pid(), o.Settle)
		if err != nil {
			return rep, err
		}
		sw.RSSWatchers = m.RSS
		if n := int64(len(watchers) - sw.Failed); n > 0 {
			sw.RSSPerWatcher = (m.RSS - idle.RSS) / n
		}
		log.Info("watchers subscribed", "took", sw.Setup.Round(time.Millisecond), "rss", m.RSS)
	}

	// Phase 2: the load, every session at once, bounded as a whole.
	frames0, bytes0, events0 := countFrames(clients)
	watch0 := markWatchers(watchers)
	cpu0, cpuErr := readCPU(srv.pid())
	var results []sessionResult
	results, rep.Duration = driveAll(ctx, o, clients, driveClients(o, &probs))
	frames1, bytes1, events1 := countFrames(clients)
	watch1 := markWatchers(watchers)
	after, err := endLoad(ctx, srv.pid(), cpu0, cpuErr, &rep, log)
	if err != nil {
		return rep, err
	}
	rep.Frames, rep.Bytes, rep.SessionEvents = frames1-frames0, bytes1-bytes0, events1-events0
	log.Info("load done", "took", rep.Duration.Round(time.Millisecond), "rss", after.RSS, "peak", after.Peak)

	if sw := rep.SessionWS; sw != nil {
		// Every session's driver knows how many runs it ended: each
		// watcher must get a completed for every one.
		runsOf := map[string]int64{}
		for _, c := range clients {
			if c != nil {
				runsOf[c.sid] = c.agentEnds.Load()
			}
		}
		runs := func(sid string) int64 { return runsOf[sid] }
		awaitCompleted(ctx, watchers, runs, 10*time.Second+2*interval)
		sw.watchTotals(watchers, watch0, watch1, rep.Duration, runs, &probs)
	}

	// Phase 2b: idle, every connection still open.
	if o.IdleWait > 0 {
		log.Info("idle wait", "for", o.IdleWait)
		if err := idleReadings(ctx, srv, o.IdleWait, &rep, log); err != nil {
			return rep, err
		}
	}

	rep.SendBudgetCuts = sendBudgetCuts(ctx, obs, o.CommandTimeout, log)

	// Phase 3: SIGTERM with every connection still open, as in a
	// deployment's rolling restart. Slow readers catch up at full speed
	// now: otherwise the shutdown would time the library's wait for
	// their close frames behind what they have yet to read.
	for _, c := range clients {
		if c != nil {
			c.hurry.Store(true)
		}
	}
	for _, w := range watchers {
		if w != nil {
			w.ending.Store(true)
		}
	}
	code, took, killed := srv.stop(o.ShutdownGrace)
	if sw := rep.SessionWS; sw != nil {
		awaitClosed(watchers, 5*time.Second)
		sw.watchEnd(watchers, &probs)
	}
	rep.ServerExit, rep.Shutdown = code, took
	if killed {
		probs.add("server killed", fmt.Sprintf("server did not exit within %s of SIGTERM; killed", o.ShutdownGrace))
	} else if code != 0 {
		probs.add("server exit code", fmt.Sprintf("server exited with code %d after SIGTERM; stderr:\n%s", code, srv.log.tail()))
	}
	rep.ServerWarnings, rep.ServerWarningSamples = srv.log.problemLines()
	rep.ModelRequests = mk.requestCount()

	summarize(&rep, results, mk, &probs)
	countClients(&rep, clients)
	rep.Errors, rep.ErrorKinds, rep.ErrorSamples = probs.result()

	// Last, with agentd gone: the library alone, shaped like the load
	// the clients just received.
	if o.Baseline && rep.Frames > 0 {
		b, err := Baseline(ctx, BaselineOptions{Binary: o.BaselineBinary, Connections: o.Sessions,
			Messages: int(max(1, rep.Frames/int64(o.Sessions))), Size: int(max(1, rep.Bytes/rep.Frames)),
			DialConcurrency: o.DialConcurrency, Timeout: o.LoadTimeout, StartTimeout: o.StartTimeout, Logger: o.Logger})
		if err != nil {
			return rep, fmt.Errorf("baseline: %w", err)
		}
		rep.Baseline = &b
		if b.MessagesPerSec > 0 {
			rep.BaselineFraction = rep.EventsPerSec / b.MessagesPerSec
			rep.SessionEventsFraction = rep.SessionEventsPerSec / b.MessagesPerSec
		}
	}
	return rep, nil
}

// serveArgs are the server's flags in env, with room for conns
// connections.
func serveArgs(o Options, env benchEnv, conns int) []string {
	args := []string{"serve", "--port", "0",
		"--config-dir", env.config, "--data-dir", env.data,
		"--model", "mock/mock-model",
		"--max-sessions", strconv.Itoa(o.Sessions + o.IdleSessions + 10),
		"--max-connections", strconv.Itoa(conns),
		"--rate-limit", "0", "--global-rate-limit", "0",
		// The ready line is logged at info; agentd serve logs nothing
		// per command at info, so this costs the server nothing.
		"--log-level", "info", "--log-format", "text"}
	if o.StreamFormat != "" {
		args = append(args, "--stream-format", o.StreamFormat)
	}
	return append(args, o.ServerArgs...)
}

// createSession creates session sid on c. While the server answers
// that it should try again, it asks again until timeout has passed, then
// returns that answer. Each create_session has timeout of its own to be
// answered, apart from the time to keep asking: one sent just before the
// time is up is answered, not cut off mid-write, so a slow machine gets
// the server's last word rather than an error of the client's own.
func createSession(ctx context.Context, c *client, sid string, timeout time.Duration) error {
	until := time.Now().Add(timeout)
	for attempt := 0; ; attempt++ {
		cctx, ccancel := context.WithTimeout(ctx, timeout)
		r, _, err := c.call(cctx, fmt.Sprintf("bench.create.%s.%d", sid, attempt), map[string]any{"type": "create_session", "sessionId": sid})
		ccancel()
		switch {
		case err != nil:
			return fmt.Errorf("create_session %s: %w", sid, err)
		case r.Success:
			return nil
		case !strings.HasSuffix(r.Error, "try again"):
			return fmt.Errorf("create_session %s failed: %s", sid, r.Error)
		}
		// Just after a cluster's nodes start, two of them may place a new
		// id on each other until their node lists agree; the server says
		// to try again.
		pause := min(50*time.Millisecond, time.Until(until))
		if pause <= 0 {
			return fmt.Errorf("create_session %s failed: %s", sid, r.Error)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create_session %s failed: %s (%w)", sid, r.Error, ctx.Err())
		case <-time.After(pause):
		}
	}
}

// sendBudgetCuts asks the server how many clients it cut off for its
// send budget; -1 if it cannot say.
func sendBudgetCuts(ctx context.Context, c *client, timeout time.Duration, log *slog.Logger) int64 {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r, _, err := c.call(cctx, "bench.metrics", map[string]any{"type": "get_metrics"})
	cuts := r.Get("commandsRejected", "sendBudget")
	if err != nil || !r.Success || cuts == nil {
		log.Warn("get_metrics", "err", err, "error", r.Error)
		return -1
	}
	return cuts.GetInt64()
}

// settledMemory reads pid's memory once its RSS has held still for
// settle (within rssTolerance), so that an idle reading does not catch
// the server halfway through work or a collection; it gives up waiting
// after ten times settle. A negative settle reads at once.
func settledMemory(ctx context.Context, pid int, settle time.Duration) (memory, error) {
	m, err := readMemory(pid)
	if err != nil || settle < 0 {
		return m, err
	}
	poll := min(100*time.Millisecond, max(settle/10, time.Millisecond))
	t := time.NewTicker(poll)
	defer t.Stop()
	anchor, since, giveUp := m.RSS, time.Now(), time.Now().Add(10*settle)
	for {
		select {
		case <-ctx.Done():
			return m, fmt.Errorf("waiting for the server's memory to settle: %w", ctx.Err())
		case now := <-t.C:
			if m, err = readMemory(pid); err != nil {
				return m, err
			}
			if d := m.RSS - anchor; d > rssTolerance || d < -rssTolerance {
				anchor, since = m.RSS, now
			}
			if now.Sub(since) >= settle || now.After(giveUp) {
				return m, nil
			}
		}
	}
}

// rssTolerance is how far RSS may move and still count as still: 32
// pages, under 1 KiB per session at N=40.
const rssTolerance = 128 << 10

// watchIdle reads pid's RSS every tenth of wait (at most every 10 s) for
// wait; the last sample is at wait.
func watchIdle(ctx context.Context, pid int, wait time.Duration) ([]RSSSample, error) {
	step := min(10*time.Second, max(wait/10, time.Millisecond))
	start := time.Now()
	t := time.NewTimer(step)
	defer t.Stop()
	var samples []RSSSample
	for {
		select {
		case <-ctx.Done():
			return samples, fmt.Errorf("idle wait: %w", ctx.Err())
		case <-t.C:
		}
		m, err := readMemory(pid)
		if err != nil {
			return samples, err
		}
		el := time.Since(start)
		samples = append(samples, RSSSample{After: el, RSS: m.RSS})
		if el >= wait {
			return samples, nil
		}
		t.Reset(min(step, wait-el))
	}
}

// benchEnv is the server's temporary world.
type benchEnv struct {
	config, data, work string
	environ            []string
}

// writeEnv makes the config, data, work and home directories under dir
// and a models.json whose only provider is the mock.
func writeEnv(dir, baseURL string) (benchEnv, error) {
	e := benchEnv{config: filepath.Join(dir, "config"), data: filepath.Join(dir, "data"), work: filepath.Join(dir, "work")}
	home := filepath.Join(dir, "home")
	for _, d := range []string{e.config, e.data, e.work, home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return e, fmt.Errorf("bench dirs: %w", err)
		}
	}
	models := map[string]any{"providers": map[string]any{"mock": map[string]any{
		"baseUrl": baseURL, "api": "openai-completions", "apiKey": "bench",
		"models": []any{map[string]any{
			"id": "mock-model", "name": "Mock Model", "reasoning": false, "input": []string{"text"},
			"cost":          map[string]float64{"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0},
			"contextWindow": 128000, "maxTokens": 4096,
			"compat": map[string]bool{"supportsDeveloperRole": false, "supportsReasoningEffort": false},
		}},
	}}}
	b, err := json.MarshalIndent(models, "", "  ")
	if err != nil {
		return e, fmt.Errorf("models.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(e.config, "models.json"), b, 0o600); err != nil {
		return e, fmt.Errorf("models.json: %w", err)
	}
	// The server must not pick up the user's agentd settings (a token
	// would make it demand one) or their home's configuration.
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AGENTD_") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		e.environ = append(e.environ, kv)
	}
	e.environ = append(e.environ, "HOME="+home)
	return e, nil
}

// connectAll opens one connection per session and creates its session,
// o.DialConcurrency at a time. A session that fails is counted and left
// nil.
func connectAll(ctx context.Context, o Options, hc *http.Client, url string, co *clientOptions) []*client {
	return connectAllTo(ctx, o, hc, func(int) string { return url }, func(i int) string { return fmt.Sprintf("bench-%06d", i) }, co)
}

// connectAllTo is connectAll with session i named name(i) and its
// connection to url(i).
func connectAllTo(ctx context.Context, o Options, hc *http.Client, url, name func(i int) string, co *clientOptions) []*client {
	probs := co.faults
	clients := make([]*client, o.Sessions)
	sem := make(chan struct{}, o.DialConcurrency)
	var wg sync.WaitGroup
	for i := range clients {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return clients
		}
		wg.Go(func() {
			defer func() { <-sem }()
			sid := name(i)
			c, err := dial(ctx, hc, url(i), sid, co)
			if err != nil {
				probs.add("connect", fmt.Sprintf("session %s: %v", sid, err))
				return
			}
			cctx, cancel := context.WithTimeout(ctx, o.CommandTimeout)
			defer cancel()
			r, _, err := c.call(cctx, sid+".create", map[string]any{"type": "create_session", "sessionId": sid})
			switch {
			case err != nil:
				probs.add(failureKind(err, ctx.Err() != nil), fmt.Sprintf("session %s: %v", sid, err))
			case !r.Success:
				probs.add("create_session failed", fmt.Sprintf("create_session %s: %s", sid, r.Error))
			case jsonfield.String(r.Get("sessionId")) != sid:
				probs.add("create_session wrong id", fmt.Sprintf("create_session %s: answered sessionId %q", sid, jsonfield.String(r.Get("sessionId"))))
			default:
				clients[i] = c
				return
			}
			c.close()
		})
	}
	wg.Wait()
	return clients
}

// drive runs one session's rounds: a prompt, then o.GetStates get_states.
// A command without a response (lost connection, timeout, the end of ctx,
// the load phase) ends the session; a failed command is counted and the
// session goes on.
func drive(ctx context.Context, o Options, c *client, probs *tally) sessionResult {
	var res sessionResult
	res.prompts = make([]promptSample, 0, o.Rounds)
	res.gets = make([]time.Duration, 0, o.Rounds*o.GetStates)
	call := func(id string, cmd map[string]any) (piclient.Reply, time.Duration, bool) {
		cctx, cancel := context.WithTimeout(ctx, o.CommandTimeout)
		defer cancel()
		// Command ids are server-wide (they key duplicate replay), so
		// each carries its session's id.
		r, lat, err := c.call(cctx, c.sid+"."+id, cmd)
		if err != nil {
			res.failed++
			kind := failureKind(err, ctx.Err() != nil)
			msg := fmt.Sprintf("session %s: %v", c.sid, err)
			switch kind {
			case "command timeout":
				msg += fmt.Sprintf(" (each command waits at most %s)", o.CommandTimeout)
			case "load timeout":
				msg += fmt.Sprintf(" (the load phase's %s ran out)", o.LoadTimeout)
			}
			probs.add(kind, msg)
			return r, 0, false
		}
		res.done++
		if !r.Success {
			probs.add(fmt.Sprintf("%s failed", cmd["type"]), fmt.Sprintf("session %s: %s %s failed: %s", c.sid, cmd["type"], id, r.Error))
		}
		return r, lat, true
	}
	for round := range o.Rounds {
		tag := fmt.Sprintf("%s/%d", c.sid, round)
		r, lat, ok := call(fmt.Sprintf("p%d", round), map[string]any{"type": "prompt", "sessionId": c.sid,
			"message": "Please answer briefly. " + tagOpen + tag + tagClose})
		if !ok {
			return res
		}
		if r.Success {
			res.prompts = append(res.prompts, promptSample{tag: tag, latency: lat})
			// The response of a prompt comes after its agent run ended.
			if ends := c.agentEnds.Load(); ends != int64(round+1) {
				probs.add("prompt response without its agent_end", fmt.Sprintf("session %s: prompt %d answered after %d agent_end events, want %d", c.sid, round, ends, round+1))
			}
		}
		for g := range o.GetStates {
			r, lat, ok := call(fmt.Sprintf("g%d.%d", round, g), map[string]any{"type": "get_state", "sessionId": c.sid})
			if !ok {
				return res
			}
			if r.Success {
				res.gets = append(res.gets, lat)
			}
		}
	}
	return res
}

// failureKind names how a command got no response, for the report's
// error kinds; phaseOver says the phase's own time ran out, rather than
// the command's.
func failureKind(err error, phaseOver bool) string {
	var ce *piclient.CallError
	if !errors.As(err, &ce) {
		return "transport"
	}
	switch ce.Kind {
	case piclient.ErrSend:
		return "send failed"
	case piclient.ErrLost:
		if code := websocket.CloseStatus(err); code != -1 {
			// The server closed it on purpose: a too-slow client, the
			// send budget, shutdown. The samples carry the reason.
			return fmt.Sprintf("connection closed by the server (%d %s)", int(code), code)
		}
		return "connection lost"
	default:
		if phaseOver {
			return "load timeout"
		}
		return "command timeout"
	}
}

func countNil(clients []*client) int {
	n := 0
	for _, c := range clients {
		if c == nil {
			n++
		}
	}
	return n
}

func countFrames(clients []*client) (frames, bytes, events int64) {
	for _, c := range clients {
		if c != nil {
			frames += c.frames.Load()
			bytes += c.bytes.Load()
			events += c.events.Load()
		}
	}
	return frames, bytes, events
}

// percentile is the nearest-rank p-th percentile of ds (0 if empty). It
// sorts ds.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := (p*len(ds)+99)/100 - 1
	return ds[max(0, min(i, len(ds)-1))]
}

// tableRow is one measure of WriteTable: its name and its value in a
// report.
type tableRow struct {
	name string
	val  func(r Report) string
}

// WriteTable writes reports side by side: one row per measure, one column
// per run.
func WriteTable(w io.Writer, reps []Report) error {
	rows := []tableRow{
		{"sessions (N)", func(r Report) string { return strconv.Itoa(r.Sessions) }},
		{"rounds x tokens", func(r Report) string { return fmt.Sprintf("%d x %d", r.Rounds, r.Chunks) }},
		{"format, read delay, lifecycle", func(r Report) string {
			lc := "all"
			if r.OwnLifecycle {
				lc = "own"
			}
			return fmt.Sprintf("%s, %s, %s", r.StreamFormat, fmtDelay(r.ReadDelay), lc)
		}},
		{"setup (connect+create)", func(r Report) string { return fmtDur(r.Setup) }},
		{"commands answered/planned", func(r Report) string { return fmt.Sprintf("%d/%d", r.Commands, r.Planned) }},
		{"commands not run, late answers", func(r Report) string { return fmt.Sprintf("%d, %d", r.NotRun, r.LateResponses) }},
		{"duration", func(r Report) string { return fmtDur(r.Duration) }},
		{"commands/s", func(r Report) string { return fmt.Sprintf("%.0f", r.CommandsPerSec) }},
		{"events/s (all frames)", func(r Report) string { return fmt.Sprintf("%.0f", r.EventsPerSec) }},
		{"events/s (session events)", func(r Report) string { return fmt.Sprintf("%.0f", r.SessionEventsPerSec) }},
		{"frames (session events)", func(r Report) string { return fmt.Sprintf("%d (%d)", r.Frames, r.SessionEvents) }},
		{"bytes received", func(r Report) string { return fmtBytes(r.Bytes) }},
		{"answers checked", func(r Report) string { return strconv.FormatInt(r.AnswersChecked, 10) }},
		{"load CPU: server/bench/others", func(r Report) string { return r.LoadCPU.String() }},
		{"prompt latency p50/p99", func(r Report) string { return fmtDur(r.PromptP50) + " / " + fmtDur(r.PromptP99) }},
		{"mock time p50/p99", func(r Report) string { return fmtDur(r.MockP50) + " / " + fmtDur(r.MockP99) }},
		{"added latency p50/p99", func(r Report) string { return fmtDur(r.AddedP50) + " / " + fmtDur(r.AddedP99) }},
		{"get_state latency p50/p99", func(r Report) string { return fmtDur(r.GetStateP50) + " / " + fmtDur(r.GetStateP99) }},
		{"RSS baseline", func(r Report) string { return fmtBytes(r.RSSBaseline) }},
		{"RSS with N idle sessions", func(r Report) string { return fmtBytes(r.RSSSessions) }},
		{"RSS after the first session", func(r Report) string { return fmtBytes(r.RSSFirstSession) }},
		{"RSS per idle session, one conn", func(r Report) string {
			if r.IdleSessions == 0 {
				return "-"
			}
			return fmt.Sprintf("%s (x%d)", fmtBytes(r.RSSPerIdleSession), r.IdleSessions)
		}},
		{"RSS per session with its conn", func(r Report) string { return fmtBytes(r.RSSPerSession) }},
		{"RSS peak", func(r Report) string { return fmtBytes(r.RSSPeak) }},
		{"RSS right after load", func(r Report) string { return fmtBytes(r.RSSAfter) }},
		{"RSS after idle wait", func(r Report) string {
			if r.IdleWait <= 0 {
				return "-"
			}
			return fmtBytes(r.RSSIdle) + " (" + fmtDur(r.IdleWait) + ")"
		}},
		{"RssAnon baseline / after idle", func(r Report) string {
			if r.IdleWait <= 0 {
				return fmtBytes(r.RSSAnonBaseline) + " / -"
			}
			return fmtBytes(r.RSSAnonBaseline) + " / " + fmtBytes(r.RSSAnonIdle)
		}},
		{"live heap after idle (RSS/heap)", func(r Report) string {
			if r.HeapLiveIdle <= 0 {
				return "-"
			}
			return fmt.Sprintf("%s (%.2f)", fmtBytes(r.HeapLiveIdle), float64(r.RSSIdle)/float64(r.HeapLiveIdle))
		}},
		{"coder/websocket msgs/s", func(r Report) string {
			if r.Baseline == nil {
				return "-"
			}
			if r.Baseline.Errors > 0 {
				return fmt.Sprintf("%.0f (%d errors)", r.Baseline.MessagesPerSec, r.Baseline.Errors)
			}
			return fmt.Sprintf("%.0f", r.Baseline.MessagesPerSec)
		}},
		{"  (conns x msgs x bytes)", func(r Report) string {
			if r.Baseline == nil {
				return "-"
			}
			b := r.Baseline
			return fmt.Sprintf("%d x %d x %d", b.Connections, b.MessagesPerConn, b.Size)
		}},
		{"  CPU: server/bench/others", func(r Report) string {
			if r.Baseline == nil {
				return "-"
			}
			return r.Baseline.CPU.String()
		}},
		{"events/s ÷ library (all/session)", func(r Report) string {
			if r.Baseline == nil {
				return "-"
			}
			return fmt.Sprintf("%.3f / %.3f", r.BaselineFraction, r.SessionEventsFraction)
		}},
		{"face ÷ library, interleaved", func(r Report) string {
			if len(r.BaselineRounds) == 0 {
				return "-"
			}
			var b strings.Builder
			fmt.Fprintf(&b, "%.3f (", r.BaselineFraction)
			for i, br := range r.BaselineRounds {
				if i > 0 {
					b.WriteByte(' ')
				}
				fmt.Fprintf(&b, "%.3f", br.Fraction)
			}
			b.WriteString(")")
			return b.String()
		}},
	}
	if slices.ContainsFunc(reps, func(r Report) bool { return r.SessionWS != nil }) {
		rows = append(rows, watchRows...)
	}
	if slices.ContainsFunc(reps, func(r Report) bool { return r.REST != nil }) {
		rows = append(rows, restRows...)
	}
	if slices.ContainsFunc(reps, func(r Report) bool { return r.Cluster != nil }) {
		rows = append(append(rows, clusterRows...), lagRows()...)
	}
	if !slices.ContainsFunc(reps, func(r Report) bool { return r.REST == nil }) {
		rows = slices.DeleteFunc(rows, func(row tableRow) bool { return piOnlyRows[row.name] })
	}
	rows = append(rows, []tableRow{
		{"model requests", func(r Report) string { return strconv.Itoa(r.ModelRequests) }},
		{"shutdown (exit code, notices)", func(r Report) string {
			return fmt.Sprintf("%s (%d, %d)", fmtDur(r.Shutdown), r.ServerExit, r.ShutdownNotices)
		}},
		{"clients cut off (send budget)", func(r Report) string {
			if r.SendBudgetCuts < 0 {
				return "?"
			}
			return strconv.FormatInt(r.SendBudgetCuts, 10)
		}},
		{"server warnings", func(r Report) string { return strconv.Itoa(r.ServerWarnings) }},
		{"errors", func(r Report) string { return strconv.Itoa(r.Errors) }},
	}...)
	width := 0
	for _, row := range rows {
		width = max(width, len(row.name))
	}
	cols := make([][]string, len(reps))
	colw := make([]int, len(reps))
	for j, r := range reps {
		for _, row := range rows {
			v := row.val(r)
			cols[j] = append(cols[j], v)
			colw[j] = max(colw[j], len(v))
		}
	}
	var b strings.Builder
	for i, row := range rows {
		fmt.Fprintf(&b, "%-*s", width, row.name)
		for j := range reps {
			fmt.Fprintf(&b, "  %*s", colw[j], cols[j][i])
		}
		b.WriteByte('\n')
	}
	for _, r := range reps {
		for _, k := range slices.Sorted(maps.Keys(r.ErrorKinds)) {
			fmt.Fprintf(&b, "N=%d errors: %d %s\n", r.Sessions, r.ErrorKinds[k], k)
		}
		for _, s := range r.ErrorSamples {
			fmt.Fprintf(&b, "N=%d error: %s\n", r.Sessions, s)
		}
		for _, s := range r.ServerWarningSamples {
			fmt.Fprintf(&b, "N=%d server: %s\n", r.Sessions, s)
		}
		if bl := r.Baseline; bl != nil {
			for _, s := range bl.ErrorSamples {
				fmt.Fprintf(&b, "N=%d baseline error: %s\n", r.Sessions, s)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// piOnlyRows are the rows that say nothing of a run of the REST face,
// left out of a table of such runs only.
var piOnlyRows = map[string]bool{
	"format, read delay, lifecycle": true, "events/s (session events)": true, "frames (session events)": true,
	"get_state latency p50/p99": true, "coder/websocket msgs/s": true, "  (conns x msgs x bytes)": true,
	"  CPU: server/bench/others": true, "events/s ÷ library (all/session)": true,
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}

func fmtDelay(d time.Duration) string {
	if d == 0 {
		return "none"
	}
	return d.String()
}

func fmtBytes(n int64) string {
	switch {
	case n < 0:
		return "-" + fmtBytes(-n)
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
}
