package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/agentd-dev/agentd/internal/jsonfield"
)

// watchOptions are what every watcher of a run shares.
type watchOptions struct {
	// timeout bounds the dial, the wait for the subscribe's answer and
	// the write of each pong.
	timeout time.Duration
	// interval is the server's --ws-progress-interval: live
	// progress_updates of a session must come at least this far apart.
	interval time.Duration
	// faults collects the protocol problems the readers see.
	faults *tally
}

// Kinds of message a watcher counts, by the message's type; every other
// type counts as kindOther.
const (
	kindProgress = iota
	kindStatus
	kindCompleted
	kindError
	kindPing
	kindOther
	numKinds
)

var kindNames = [numKinds]string{"progress_update", "status_change", "completed", "error", "ping", "other"}

func kindOf(typ string) int {
	for k, n := range kindNames[:kindOther] {
		if n == typ {
			return k
		}
	}
	return kindOther
}

// pong answers the server's JSON ping: any message would do, a pong says
// what it is.
var pong = []byte(`{"type":"pong"}`)

// watcher is one connection to the per-session WebSocket face
// (/api/v1/ws/sessions/{id}), subscribed to one session: it counts what
// it receives and checks it belongs to that session, keeps the seq of
// every completed, measures the gaps between live progress_updates by
// their timestamps, and answers pings. Its reader goroutine is started by
// dialWatcher and stopped and waited for by close.
type watcher struct {
	conn *websocket.Conn
	sid  string
	opt  *watchOptions

	counts [numKinds]atomic.Int64 // messages received, by kind
	bytes  atomic.Int64           // their payload bytes
	// ending says the server is being stopped (or the bench closes the
	// connection): a close from then on is expected.
	ending atomic.Bool

	ready      chan struct{} // closed once subscribed and the progress_update of the moment came
	readerDone chan struct{}
	stopReader context.CancelFunc

	mu        sync.Mutex
	completed []int64 // seq of every completed
	// live progress_updates (after the subscribe's own), the first and
	// last one's timestamps, and the least gap between two in a row.
	progress             int
	firstProg, lastProg  time.Time
	minGap               time.Duration
	closeCode            int   // the server's close code; -1 for none (cut, or still open)
	dead                 error // why the reader stopped
	closedBeforeShutdown bool

	subscribed, initialIn bool // reader only: the subscribe's answer so far
	json                  jsonfield.Parser
}

// dialWatcher connects to url, subscribes to sid and waits for the
// answer: subscribed, then the session's progress of the moment. ctx
// bounds the dial and the wait and, while it lasts, the reader.
func dialWatcher(ctx context.Context, hc *http.Client, url, sid string, o *watchOptions) (*watcher, error) {
	dctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	conn, resp, err := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("dial %s: HTTP %d: %w", url, resp.StatusCode, err)
		}
		return nil, fmt.Errorf("dial %s: %w", url, err)
	}
	// The face's own limit for messages; a completed carries the run's
	// last text.
	conn.SetReadLimit(1 << 20)
	rctx, stop := context.WithCancel(ctx)
	w := &watcher{conn: conn, sid: sid, opt: o, ready: make(chan struct{}), readerDone: make(chan struct{}), stopReader: stop, closeCode: -1}
	go w.read(rctx)
	sub := fmt.Appendf(nil, `{"type":"subscribe","session_id":%q}`, sid)
	if err := conn.Write(dctx, websocket.MessageText, sub); err != nil {
		w.close()
		return nil, fmt.Errorf("subscribe to %s: %w", sid, err)
	}
	switch err := waitAnswer(dctx, w.ready, w.readerDone); {
	case err == nil:
		return w, nil
	case errors.Is(err, errReaderEnded):
		err := w.deadErr()
		w.close()
		return nil, fmt.Errorf("connection closed before the subscription was answered: %w", err)
	default:
		w.close()
		return nil, fmt.Errorf("waiting for subscribed and the first progress_update of %s: %w", sid, err)
	}
}

func (w *watcher) read(ctx context.Context) {
	defer close(w.readerDone)
	for {
		_, data, err := w.conn.Read(ctx)
		if err != nil {
			w.end(err)
			return
		}
		w.bytes.Add(int64(len(data)))
		w.message(ctx, data)
	}
}

// message takes one message from the server.
func (w *watcher) message(ctx context.Context, data []byte) {
	v, _ := w.json.Parse(data) // nil if it is not JSON: every field is missing
	typ := jsonfield.String(v.Get("type"))
	w.counts[kindOf(typ)].Add(1)
	if sid := jsonfield.String(v.Get("session_id")); sid != "" && sid != w.sid {
		w.opt.faults.add("session-ws message of another session", fmt.Sprintf("watcher of %s: %s of session %q", w.sid, typ, sid))
	}
	switch typ {
	case "subscribed":
		if w.subscribed {
			w.opt.faults.add("session-ws subscribed twice", fmt.Sprintf("watcher of %s: a second subscribed", w.sid))
		}
		w.subscribed = true
	case "progress_update":
		w.progressUpdate(jsonfield.String(v.Get("timestamp")))
	case "completed":
		w.mu.Lock()
		w.completed = append(w.completed, v.GetInt64("seq"))
		w.mu.Unlock()
	case "ping":
		wctx, cancel := context.WithTimeout(ctx, w.opt.timeout)
		err := w.conn.Write(wctx, websocket.MessageText, pong)
		cancel()
		if err != nil && !w.ending.Load() {
			w.opt.faults.add("session-ws pong failed", fmt.Sprintf("watcher of %s: %v", w.sid, err))
		}
	case "error":
		what := jsonfield.String(v.Get("code")) // a refused client message
		if what == "" {
			what = jsonfield.String(v.Get("error_type")) // a failure of the session
		}
		w.opt.faults.add("session-ws error "+what, fmt.Sprintf("watcher of %s: %s", w.sid, prefix(data, 300)))
	case "":
		w.opt.faults.add("session-ws message without a type", fmt.Sprintf("watcher of %s: %s", w.sid, prefix(data, 120)))
	}
}

// progressUpdate takes a progress_update stamped ts. The first after
// subscribed is the subscribe's own, the state of the moment; the rest
// are the session's live ones, which must be the interval apart.
func (w *watcher) progressUpdate(ts string) {
	if !w.initialIn {
		w.initialIn = true
		if !w.subscribed {
			w.opt.faults.add("session-ws progress before subscribed", fmt.Sprintf("watcher of %s: progress_update before subscribed", w.sid))
		}
		close(w.ready)
		return
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		w.opt.faults.add("session-ws bad timestamp", fmt.Sprintf("watcher of %s: progress_update timestamp %q: %v", w.sid, ts, err))
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.progress > 0 {
		if gap := t.Sub(w.lastProg); w.progress == 1 || gap < w.minGap {
			w.minGap = gap
		}
	} else {
		w.firstProg = t
	}
	w.progress++
	w.lastProg = t
}

// end records why the reader stopped; a close before the bench expected
// one is a fault.
func (w *watcher) end(err error) {
	code := int(websocket.CloseStatus(err))
	early := !w.ending.Load()
	w.mu.Lock()
	w.dead, w.closeCode, w.closedBeforeShutdown = err, code, early
	w.mu.Unlock()
	if !early || !w.initialIn {
		// A watcher that never got its answer is reported by dialWatcher.
		return
	}
	if code != -1 {
		w.opt.faults.add(fmt.Sprintf("session-ws closed by the server (%d)", code), fmt.Sprintf("watcher of %s: %v", w.sid, err))
		return
	}
	w.opt.faults.add("session-ws connection lost", fmt.Sprintf("watcher of %s: %v", w.sid, err))
}

func (w *watcher) deadErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dead
}

// progressStats is what the watcher measured of the live progress_updates.
func (w *watcher) progressStats() (n int, span, minGap time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.progress, w.lastProg.Sub(w.firstProg), w.minGap
}

// completedSeqs are the seqs of the completed messages received so far.
func (w *watcher) completedSeqs() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int64(nil), w.completed...)
}

// closeState is how the connection ended: the server's close code (-1
// for none) and whether it ended before the bench stopped the server.
func (w *watcher) closeState() (code int, early, closed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closeCode, w.closedBeforeShutdown, w.dead != nil
}

// close says goodbye, stops the reader and waits for it.
func (w *watcher) close() {
	w.ending.Store(true)
	err := w.conn.Close(websocket.StatusNormalClosure, "bench done")
	_ = err // the server may have closed it already (shutdown): nothing to report
	w.stopReader()
	<-w.readerDone
}
