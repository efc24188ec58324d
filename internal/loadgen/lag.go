package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	agentd "github.com/agentd-dev/agentd/internal/server"
)

// Watcher lag in a cluster: how far a client watching a session trails
// the first client to see each of its events, on each face, from the
// node that owns the session (single node) and from another node (cross
// node, fed through the stream), in the same run.
//
// For each of the first LagSessions sessions the bench opens six
// watchers besides the driving client: a pi-server connection
// (switch_session), an event stream of the REST face
// (GET /api/v2/conversations/{id}/events) and a per-session WebSocket
// (subscribe), each once on the session's home (its owner with
// --cluster-spread) and once on a node that is neither its home nor its
// driver's. Each notes when it first got each seq. An event's lag at a
// watcher is that time less the earliest any of the six got it: the same
// clock, so no skew; the single node figures are what one server's
// clients see of each other, the cross node ones what the stream adds.
// The session WebSocket's progress_update is left out (it is coalesced to
// one per interval by design); its other messages carry their event's
// seq.

// LagFigures are the lag of one kind of watcher over every event it got.
type LagFigures struct {
	Events int           `json:"events"`
	P50    time.Duration `json:"p50_ns"`
	P99    time.Duration `json:"p99_ns"`
	Max    time.Duration `json:"max_ns"`
	// Missing is how many events a watcher of this kind never got that
	// another watcher of the same session did (within the wait after
	// the load); they are not in the figures.
	Missing int `json:"missing"`
}

// LagReport is the watchers' lag by face, single node and cross node.
type LagReport struct {
	Sessions int                   `json:"sessions"`
	Single   map[string]LagFigures `json:"single_node"`
	Cross    map[string]LagFigures `json:"cross_node"`
	// Failed says which watchers could not be opened.
	Failed []string `json:"failed,omitempty"`
}

// lagFaces are the faces watched, in the report's order.
var lagFaces = []string{"pi", "sse", "session-ws"}

// lagWatcher is one watcher: the first arrival of each seq.
type lagWatcher struct {
	face  string
	cross bool
	sid   string

	mu   sync.Mutex
	seen map[uint64]time.Time
	last uint64

	stop func()
	done chan struct{}
}

func (w *lagWatcher) saw(seq uint64, at time.Time) {
	w.mu.Lock()
	if _, ok := w.seen[seq]; !ok && seq > 0 {
		w.seen[seq] = at
		w.last = max(w.last, seq)
	}
	w.mu.Unlock()
}

func (w *lagWatcher) close() {
	w.stop()
	<-w.done
}

// openLagWatcher opens one watcher of session sid on the node at addr;
// it reads until closed.
func openLagWatcher(ctx context.Context, hc *http.Client, timeout time.Duration, face, addr, sid string, cross bool) (*lagWatcher, error) {
	rctx, stop := context.WithCancel(context.Background())
	w := &lagWatcher{face: face, cross: cross, sid: sid, seen: map[uint64]time.Time{}, stop: stop, done: make(chan struct{})}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch face {
	case "sse":
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+convPath+sid+"/events", nil)
		if err != nil {
			stop()
			return nil, err
		}
		req.Header.Set("Accept", "text/event-stream")
		t := time.AfterFunc(timeout, stop)
		resp, err := hc.Do(req)
		t.Stop()
		if err != nil {
			stop()
			return nil, fmt.Errorf("GET events of %s on %s: %w", sid, addr, err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			stop()
			return nil, fmt.Errorf("GET events of %s on %s: HTTP %d", sid, addr, resp.StatusCode)
		}
		go func() {
			defer close(w.done)
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 64<<10), 8<<20)
			for sc.Scan() {
				if id, ok := bytes.CutPrefix(sc.Bytes(), []byte("id:")); ok {
					if n, err := strconv.ParseUint(string(bytes.TrimSpace(id)), 10, 64); err == nil {
						w.saw(n, time.Now())
					}
				}
			}
		}()
		return w, nil
	case "pi", "session-ws":
		url := "ws://" + addr + "/?lifecycle=own"
		// Command ids are the server's, across connections (a replay
		// answers an id seen before): one per watcher.
		sub := fmt.Appendf(nil, `{"id":"lag-watch-%s-%t","type":"switch_session","sessionId":%q}`, sid, cross, sid)
		if face == "session-ws" {
			url = "ws://" + addr + "/api/v1/ws/sessions/" + sid
			sub = fmt.Appendf(nil, `{"type":"subscribe","session_id":%q}`, sid)
		}
		conn, _, err := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPClient: hc})
		if err != nil {
			stop()
			return nil, fmt.Errorf("dial %s: %w", url, err)
		}
		conn.SetReadLimit(16 << 20)
		if err := conn.Write(dctx, websocket.MessageText, sub); err != nil {
			_ = conn.CloseNow()
			stop()
			return nil, fmt.Errorf("subscribe to %s on %s: %w", sid, addr, err)
		}
		go func() {
			defer close(w.done)
			defer conn.CloseNow()
			for {
				_, b, err := conn.Read(rctx)
				if err != nil {
					return
				}
				at := time.Now()
				var m struct {
					Type      string `json:"type"`
					SessionID string `json:"sessionId"`
					Seq       uint64 `json:"seq"`
				}
				if json.Unmarshal(b, &m) != nil {
					continue
				}
				switch {
				case face == "pi" && m.Type == "event" && m.SessionID == sid:
					w.saw(m.Seq, at)
				case face == "session-ws" && m.Type == "ping":
					_ = conn.Write(rctx, websocket.MessageText, pong)
				case face == "session-ws" && m.Type != "progress_update" && m.Type != "subscribed" && m.Type != "state_snapshot":
					w.saw(m.Seq, at)
				}
			}
		}()
		return w, nil
	}
	stop()
	return nil, fmt.Errorf("no face %q", face)
}

// lagWatchers are the watchers of a run.
type lagWatchers struct {
	ws     []*lagWatcher
	failed []string
}

// openLagWatchers opens the six watchers of each session in sids (whose
// drivers connect to the nodes driverOf says), n at a time.
func openLagWatchers(ctx context.Context, o Options, hc *http.Client, nodes []clusterNode, ids, sids []string, driverOf func(i int) int) *lagWatchers {
	lw := &lagWatchers{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, sid := range sids {
		home := 0
		for k, id := range ids {
			if id == agentd.PlaceSession(sid, ids) {
				home = k
			}
		}
		other := driverOf(i)
		for k := range nodes {
			if k != home && k != driverOf(i) {
				other = k
				break
			}
		}
		for _, face := range lagFaces {
			for _, cross := range []bool{false, true} {
				at := nodes[home]
				if cross {
					at = nodes[other]
				}
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					w, err := openLagWatcher(ctx, hc, o.CommandTimeout, face, at.srv.addr, sid, cross)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						lw.failed = append(lw.failed, fmt.Sprintf("%s watcher of %s on %s: %v", face, sid, at.id, err))
						return
					}
					lw.ws = append(lw.ws, w)
				})
			}
		}
	}
	wg.Wait()
	return lw
}

// closeAll closes every watcher (again: close is idempotent).
func (lw *lagWatchers) closeAll() {
	for _, w := range lw.ws {
		w.close()
	}
}

// sessions are the sessions watched.
func (lw *lagWatchers) sessions() []string {
	seen := map[string]bool{}
	var out []string
	for _, w := range lw.ws {
		if !seen[w.sid] {
			seen[w.sid] = true
			out = append(out, w.sid)
		}
	}
	return out
}

// lagSessionsOf is how many sessions get lag watchers (Options.LagSessions).
func lagSessionsOf(o Options) int {
	switch {
	case o.LagSessions < 0:
		return 0
	case o.LagSessions == 0:
		return min(10, o.Sessions)
	}
	return min(o.LagSessions, o.Sessions)
}

// settle waits, up to wait, until every watcher has the last seq any
// watcher of its session got, each face's way (the REST face and the
// session WebSocket have no message for some events, so a face is done
// once its last seq stops growing).
func (lw *lagWatchers) settle(ctx context.Context, wait time.Duration) {
	deadline := time.Now().Add(wait)
	prev := map[*lagWatcher]uint64{}
	still := 0
	for time.Now().Before(deadline) && ctx.Err() == nil {
		changed := false
		for _, w := range lw.ws {
			w.mu.Lock()
			last := w.last
			w.mu.Unlock()
			if prev[w] != last {
				prev[w], changed = last, true
			}
		}
		if changed {
			still = 0
		} else if still++; still >= 10 {
			return // a second with nothing new anywhere
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// report closes the watchers and computes the figures.
func (lw *lagWatchers) report(sessions int) *LagReport {
	lw.closeAll()
	first := map[string]map[uint64]time.Time{} // by session, seq
	for _, w := range lw.ws {
		f := first[w.sid]
		if f == nil {
			f = map[uint64]time.Time{}
			first[w.sid] = f
		}
		for s, at := range w.seen {
			if t, ok := f[s]; !ok || at.Before(t) {
				f[s] = at
			}
		}
	}
	type key struct {
		face  string
		cross bool
	}
	lags := map[key][]time.Duration{}
	missing := map[key]int{}
	// The seqs each face shows, per session: what a watcher of that face
	// elsewhere got and this one did not is missing.
	shown := map[string]map[uint64]bool{}
	for _, w := range lw.ws {
		m := shown[w.sid+"\x00"+w.face]
		if m == nil {
			m = map[uint64]bool{}
			shown[w.sid+"\x00"+w.face] = m
		}
		for s := range w.seen {
			m[s] = true
		}
	}
	for _, w := range lw.ws {
		k := key{w.face, w.cross}
		for s, at := range w.seen {
			lags[k] = append(lags[k], at.Sub(first[w.sid][s]))
		}
		for s := range shown[w.sid+"\x00"+w.face] {
			if _, ok := w.seen[s]; !ok {
				missing[k]++
			}
		}
	}
	r := &LagReport{Sessions: sessions, Single: map[string]LagFigures{}, Cross: map[string]LagFigures{}, Failed: lw.failed}
	for _, face := range lagFaces {
		for _, cross := range []bool{false, true} {
			k := key{face, cross}
			ds := lags[k]
			f := LagFigures{Events: len(ds), Missing: missing[k]}
			if len(ds) > 0 {
				f.P50, f.P99 = percentile(ds, 50), percentile(ds, 99)
				f.Max = ds[len(ds)-1] // sorted by percentile
			}
			if cross {
				r.Cross[face] = f
			} else {
				r.Single[face] = f
			}
		}
	}
	return r
}

// lagRows are WriteTable's rows of a cluster run's watcher lag, built
// when a table is written, not at init.
func lagRows() []tableRow {
	var rows []tableRow
	for _, face := range lagFaces {
		for _, cross := range []bool{false, true} {
			name := "  lag " + face + ", single node: p50 / p99 / max"
			if cross {
				name = "  lag " + face + ", cross node: p50 / p99 / max"
			}
			rows = append(rows, tableRow{name, clusterVal(func(c *ClusterReport) string {
				if c.Lag == nil {
					return "-"
				}
				f := c.Lag.Single[face]
				if cross {
					f = c.Lag.Cross[face]
				}
				return fmt.Sprintf("%s / %s / %s (%d events, %d missing)", lagDur(f.P50), lagDur(f.P99), lagDur(f.Max), f.Events, f.Missing)
			})})
		}
	}
	return rows
}

// lagDur is fmtDur with 0 as 0: the first watcher to see an event
// trails nobody.
func lagDur(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return fmtDur(d)
}
