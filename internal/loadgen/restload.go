package loadgen

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// RESTReport is what the event streams of the conversation API measured
// (Options.REST). Durations are in nanoseconds in JSON, sizes in bytes.
//
// Each conversation has its driver's stream (the attachment PUT created,
// which its steps name, as gptme-webui does) and WatchersPerConversation
// watchers, each an EventSource of its own (GET .../events without a
// session_id). The figures per client are the watchers'; every stream is
// checked.
type RESTReport struct {
	WatchersPerConversation int `json:"watchers_per_conversation"`
	// ReadDelay is the watchers' pause after each event (Options.ReadDelay).
	ReadDelay time.Duration `json:"read_delay_ns"`
	// Watchers is how many were asked for in all, Failed how many could
	// not connect (no connected event).
	Watchers int `json:"watchers"`
	Failed   int `json:"failed"`
	// Setup is opening every watcher's stream up to its connected event.
	Setup time.Duration `json:"setup_ns"`
	// RSSWatchers is the server's RSS once it held still with every
	// watcher attached and idle; RSSPerWatcher the growth from the
	// reading before them (the conversations and their drivers' streams,
	// idle) per watcher attached.
	RSSWatchers   int64 `json:"rss_watchers_bytes"`
	RSSPerWatcher int64 `json:"rss_per_watcher_bytes"`

	// Span is the watchers' load phase: from the first step until every
	// watcher had the run_ended of every run of its conversation (or the
	// wait for them gave up).
	Span time.Duration `json:"span_ns"`
	// Events counts what the watchers received over the span, by type
	// (tool_* as "tool", interrupted with error), and Bytes the bytes of
	// their streams (the response bodies, without HTTP's chunk framing);
	// EventsPerSec is their sum per second of the span,
	// EventsPerSecPerWatcher that per watcher attached.
	Events                 map[string]int64 `json:"events"`
	Bytes                  int64            `json:"bytes"`
	EventsPerSec           float64          `json:"events_per_sec"`
	EventsPerSecPerWatcher float64          `json:"events_per_sec_per_watcher"`
	// Tokens is how many tokens the mock streamed (its requests times
	// the tokens of an answer). BytesPerToken is the bytes on one
	// client's wire per token its conversation streamed: the watchers'
	// bytes over the sum of their conversations' tokens. ProgressPerToken
	// is generation_progress events per such token: 1 when every client
	// keeps up, below 1 when the server joined a lagging client's tokens.
	Tokens           int64   `json:"tokens"`
	BytesPerToken    float64 `json:"bytes_per_token"`
	ProgressPerToken float64 `json:"progress_per_token"`
	// WireBytes is what the watchers' TCP connections read over the
	// span: the streams with HTTP's chunk framing (and the headers of
	// any response in the span, normally none); WireBytesPerToken is
	// BytesPerToken on that count.
	WireBytes         int64   `json:"wire_bytes"`
	WireBytesPerToken float64 `json:"wire_bytes_per_token"`
	// AnswersChecked counts the assistant messages whose streamed tokens
	// a client joined and found to be the mock's whole answer, over every
	// stream (a wrong one is an error).
	AnswersChecked int64 `json:"answers_checked"`

	// RunsExpected is, summed over every stream, how many runs its
	// conversation's driver saw end; RunEndsMissing how many run_ended
	// events a stream never got.
	RunsExpected   int64 `json:"runs_expected"`
	RunEndsMissing int64 `json:"run_ends_missing"`
	// Missing counts, over every stream, the events (by seq and type;
	// generation_progress aside, which the text check covers) that
	// another stream of its conversation got after this one attached and
	// this one did not; Duplicated the events a stream got twice,
	// OutOfOrder those that came after a later seq. All are errors.
	Missing    int64 `json:"missing"`
	Duplicated int64 `json:"duplicated"`
	OutOfOrder int64 `json:"out_of_order"`

	// EarlyEnds counts the streams that ended before the server was
	// stopped (errors); Ends how every stream ended once it was: "eof"
	// (the server ended the response), "cut", "error", "open".
	EarlyEnds int            `json:"early_ends"`
	Ends      map[string]int `json:"ends,omitempty"`
}

// convPath is the conversation API's path of a conversation.
const convPath = "/api/v2/conversations/"

// restConv is one conversation of the load and its driver.
type restConv struct {
	id       string
	attachID string // the attachment PUT created, which steps name
	driver   *sseStream
	watchers []*sseStream // nil where one failed
}

// countingDial dials TCP and adds every byte read on the connection to n.
func countingDial(n *atomic.Int64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, n}, nil
	}
}

// countingConn counts the bytes read through it.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	k, err := c.Conn.Read(p)
	c.n.Add(int64(k))
	return k, err
}

// restCall sends a JSON body to url and reads the JSON answer; a status
// other than 200 is an error carrying the server's message.
func restCall(ctx context.Context, hc *http.Client, method, url string, body any, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode %s %s: %w", method, url, err)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("%s %s: HTTP %d: %s", method, url, resp.StatusCode, prefix(bytes.TrimSpace(out), 300))
	}
	return out, nil
}

// putConversation creates conversation id and returns the attachment
// (gptme's session) the answer names.
func putConversation(ctx context.Context, hc *http.Client, api, id string, timeout time.Duration) (string, error) {
	out, err := restCall(ctx, hc, http.MethodPut, api+id, map[string]any{}, timeout)
	if err != nil {
		return "", err
	}
	var ans struct {
		ConversationID string `json:"conversation_id"`
		SessionID      string `json:"session_id"`
	}
	if err := json.Unmarshal(out, &ans); err != nil || ans.SessionID == "" || ans.ConversationID != id {
		return "", fmt.Errorf("PUT %s: answer %s: want the conversation_id and a session_id", id, prefix(out, 200))
	}
	return ans.SessionID, nil
}

// createConversations creates the o.Sessions conversations, each with its
// driver's stream, o.DialConcurrency at a time. One that fails is counted
// and left nil.
func createConversations(ctx context.Context, o Options, hc *http.Client, api string, so *sseOptions, probs *tally) []*restConv {
	convs := make([]*restConv, o.Sessions)
	sem := make(chan struct{}, o.DialConcurrency)
	var wg sync.WaitGroup
	for i := range convs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return convs
		}
		wg.Go(func() {
			defer func() { <-sem }()
			id := fmt.Sprintf("bench-%06d", i)
			att, err := putConversation(ctx, hc, api, id, o.CommandTimeout)
			if err != nil {
				probs.add("rest create", fmt.Sprintf("conversation %s: %v", id, err))
				return
			}
			d, err := openSSE(ctx, hc, api+id+"/events?session_id="+att, id, "driver", o.Rounds+1, so)
			if err != nil {
				probs.add("sse connect", fmt.Sprintf("driver of %s: %v", id, err))
				return
			}
			if d.attachID != att {
				probs.add("sse wrong session", fmt.Sprintf("driver of %s: connected names session %q, want %q", id, d.attachID, att))
			}
			convs[i] = &restConv{id: id, attachID: att, driver: d}
		})
	}
	wg.Wait()
	return convs
}

// attachWatchers opens o.SSEWatchers streams on each conversation,
// o.DialConcurrency at a time, and returns those that connected (each is
// also in its conversation's watchers).
func attachWatchers(ctx context.Context, o Options, hc *http.Client, api string, convs []*restConv, so *sseOptions, probs *tally) []*sseStream {
	for _, c := range convs {
		if c != nil {
			c.watchers = make([]*sseStream, o.SSEWatchers)
		}
	}
	sem := make(chan struct{}, o.DialConcurrency)
	var wg sync.WaitGroup
	for j := range o.SSEWatchers {
		for _, c := range convs {
			if c == nil {
				continue // its creation failed, and was counted
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				wg.Wait()
				return collectWatchers(convs)
			}
			wg.Go(func() {
				defer func() { <-sem }()
				s, err := openSSE(ctx, hc, api+c.id+"/events", c.id, fmt.Sprintf("watcher %d", j), 0, so)
				if err != nil {
					probs.add("sse connect", fmt.Sprintf("watcher %d of %s: %v", j, c.id, err))
					return
				}
				c.watchers[j] = s
			})
		}
	}
	wg.Wait()
	return collectWatchers(convs)
}

func collectWatchers(convs []*restConv) []*sseStream {
	var out []*sseStream
	for _, c := range convs {
		if c == nil {
			continue
		}
		for _, w := range c.watchers {
			if w != nil {
				out = append(out, w)
			}
		}
	}
	return out
}

func drivers(convs []*restConv) []*sseStream {
	var out []*sseStream
	for _, c := range convs {
		if c != nil {
			out = append(out, c.driver)
		}
	}
	return out
}

// driveConversation runs one conversation's rounds: a user message, then
// a step that confirms its tool calls, waited for by its run_ended on the
// driver's stream. A round that fails ends the conversation's load.
func driveConversation(ctx context.Context, o Options, hc *http.Client, api string, c *restConv, probs *tally) sessionResult {
	var res sessionResult
	fail := func(round int, err error) sessionResult {
		res.failed++
		kind := "rest request failed"
		if ctx.Err() != nil {
			kind = "load timeout"
		}
		probs.add(kind, fmt.Sprintf("conversation %s round %d: %v", c.id, round, err))
		return res
	}
	for round := range o.Rounds {
		tag := fmt.Sprintf("%s/%d", c.id, round)
		start := time.Now()
		msg := map[string]any{"role": "user", "content": "Please answer briefly. " + tagOpen + tag + tagClose}
		if _, err := restCall(ctx, hc, http.MethodPost, api+c.id, msg, o.CommandTimeout); err != nil {
			return fail(round, err)
		}
		step := map[string]any{"session_id": c.attachID, "auto_confirm": true}
		if _, err := restCall(ctx, hc, http.MethodPost, api+c.id+"/step", step, o.CommandTimeout); err != nil {
			return fail(round, err)
		}
		t := time.NewTimer(o.CommandTimeout)
		select {
		case <-c.driver.runEnded:
			t.Stop()
		case <-c.driver.readerDone:
			t.Stop()
			select {
			case <-c.driver.runEnded: // the run ended, then the stream
			default:
				return fail(round, fmt.Errorf("the driver's stream ended while its run went on: %w", c.driver.deadErr()))
			}
		case <-t.C:
			return fail(round, fmt.Errorf("no run_ended within %s of the step", o.CommandTimeout))
		case <-ctx.Done():
			t.Stop()
			return fail(round, fmt.Errorf("waiting for run_ended: %w", ctx.Err()))
		}
		res.done++
		res.prompts = append(res.prompts, promptSample{tag: tag, latency: time.Since(start)})
	}
	return res
}

// awaitRunEnds waits until every stream has the run_ended of every run
// its driver saw end, or for wait.
func awaitRunEnds(ctx context.Context, convs []*restConv, wait time.Duration) {
	pollUntil(ctx, wait, func() bool {
		for _, c := range convs {
			if c == nil {
				continue
			}
			want := c.driver.runEnds.Load()
			for _, w := range c.watchers {
				if w != nil && w.runEnds.Load() < want {
					return false
				}
			}
		}
		return true
	})
}

// awaitStreamsEnded waits, up to wait, for the streams' readers to see
// the end of their responses (the server has exited).
func awaitStreamsEnded(ss []*sseStream, wait time.Duration) {
	giveUp := time.After(wait)
	for _, s := range ss {
		select {
		case <-s.readerDone:
		case <-giveUp:
			return
		}
	}
}

// streamsMark is a set of streams' counters at one moment, summed.
type streamsMark struct {
	counts [numSSEKinds]int64
	bytes  int64
	tokens int64
}

func markStreams(ss []*sseStream) streamsMark {
	var m streamsMark
	for _, s := range ss {
		for k := range m.counts {
			m.counts[k] += s.counts[k].Load()
		}
		m.bytes += s.bytes.Load()
		m.tokens += s.tokens.Load()
	}
	return m
}

// events are the events counted, pings included.
func (m streamsMark) events() int64 {
	var n int64
	for _, c := range m.counts {
		n += c
	}
	return n
}

// loadTotals fills in what the watchers measured over the span, from
// their counters at its start (m0) and end (m1), and checks every stream
// of every conversation against the others: each must have every run's
// run_ended and every event another got after it attached.
func (r *RESTReport) loadTotals(m0, m1 streamsMark, attached int, byTag map[string]int, convs []*restConv, chunks int, probs *tally) {
	r.Events = map[string]int64{}
	for k, n := range sseKindNames {
		r.Events[n] = m1.counts[k] - m0.counts[k]
	}
	total := m1.events() - m0.events()
	r.Bytes = m1.bytes - m0.bytes
	if secs := r.Span.Seconds(); secs > 0 {
		r.EventsPerSec = float64(total) / secs
		if attached > 0 {
			r.EventsPerSecPerWatcher = r.EventsPerSec / float64(attached)
		}
	}
	tokensOf := map[string]int64{} // by conversation
	for tag, n := range byTag {
		conv, _, _ := strings.Cut(tag, "/")
		tokensOf[conv] += int64(n * chunks)
		r.Tokens += int64(n * chunks)
	}
	var watched int64 // the tokens of each watcher's conversation, summed
	for _, c := range convs {
		if c == nil {
			continue
		}
		for _, w := range c.watchers {
			if w != nil {
				watched += tokensOf[c.id]
			}
		}
	}
	if watched > 0 {
		r.BytesPerToken = float64(r.Bytes) / float64(watched)
		r.WireBytesPerToken = float64(r.WireBytes) / float64(watched)
		r.ProgressPerToken = float64(r.Events["generation_progress"]) / float64(watched)
	}

	for _, c := range convs {
		if c == nil {
			continue
		}
		ss := append([]*sseStream{c.driver}, c.watchers...)
		ss = slices.DeleteFunc(ss, func(s *sseStream) bool { return s == nil })
		want := c.driver.runEnds.Load()
		union := map[eventKey]struct{}{}
		keys := make([][]eventKey, len(ss))
		for i, s := range ss {
			keys[i] = s.eventKeys()
			for _, k := range keys[i] {
				union[k] = struct{}{}
			}
		}
		for i, s := range ss {
			r.AnswersChecked += s.answers.Load()
			r.RunsExpected += want
			if got := s.runEnds.Load(); got < want {
				r.RunEndsMissing += want - got
				probs.add("sse run_ended missing", fmt.Sprintf("%s of %s: %d run_ended for %d runs", s.name, c.id, got, want))
			}
			have := make(map[eventKey]struct{}, len(keys[i]))
			for _, k := range keys[i] {
				have[k] = struct{}{}
			}
			var lost []eventKey
			for k := range union {
				if _, ok := have[k]; !ok && k.seq > s.startSeq {
					lost = append(lost, k)
				}
			}
			if len(lost) > 0 {
				r.Missing += int64(len(lost))
				slices.SortFunc(lost, func(a, b eventKey) int { return cmp.Compare(a.seq, b.seq) })
				probs.add("sse event missing", fmt.Sprintf("%s of %s: %d events another client got, the first %s at seq %d",
					s.name, c.id, len(lost), lost[0].typ, lost[0].seq))
			}
		}
	}
}

// streamEnds fills in, once the server has stopped, how every stream
// ended (the early ends were counted as faults when they happened).
func (r *RESTReport) streamEnds(ss []*sseStream) {
	r.Ends = map[string]int{}
	for _, s := range ss {
		how, early := s.endState()
		r.Ends[how]++
		if early {
			r.EarlyEnds++
		}
	}
}

// restRows are WriteTable's rows for the REST face, "-" in a report
// without it.
var restRows = []tableRow{
	{"sse watchers per conv, all (failed)", restVal(func(w *RESTReport) string {
		return fmt.Sprintf("%d, %d (%d)", w.WatchersPerConversation, w.Watchers, w.Failed)
	})},
	{"  watchers' read delay", restVal(func(w *RESTReport) string { return fmtDelay(w.ReadDelay) })},
	{"  setup (to connected)", restVal(func(w *RESTReport) string { return fmtDur(w.Setup) })},
	{"  RSS with watchers idle", restVal(func(w *RESTReport) string { return fmtBytes(w.RSSWatchers) })},
	{"  RSS per attached watcher", restVal(func(w *RESTReport) string { return fmtBytes(w.RSSPerWatcher) })},
	{"  span (to the last run_ended)", restVal(func(w *RESTReport) string { return fmtDur(w.Span) })},
	{"  events/s: all, per watcher", restVal(func(w *RESTReport) string {
		return fmt.Sprintf("%.0f, %.2f", w.EventsPerSec, w.EventsPerSecPerWatcher)
	})},
	{"  progress/message/complete/run/other", restVal(func(w *RESTReport) string {
		e := w.Events
		other := e["generation_started"] + e["tool"] + e["ping"] + e["connected"] + e["error"] + e["other"]
		return fmt.Sprintf("%d / %d / %d / %d / %d", e["generation_progress"], e["message_added"], e["generation_complete"], e["run_ended"], other)
	})},
	{"  bytes received", restVal(func(w *RESTReport) string { return fmtBytes(w.Bytes) })},
	{"  tokens streamed (mock)", restVal(func(w *RESTReport) string { return fmt.Sprintf("%d", w.Tokens) })},
	{"  bytes per token per client", restVal(func(w *RESTReport) string { return fmt.Sprintf("%.1f", w.BytesPerToken) })},
	{"  wire bytes (TCP), per token", restVal(func(w *RESTReport) string {
		return fmt.Sprintf("%s, %.1f", fmtBytes(w.WireBytes), w.WireBytesPerToken)
	})},
	{"  progress events per token", restVal(func(w *RESTReport) string { return fmt.Sprintf("%.3f", w.ProgressPerToken) })},
	{"  answers checked (all streams)", restVal(func(w *RESTReport) string { return fmt.Sprintf("%d", w.AnswersChecked) })},
	{"  run_ended: expected, missing", restVal(func(w *RESTReport) string {
		return fmt.Sprintf("%d, %d", w.RunsExpected, w.RunEndsMissing)
	})},
	{"  events missing, twice, out of order", restVal(func(w *RESTReport) string {
		return fmt.Sprintf("%d, %d, %d", w.Missing, w.Duplicated, w.OutOfOrder)
	})},
	{"  ended early; at shutdown", restVal(func(w *RESTReport) string {
		var ends []string
		for _, k := range slices.Sorted(maps.Keys(w.Ends)) {
			ends = append(ends, fmt.Sprintf("%s x%d", k, w.Ends[k]))
		}
		return fmt.Sprintf("%d; %s", w.EarlyEnds, strings.Join(ends, ", "))
	})},
}

func restVal(f func(w *RESTReport) string) func(Report) string {
	return func(r Report) string {
		if r.REST == nil {
			return "-"
		}
		return f(r.REST)
	}
}
