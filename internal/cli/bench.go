package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentd-dev/agentd/internal/config"
	"github.com/agentd-dev/agentd/internal/loadgen"
)

// runBench measures `agentd serve`: for each N in --sessions it starts a
// server against an in-process mock model, drives N sessions over
// WebSocket and prints one column of figures per N. With --face
// session-ws it also watches them on the per-session WebSocket; with
// --face rest the sessions are conversations of the REST API, driven over
// HTTP and watched on their SSE event streams.
func (m *Main) runBench(ctx context.Context, cfg *config.Config, fs *flag.FlagSet, args []string) error {
	if len(args) > 0 && args[0] == loadgen.BaselineServerCommand {
		// Hidden: --baseline runs this as its server.
		return loadgen.ServeBaseline(ctx, m.stderr)
	}
	sessions := fs.String("sessions", "1,100,1000", "comma-separated session counts N to run in turn, one connection per session")
	rounds := fs.Int("rounds", 5, "prompts per session")
	chunks := fs.Int("chunks", 20, "text deltas (tokens of 4 bytes) the mock model streams per answer")
	fs.IntVar(chunks, "tokens", 20, "answer length in tokens: the same as --chunks")
	format := fs.String("stream-format", "full", "the server's message_update format: full (pi's, the whole message so far in every update) or delta")
	readDelay := fs.Duration("read-delay", 0, "pause of every client after each frame it reads (e.g. 1ms): clients slower than the model, whose queues grow in the server (with --face rest: of every SSE watcher, not the drivers)")
	idleWait := fs.Duration("idle-wait", 0, "after the load, keep every connection open and idle this long (e.g. 60s) and report the server's RSS again")
	baseline := fs.Bool("baseline", false, "measure coder/websocket's own rate with as many connections, messages and bytes per message as the face's streams, in rounds alternating with the load (--baseline-rounds), and report the face's events/s as a fraction of it (the median of the rounds)")
	baselineRounds := fs.Int("baseline-rounds", 3, "with --baseline: rounds of the load and the library's baseline, alternating which goes first")
	idleSessions := fs.Int("idle-sessions", 0, "before the N sessions, create this many more on the bench's own connection and report the RSS per such idle session (e.g. 40)")
	settle := fs.Duration("settle", time.Second, "how long the server's RSS must hold still before each idle reading (before any connection, after the first session, the idle sessions and the N); 0 reads at once")
	gets := fs.Int("gets", 1, "get_state commands per session after each prompt (0 for none; with --face session-ws the default is 0)")
	jsonOut := fs.Bool("json", false, "print the reports as JSON instead of a table")
	binary := fs.String("binary", "", "agentd binary to run as the server (default: this executable)")
	serverLog := fs.Bool("server-log", false, "copy the server's stderr to stderr")
	ownLifecycle := fs.Bool("own-lifecycle", false, "connect with ?lifecycle=own: clients get their own commands' lifecycle events only, not every client's (the default with --face session-ws)")
	serverFlags := fs.String("server-flags", "", "extra flags for agentd serve, space-separated, after the bench's own (a repeated flag overrides)")
	face := fs.String("face", "pi", "what to measure: pi (the pi-server WebSocket the sessions are driven over), session-ws (that, and --watchers connections to /api/v1/ws/sessions/{id} watching the busy sessions) or rest (N conversations over /api/v2, each driven with steps and streamed to its driver's SSE stream and --watchers more)")
	watchers := fs.Int("watchers", 0, "with --face session-ws: watcher connections, spread evenly over the N sessions (default 10 per session); with --face rest: SSE clients per conversation besides its driver (default 10)")
	planSteps := fs.Int("plan-steps", 0, "the mock works through a plan of this many steps in every run, with a todo tool call per step, so a run has this many turns plus 2 (default 3 with --face session-ws, else 0: one turn)")
	timeout := fs.Duration("command-timeout", 2*time.Minute, "longest wait for one command's response")
	lagSessions := fs.Int("lag-sessions", 0, "with --cluster-nodes, how many sessions get watchers on every face (pi-server, REST SSE, session WebSocket), on their node and on another, whose lag behind the first client to see each event the report gives (default 10; -1 none)")
	clusterNodes := fs.Int("cluster-nodes", 0, "run this many agentd serve nodes as a cluster (the first with embedded NATS, all with --cluster-spread), connect the sessions to them round-robin, and after the load kill -9 one and time its sessions' takeover (e.g. 3; --face pi only)")
	loadTimeout := fs.Duration("load-timeout", 10*time.Minute, "longest load phase per N: commands still waiting then are errors (load timeout), the rest are reported as not run")
	if err := parseFlagsOnly(cfg, fs, args); err != nil {
		return err
	}
	ns, err := parseSessions(*sessions)
	if err != nil {
		return usageError{err}
	}
	if *rounds < 1 || *chunks < 1 || *gets < 0 {
		return usageError{fmt.Errorf("--rounds and --chunks (--tokens) must be at least 1, --gets at least 0")}
	}
	if *format != "full" && *format != "delta" {
		return usageError{fmt.Errorf("--stream-format %q: want full or delta", *format)}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch *face {
	case "pi":
		if set["watchers"] {
			return usageError{fmt.Errorf("--watchers: only with --face session-ws or rest")}
		}
	case "rest":
		// The drivers speak REST: the pi-server flags have nothing to do.
		for _, f := range []string{"gets", "own-lifecycle"} {
			if set[f] {
				return usageError{fmt.Errorf("--%s: not with --face rest", f)}
			}
		}
		if !set["watchers"] {
			*watchers = 10
		}
	case "session-ws":
		// The watchers are what is measured: the drivers send prompts
		// back to back and get only their own commands' lifecycle
		// events, unless told otherwise.
		if !set["plan-steps"] {
			*planSteps = 3
		}
		if !set["gets"] {
			*gets = 0
		}
		if !set["own-lifecycle"] {
			*ownLifecycle = true
		}
	default:
		return usageError{fmt.Errorf("--face %q: want pi, session-ws or rest", *face)}
	}
	if *watchers < 0 || *planSteps < 0 {
		return usageError{fmt.Errorf("--watchers and --plan-steps must not be negative")}
	}
	if *face == "session-ws" && *watchers > 0 && *watchers < slices.Max(ns) {
		return usageError{fmt.Errorf("--watchers %d: want at least one per session (--sessions %s)", *watchers, *sessions)}
	}
	if *readDelay < 0 || *idleWait < 0 || *settle < 0 || *idleSessions < 0 || *timeout <= 0 || *loadTimeout <= 0 {
		return usageError{fmt.Errorf("--read-delay, --idle-wait, --settle and --idle-sessions must not be negative, --command-timeout and --load-timeout must be positive")}
	}
	if *baselineRounds < 1 || (set["baseline-rounds"] && !*baseline) {
		return usageError{fmt.Errorf("--baseline-rounds %d: want at least 1, with --baseline", *baselineRounds)}
	}
	if *baseline && *clusterNodes > 1 {
		return usageError{fmt.Errorf("--baseline: not with --cluster-nodes")}
	}
	if *clusterNodes < 0 || *clusterNodes == 1 || (*clusterNodes > 1 && *face != "pi") {
		return usageError{fmt.Errorf("--cluster-nodes %d: want 2 or more, with --face pi", *clusterNodes)}
	}
	st := *settle
	if st == 0 {
		st = -1 // Options: 0 is the default, negative is none
	}
	log := m.logger(cfg)
	// 1,000 sessions are 1,000 sockets here and as many in the server.
	if lim, err := loadgen.RaiseOpenFileLimit(); err != nil {
		log.Warn("open-file limit", "err", err)
	} else if need := uint64(2*(slices.Max(ns)+streamsFor(*face, *watchers, slices.Max(ns))) + *idleSessions + 100); lim < need {
		log.Warn("open-file limit may be too low", "limit", lim, "need", need)
	}
	g := *gets
	if g == 0 {
		g = -1 // Options: 0 is the default (1), negative is none
	}
	var (
		reps   []loadgen.Report
		failed int
		runErr error // a run that could not be set up; the earlier ones are still printed
	)
	for _, n := range ns {
		o := loadgen.Options{Binary: *binary, Sessions: n, Rounds: *rounds, Chunks: *chunks, GetStates: g,
			StreamFormat: *format, ReadDelay: *readDelay, IdleWait: *idleWait, Settle: st, IdleSessions: *idleSessions,
			CommandTimeout: *timeout, LoadTimeout: *loadTimeout, Logger: log, ServerArgs: strings.Fields(*serverFlags), OwnLifecycle: *ownLifecycle,
			Watchers: watchersFor(*face, *watchers, n), PlanSteps: *planSteps, ClusterNodes: *clusterNodes, LagSessions: *lagSessions}
		if *face == "rest" {
			o.REST, o.SSEWatchers = true, *watchers
		}
		if *serverLog {
			o.ServerLog = m.stderr
		}
		switch {
		case o.REST:
			fmt.Fprintf(m.stderr, "agentd bench: N=%d conversations, %d SSE watchers each ...\n", n, o.SSEWatchers)
		case o.Watchers > 0:
			fmt.Fprintf(m.stderr, "agentd bench: N=%d, %d session-ws watchers ...\n", n, o.Watchers)
		default:
			fmt.Fprintf(m.stderr, "agentd bench: N=%d ...\n", n)
		}
		var rep loadgen.Report
		if *baseline {
			rep, err = loadgen.RunInterleaved(ctx, o, *baselineRounds)
		} else {
			rep, err = loadgen.Run(ctx, o)
		}
		if err != nil {
			runErr = fmt.Errorf("with %d sessions: %w", n, err)
			break
		}
		fmt.Fprintf(m.stderr, "agentd bench: N=%d done: %d of %d commands in %s, %d errors\n", n, rep.Commands, rep.Planned, rep.Duration.Round(time.Millisecond), rep.Errors)
		reps = append(reps, rep)
		failed += rep.Errors
	}
	switch {
	case len(reps) == 0:
	case *jsonOut:
		b, err := json.MarshalIndent(reps, "", "  ")
		if err != nil {
			return fmt.Errorf("encode reports: %w", err)
		}
		if _, err := fmt.Fprintf(m.stdout, "%s\n", b); err != nil {
			return fmt.Errorf("write reports: %w", err)
		}
	default:
		if err := loadgen.WriteTable(m.stdout, reps); err != nil {
			return fmt.Errorf("write reports: %w", err)
		}
	}
	if runErr != nil {
		return runErr
	}
	if failed > 0 {
		return fmt.Errorf("%d errors under load (see the report)", failed)
	}
	return nil
}

// watchersFor is the watchers of a run with n sessions: none unless the
// face is session-ws, w if given, else 10 per session.
func watchersFor(face string, w, n int) int {
	switch {
	case face != "session-ws":
		return 0
	case w > 0:
		return w
	default:
		return 10 * n
	}
}

// streamsFor is the connections of a run with n sessions beyond one per
// session: its watchers, or with --face rest its SSE watchers (w per
// conversation).
func streamsFor(face string, w, n int) int {
	if face == "rest" {
		return w * n
	}
	return watchersFor(face, w, n)
}

// parseSessions parses "1,100,1000".
func parseSessions(s string) ([]int, error) {
	var ns []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--sessions %q: want positive counts separated by commas", s)
		}
		ns = append(ns, n)
	}
	return ns, nil
}
