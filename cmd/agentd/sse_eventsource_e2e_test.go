package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
)

// A browser's own EventSource on the conversation API's event stream,
// with the connection cut after its first frames: it must reconnect with
// Last-Event-ID and see every event of the log exactly once, ids never
// going back. The cut is made by a small forwarder between Chromium and
// agentd serve, which also serves the page (so the stream is same-origin).

// esCutter forwards GET .../events to agentd and ends the first
// connection after cut frames. It holds the second connection until
// release is closed, so the test can make events happen while the browser
// is away.
type esCutter struct {
	t        *testing.T
	upstream string // agentd's host:port
	cut      int
	// cutAfter, when set, cuts right after the first frame of that type
	// instead of after cut frames.
	cutAfter string
	release  chan struct{}

	mu      sync.Mutex
	conns   int
	lastIDs []string // the Last-Event-ID header of each connection
	held    chan struct{}
}

const esPage = `<!doctype html><meta charset="utf-8"><title>es</title>
<script>
window.got = [];
window.errors = 0;
window.start = (url) => {
  const es = new EventSource(url);
  es.onmessage = (e) => got.push({id: e.lastEventId, type: JSON.parse(e.data).type});
  es.onerror = () => { errors++; };
};
</script>`

func (c *esCutter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/" {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, esPage)
		return
	}
	if !strings.HasSuffix(r.URL.Path, "/events") {
		http.NotFound(w, r)
		return
	}
	c.mu.Lock()
	c.conns++
	n := c.conns
	c.lastIDs = append(c.lastIDs, r.Header.Get("Last-Event-ID"))
	c.mu.Unlock()
	if n == 2 {
		close(c.held)
		select {
		case <-c.release:
		case <-r.Context().Done():
			return
		}
	}
	req, err := http.NewRequestWithContext(r.Context(), "GET", "http://"+c.upstream+r.URL.RequestURI(), nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	req.Header.Set("Accept", "text/event-stream")
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		req.Header.Set("Last-Event-ID", v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	// A short reconnection delay: the browser's default is seconds.
	fmt.Fprint(w, "retry: 20\n\n")
	br := bufio.NewReader(resp.Body)
	frames := 0
	var frame strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		if _, err := fmt.Fprint(w, line); err != nil {
			return
		}
		frame.WriteString(line)
		if line == "\n" {
			frames++
			if err := rc.Flush(); err != nil {
				return
			}
			typed := c.cutAfter != "" && strings.Contains(frame.String(), `data: {"type":"`+c.cutAfter+`"`)
			if n == 1 && (frames == c.cut || typed) {
				return // the cut: the response ends, the browser reconnects
			}
			frame.Reset()
		}
	}
}

// esEvent is one event as the page's EventSource saw it.
type esEvent struct {
	ID   string `json:"id"`
	Type string `json:"type"`
}

func TestSSEEventSourceCutAndResume(t *testing.T) {
	browser := wuBrowser(t)
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e)

	tests := []struct {
		name string
		// old: the run happens before the page connects, which resumes
		// from the run's first event with ?after=; otherwise the page
		// connects first and the run happens while it is cut off.
		old      bool
		cut      int
		cutAfter string
	}{
		{name: "cut after connected, run while away", cut: 1},
		{name: "cut after connected and ping, run while away", cut: 2},
		{name: "resume an old cursor, cut after connected", old: true, cut: 1},
		{name: "resume an old cursor, cut after three frames", old: true, cut: 3},
		// message_added and generation_complete are one layer event,
		// two frames with ids of their own (<seq>.1, <seq>.2).
		{name: "resume an old cursor, cut between message_added and generation_complete", old: true, cutAfter: "message_added"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "es-" + strconv.Itoa(i)
			sid := rsOK(t, s, "PUT", rsConvPath(id), map[string]any{}).str("session_id")
			rsOK(t, s, "POST", rsConvPath(id), map[string]any{"role": "user", "content": "hello " + id})
			// The reference: every event of the conversation, read by
			// a client that is never cut.
			ref := rsOpen(t, s, rsConvPath(id)+"/events")
			_, conn := ref.waitType(0, "connected")
			refFrom := ref.mark()
			step := func() {
				rsOK(t, s, "POST", rsConvPath(id)+"/step", map[string]any{"session_id": conn.str("session_id")})
				ref.waitType(refFrom, "run_ended")
			}

			cutter := &esCutter{t: t, upstream: s.loopback(), cut: tt.cut, cutAfter: tt.cutAfter, release: make(chan struct{}), held: make(chan struct{})}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			hs := &http.Server{Handler: cutter}
			go hs.Serve(ln)
			t.Cleanup(func() { hs.Close() })

			path := rsConvPath(id) + "/events?session_id=" + sid
			var after uint64
			if tt.old {
				step()
				for _, ev := range ref.snapshot()[refFrom:] {
					if ev.typ() != "ping" {
						after = rsSeq(t, ev) // the run's first event
						break
					}
				}
				path += "&after=" + strconv.FormatUint(after, 10)
			}

			ctx, cancel := chromedp.NewContext(browser)
			defer cancel()
			if err := chromedp.Do(ctx); err != nil { // opens the tab
				t.Fatalf("opening a tab: %v", err)
			}
			p := &wuPage{t: t, ctx: ctx, base: "http://" + ln.Addr().String(), srv: s}
			p.run(chromedp.Navigate(p.base + "/"))
			wuEval[bool](p, `start(`+js(path)+`), true`)
			<-cutter.held // the first connection was cut; the browser is back
			if !tt.old {
				step()
			}
			close(cutter.release)
			p.until("run_ended in the browser", `got.some((e) => e.type === 'run_ended')`)

			var got []esEvent
			if err := json.Unmarshal([]byte(wuEval[string](p, `JSON.stringify(got)`)), &got); err != nil {
				t.Fatal(err)
			}
			cutter.mu.Lock()
			conns, lastIDs := cutter.conns, cutter.lastIDs
			cutter.mu.Unlock()
			if conns != 2 {
				t.Errorf("%d connections, want 2 (one cut, one resumed): Last-Event-IDs %q", conns, lastIDs)
			}

			// Ids on what the browser saw never go back, and no event of
			// the log comes twice.
			// Read as decimals, as the web UI does: "7.1" < "7.2" < "8".
			var prev float64
			var seen []string
			for _, ev := range got {
				n, err := strconv.ParseFloat(ev.ID, 64)
				if err != nil || n < prev {
					t.Fatalf("id %q after %v: the browser's cursor ran backwards\nsaw %v\nLast-Event-IDs %q", ev.ID, prev, got, lastIDs)
				}
				prev = n
				if ev.Type != "ping" && ev.Type != "connected" {
					seen = append(seen, ev.ID+":"+ev.Type)
				}
			}
			// Every event of the log after the cursor, once, in order.
			var want []string
			for _, ev := range ref.snapshot()[refFrom:] {
				if ev.typ() != "ping" && (!tt.old || rsSeq(t, ev) > after) {
					want = append(want, ev.id+":"+ev.typ())
				}
			}
			if strings.Join(seen, " ") != strings.Join(want, " ") {
				t.Errorf("the browser saw\n  %v\nwant\n  %v\nLast-Event-IDs %q", seen, want, lastIDs)
			}
			// The reconnect asks for where the client stood: its own
			// cursor on a resume, the snapshot's seq on a fresh stream.
			wantID := strconv.FormatUint(after, 10)
			if !tt.old {
				wantID = conn.id
			}
			if tt.cut > 1 && len(got) >= tt.cut {
				wantID = got[tt.cut-1].ID // the last frame before the cut
			}
			if tt.cutAfter != "" {
				wantID = ""
				for _, ev := range got {
					if ev.Type == tt.cutAfter {
						wantID = ev.ID // the frame the cut came after
						break
					}
				}
				if !strings.HasSuffix(wantID, ".1") {
					t.Errorf("%s's id %q: want the first part of its event, <seq>.1", tt.cutAfter, wantID)
				}
			}
			if len(lastIDs) == 2 && (lastIDs[0] != "" || lastIDs[1] != wantID) {
				t.Errorf("Last-Event-ID headers %q, want [\"\" %q]", lastIDs, wantID)
			}
		})
	}
}
