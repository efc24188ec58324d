// Package loadgen measures `agentd serve`: it starts the server as a child
// process against an in-process mock model, drives N sessions over real
// WebSocket connections, and reports throughput, latency (raw, and added
// over the model's own time) and memory per session. `agentd bench` and
// the package's Go benchmark use it.
package loadgen

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"
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
	return runWS(ctx, o)
}
