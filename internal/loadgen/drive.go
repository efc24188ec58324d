package loadgen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/agentd-dev/agentd/internal/jsonfield"
	"github.com/agentd-dev/agentd/internal/piclient"
)

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
