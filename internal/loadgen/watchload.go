package loadgen

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// WatchReport is what the watchers on the per-session WebSocket
// (Options.Watchers) measured. Durations are in nanoseconds in JSON,
// sizes in bytes.
type WatchReport struct {
	// Watchers is how many were asked for, spread evenly over the
	// sessions; Failed how many of them could not connect or subscribe.
	Watchers int `json:"watchers"`
	Failed   int `json:"failed"`
	// ProgressInterval is the server's --ws-progress-interval, PlanSteps
	// the steps of the plan the mock works through in each run.
	ProgressInterval time.Duration `json:"progress_interval_ns"`
	PlanSteps        int           `json:"plan_steps"`
	// Setup is connecting and subscribing every watcher.
	Setup time.Duration `json:"setup_ns"`
	// RSSWatchers is the server's RSS once it held still with every
	// watcher subscribed and idle; RSSPerWatcher the growth from the
	// reading before them (the sessions, idle) per watcher connected.
	RSSWatchers   int64 `json:"rss_watchers_bytes"`
	RSSPerWatcher int64 `json:"rss_per_watcher_bytes"`

	// Messages counts what all watchers together received during the
	// load phase, by type (progress_update, status_change, completed,
	// error, ping, other), and Bytes their payload; MessagesPerSec is
	// their sum per second of the load phase, MessagesPerSecPerWatcher
	// that per watcher connected.
	Messages                 map[string]int64 `json:"messages"`
	Bytes                    int64            `json:"bytes"`
	MessagesPerSec           float64          `json:"messages_per_sec"`
	MessagesPerSecPerWatcher float64          `json:"messages_per_sec_per_watcher"`

	// ProgressPerSecPerSession is a session's live progress_updates per
	// second of the load phase (the most any of its watchers got), the
	// mean over sessions; ProgressPerSecMax is the busiest session's.
	// ProgressPerSessionMax is the busiest session's count, and
	// ProgressAllowed the most a session may have: one at once, then one
	// per interval (so over a load phase of a few intervals the rates
	// may exceed 1/ProgressInterval).
	ProgressPerSecPerSession float64 `json:"progress_per_sec_per_session"`
	ProgressPerSecMax        float64 `json:"progress_per_sec_max"`
	ProgressPerSessionMax    int64   `json:"progress_per_session_max"`
	ProgressAllowed          int64   `json:"progress_allowed"`
	// ProgressMinGap is the least time between two live progress_updates
	// of a watcher, by their timestamps (stamped when the server builds
	// one, which may wait behind the session's events, so a single gap
	// can fall a little short of the interval). ProgressOverRate counts
	// the sessions with more than ProgressAllowed in the load phase, and
	// the watchers that got more over the whole run than the span of
	// their timestamps allows at one per interval, with half an
	// interval's slack: errors.
	ProgressMinGap   time.Duration `json:"progress_min_gap_ns"`
	ProgressOverRate int           `json:"progress_over_rate"`

	// CompletedExpected is, summed over the watchers, how many runs
	// their session ended (the agent_end events its driver got);
	// CompletedMissing how many of those a watcher never got a completed
	// for (errors: a completed is never dropped), CompletedDuplicate how
	// many it got twice.
	CompletedExpected  int64 `json:"completed_expected"`
	CompletedMissing   int64 `json:"completed_missing"`
	CompletedDuplicate int64 `json:"completed_duplicate"`

	// Pings counts the JSON pings the watchers got, each answered.
	Pings int64 `json:"pings"`
	// EarlyCloses counts the watchers whose connection ended before the
	// server was stopped (errors); CloseCodes how every connection ended
	// once it was, by the server's close code ("none": cut without one).
	EarlyCloses int            `json:"early_closes"`
	CloseCodes  map[string]int `json:"close_codes,omitempty"`
}

// watchPath is the per-session WebSocket's path; the session id follows.
const watchPath = "/api/v1/ws/sessions/"

// watchAll opens o.Watchers watchers on the sessions that were created,
// spread evenly (watcher i watches the i-th session modulo their number),
// o.DialConcurrency at a time. A watcher that fails is counted and left
// nil.
func watchAll(ctx context.Context, o Options, hc *http.Client, addr string, clients []*client, wo *watchOptions) []*watcher {
	var sids []string
	for _, c := range clients {
		if c != nil {
			sids = append(sids, c.sid)
		}
	}
	ws := make([]*watcher, o.Watchers)
	if len(sids) == 0 {
		wo.faults.add("session-ws connect", "no session to watch: every one failed to be created")
		return ws
	}
	sem := make(chan struct{}, o.DialConcurrency)
	var wg sync.WaitGroup
	for i := range ws {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ws
		}
		wg.Go(func() {
			defer func() { <-sem }()
			sid := sids[i%len(sids)]
			w, err := dialWatcher(ctx, hc, "ws://"+addr+watchPath+sid, sid, wo)
			if err != nil {
				wo.faults.add("session-ws connect", fmt.Sprintf("watcher %d of %s: %v", i, sid, err))
				return
			}
			ws[i] = w
		})
	}
	wg.Wait()
	return ws
}

// watchMark is the watchers' counters at one moment.
type watchMark struct {
	counts   [numKinds]int64 // summed over the watchers
	bytes    int64
	progress []int64 // progress_updates, by watcher
}

func markWatchers(ws []*watcher) watchMark {
	m := watchMark{progress: make([]int64, len(ws))}
	for i, w := range ws {
		if w == nil {
			continue
		}
		for k := range m.counts {
			m.counts[k] += w.counts[k].Load()
		}
		m.bytes += w.bytes.Load()
		m.progress[i] = w.counts[kindProgress].Load()
	}
	return m
}

// awaitCompleted waits until every watcher has a completed for each run
// its session ended (runs(sid)), or for wait: a completed is sent when the
// run ends, so it may come a moment after the prompt's response.
func awaitCompleted(ctx context.Context, ws []*watcher, runs func(sid string) int64, wait time.Duration) {
	pollUntil(ctx, wait, func() bool {
		for _, w := range ws {
			if w != nil && int64(len(w.completedSeqs())) < runs(w.sid) {
				return false
			}
		}
		return true
	})
}

// awaitClosed waits, up to wait, for the watchers' readers to see the
// end of their connections (the server has exited).
func awaitClosed(ws []*watcher, wait time.Duration) {
	giveUp := time.After(wait)
	for _, w := range ws {
		if w == nil {
			continue
		}
		select {
		case <-w.readerDone:
		case <-giveUp:
			return
		}
	}
}

// watchTotals fills in what the watchers measured over the load phase,
// which took so long, from their counters at its start (m0) and end (m1)
// and what they hold now. runs(sid) is how many runs the session ended.
func (r *WatchReport) watchTotals(ws []*watcher, m0, m1 watchMark, took time.Duration, runs func(sid string) int64, probs *tally) {
	r.Messages = map[string]int64{}
	var total int64
	for k, n := range kindNames {
		r.Messages[n] = m1.counts[k] - m0.counts[k]
		total += m1.counts[k] - m0.counts[k]
	}
	r.Bytes = m1.bytes - m0.bytes
	connected := int64(len(ws)) - int64(countNilWatchers(ws))
	secs := took.Seconds()
	if secs > 0 {
		r.MessagesPerSec = float64(total) / secs
		if connected > 0 {
			r.MessagesPerSecPerWatcher = r.MessagesPerSec / float64(connected)
		}
	}

	// The load phase's progress_updates of a session are the most any
	// of its watchers got (one that fell behind had some replaced).
	perSession := map[string]int64{}
	for i, w := range ws {
		if w != nil {
			perSession[w.sid] = max(perSession[w.sid], m1.progress[i]-m0.progress[i])
		}
	}
	// Each was published after the load began (its sessions were idle
	// before) and received before it ended, at least an interval apart:
	// no session can have more than this.
	r.ProgressAllowed = int64(took/r.ProgressInterval) + 1
	var sum int64
	for _, sid := range slices.Sorted(maps.Keys(perSession)) {
		n := perSession[sid]
		sum += n
		r.ProgressPerSessionMax = max(r.ProgressPerSessionMax, n)
		if n > r.ProgressAllowed {
			r.ProgressOverRate++
			probs.add("session-ws progress over the rate", fmt.Sprintf("session %s: %d progress_updates in the load phase's %s; want at most %d, one per %s",
				sid, n, took.Round(time.Millisecond), r.ProgressAllowed, r.ProgressInterval))
		}
	}
	if secs > 0 && len(perSession) > 0 {
		r.ProgressPerSecMax = float64(r.ProgressPerSessionMax) / secs
		r.ProgressPerSecPerSession = float64(sum) / float64(len(perSession)) / secs
	}

	// Completed: one per run of the session, each once.
	for _, w := range ws {
		if w == nil {
			continue
		}
		want := runs(w.sid)
		seqs := w.completedSeqs()
		distinct := len(slices.Compact(slices.Sorted(slices.Values(seqs))))
		r.CompletedExpected += want
		if dup := len(seqs) - distinct; dup > 0 {
			r.CompletedDuplicate += int64(dup)
			probs.add("session-ws completed twice", fmt.Sprintf("watcher of %s: %d completed messages, %d of them repeat a seq", w.sid, len(seqs), dup))
		}
		if miss := want - int64(distinct); miss > 0 {
			r.CompletedMissing += miss
			probs.add("session-ws completed missing", fmt.Sprintf("watcher of %s: %d completed for %d runs", w.sid, distinct, want))
		}
	}
}

// watchEnd fills in, once the server has stopped, what the watchers saw
// over the whole run: the pings, the gaps between progress_updates (a
// session's last one may come an interval after its run), and how their
// connections ended (the early ends were counted as faults when they
// happened).
func (r *WatchReport) watchEnd(ws []*watcher, probs *tally) {
	r.CloseCodes = map[string]int{}
	first := true
	for _, w := range ws {
		if w == nil {
			continue
		}
		r.Pings += w.counts[kindPing].Load()
		n, span, gap := w.progressStats()
		if n >= 2 && (first || gap < r.ProgressMinGap) {
			r.ProgressMinGap, first = gap, false
		}
		// n updates at least an interval apart span n-1 intervals; half
		// an interval of slack absorbs the stamps' jitter, not one more.
		if n >= 2 && time.Duration(n-1)*r.ProgressInterval > span+r.ProgressInterval/2 {
			r.ProgressOverRate++
			probs.add("session-ws progress over the rate", fmt.Sprintf("watcher of %s: %d progress_updates within %s, the least gap %s; want at most one per %s",
				w.sid, n, span, gap, r.ProgressInterval))
		}
		code, early, closed := w.closeState()
		switch {
		case !closed:
			r.CloseCodes["open"]++
		case code == -1:
			r.CloseCodes["none"]++
		default:
			r.CloseCodes[strconv.Itoa(code)]++
		}
		if closed && early {
			r.EarlyCloses++
		}
	}
}

func countNilWatchers(ws []*watcher) int {
	n := 0
	for _, w := range ws {
		if w == nil {
			n++
		}
	}
	return n
}

// progressIntervalOf is the --ws-progress-interval among serve's flags
// args (the last, as the flag package takes it), or the server's default.
func progressIntervalOf(args []string) (time.Duration, error) {
	d := time.Second
	for i := 0; i < len(args); i++ {
		name, val, hasVal := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if name != "ws-progress-interval" || !strings.HasPrefix(args[i], "-") {
			continue
		}
		if !hasVal {
			if i+1 == len(args) {
				return 0, fmt.Errorf("server flag --ws-progress-interval: no value")
			}
			i++
			val = args[i]
		}
		v, err := time.ParseDuration(val)
		if err != nil {
			return 0, fmt.Errorf("server flag --ws-progress-interval %q: %w", val, err)
		}
		d = v
	}
	return d, nil
}

// watchRows are WriteTable's rows for the watchers, "-" in a report
// without them.
var watchRows = []tableRow{
	{"session-ws watchers (failed)", watchVal(func(w *WatchReport, r Report) string {
		return fmt.Sprintf("%d (%d), %.4g per session", w.Watchers, w.Failed, float64(w.Watchers)/float64(r.Sessions))
	})},
	{"  progress interval, plan steps", watchVal(func(w *WatchReport, _ Report) string {
		return fmt.Sprintf("%s, %d", w.ProgressInterval, w.PlanSteps)
	})},
	{"  setup (connect+subscribe)", watchVal(func(w *WatchReport, _ Report) string { return fmtDur(w.Setup) })},
	{"  RSS with watchers idle", watchVal(func(w *WatchReport, _ Report) string { return fmtBytes(w.RSSWatchers) })},
	{"  RSS per watcher connection", watchVal(func(w *WatchReport, _ Report) string { return fmtBytes(w.RSSPerWatcher) })},
	{"  messages/s: all, per watcher", watchVal(func(w *WatchReport, _ Report) string {
		return fmt.Sprintf("%.0f, %.2f", w.MessagesPerSec, w.MessagesPerSecPerWatcher)
	})},
	{"  progress/status/completed/other", watchVal(func(w *WatchReport, _ Report) string {
		m := w.Messages
		return fmt.Sprintf("%d / %d / %d / %d", m["progress_update"], m["status_change"], m["completed"], m["error"]+m["ping"]+m["other"])
	})},
	{"  bytes received", watchVal(func(w *WatchReport, _ Report) string { return fmtBytes(w.Bytes) })},
	{"  progress/s per session: mean, max", watchVal(func(w *WatchReport, _ Report) string {
		return fmt.Sprintf("%.2f, %.2f (1/interval %.2f)", w.ProgressPerSecPerSession, w.ProgressPerSecMax, 1/w.ProgressInterval.Seconds())
	})},
	{"  progress per session: max, allowed", watchVal(func(w *WatchReport, _ Report) string {
		return fmt.Sprintf("%d, %d", w.ProgressPerSessionMax, w.ProgressAllowed)
	})},
	{"  progress least gap, over rate", watchVal(func(w *WatchReport, _ Report) string {
		return fmt.Sprintf("%s, %d", fmtDur(w.ProgressMinGap), w.ProgressOverRate)
	})},
	{"  completed: expected, missing, twice", watchVal(func(w *WatchReport, _ Report) string {
		return fmt.Sprintf("%d, %d, %d", w.CompletedExpected, w.CompletedMissing, w.CompletedDuplicate)
	})},
	{"  pings answered", watchVal(func(w *WatchReport, _ Report) string { return strconv.FormatInt(w.Pings, 10) })},
	{"  closed early; at shutdown", watchVal(func(w *WatchReport, _ Report) string {
		var codes []string
		for _, c := range slices.Sorted(maps.Keys(w.CloseCodes)) {
			codes = append(codes, fmt.Sprintf("%s x%d", c, w.CloseCodes[c]))
		}
		return fmt.Sprintf("%d; %s", w.EarlyCloses, strings.Join(codes, ", "))
	})},
}

func watchVal(f func(w *WatchReport, r Report) string) func(Report) string {
	return func(r Report) string {
		if r.SessionWS == nil {
			return "-"
		}
		return f(r.SessionWS, r)
	}
}
