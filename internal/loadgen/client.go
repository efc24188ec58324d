package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/valyala/fastjson"

	"github.com/agentd-dev/agentd/internal/jsonfield"
)

// reply is a response frame as the waiting command sees it.
type reply struct {
	at      time.Time // when the reader got the frame: excludes the waiter's scheduling
	success bool
	err     string
	frame   []byte // a copy of the response frame if it has data, for get
	lost    error  // the connection ended before the response came
}

// get is the response's data, or the field of it at keys; nil if there
// is none.
func (r reply) get(keys ...string) *fastjson.Value {
	if r.frame == nil {
		return nil
	}
	var p jsonfield.Parser
	v, err := p.Parse(r.frame)
	if err != nil {
		return nil
	}
	return v.Get(append([]string{"data"}, keys...)...)
}

// clientOptions are what every connection of a run shares.
type clientOptions struct {
	// timeout bounds the dial and the wait for server_ready.
	timeout time.Duration
	// readDelay is slept after every frame read: a client that reads
	// slower than the model writes, so that the server's queue for it
	// grows.
	readDelay time.Duration
	// answer is the text of every assistant message the mock streams;
	// each message_end must carry it, however slowly the client reads.
	answer string
	// delta: the server sends text deltas only, so the deltas of a
	// message must add up to its final text. In the full format a server
	// may let a newer message_update supersede older ones for a client
	// that fell behind, so there only the final text is checked.
	delta bool
	// faults collects the protocol problems the readers see.
	faults *tally
}

// client is one WebSocket connection driving one session. Its reader
// goroutine is started by dial and stopped and waited for by close.
type client struct {
	conn *websocket.Conn
	sid  string // the session this connection creates and drives ("" for the bench's own); fixed before the reader starts
	opt  *clientOptions

	frames    atomic.Int64 // every frame received
	bytes     atomic.Int64 // their payload bytes
	events    atomic.Int64 // session `event` frames
	merged    atomic.Int64 // frames that arrived with earlier deltas merged into them
	agentEnds atomic.Int64 // agent_end events of the own session
	answers   atomic.Int64 // assistant message_end events checked against the answer
	late      atomic.Int64 // responses that came after their command gave up waiting
	shutdown  atomic.Bool  // server_shutdown seen
	hurry     atomic.Bool  // read at full speed from now on: the measured phases are over

	mu        sync.Mutex
	pending   map[string]chan reply
	abandoned map[string]struct{} // commands that gave up waiting; their response is late, not unmatched
	dead      error               // why the reader stopped; no new calls after it is set
	faults    *tally              // protocol problems the reader sees

	ready      chan struct{} // closed on server_ready
	readerDone chan struct{}
	stopReader context.CancelFunc
	lastSeq    int64            // reader only
	lastFrame  time.Time        // reader only: when the last frame came, to tell a stalled stream from a cut one
	streamed   strings.Builder  // reader only: the text deltas of the assistant message being streamed
	json       jsonfield.Parser // reader only: every frame read is parsed with it
	head       []byte           // reader only: parseEvent's copy of a frame's head
}

// dial connects to url and waits for server_ready. ctx bounds the dial
// and the wait, and, while it lasts, the connection's reader.
func dial(ctx context.Context, hc *http.Client, url, sid string, o *clientOptions) (*client, error) {
	dctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	conn, resp, err := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("dial %s: HTTP %d: %w", url, resp.StatusCode, err)
		}
		return nil, fmt.Errorf("dial %s: %w", url, err)
	}
	// get_state and agent_end frames carry whole messages; the default
	// 32 KiB limit is for untrusted peers.
	conn.SetReadLimit(64 << 20)
	rctx, stop := context.WithCancel(ctx)
	c := &client{conn: conn, sid: sid, opt: o, faults: o.faults, pending: map[string]chan reply{}, abandoned: map[string]struct{}{},
		ready: make(chan struct{}), readerDone: make(chan struct{}), stopReader: stop}
	go c.read(rctx)
	switch err := waitAnswer(dctx, c.ready, c.readerDone); {
	case err == nil:
		return c, nil
	case errors.Is(err, errReaderEnded):
		err := c.deadErr()
		c.close()
		return nil, fmt.Errorf("connection closed before server_ready: %w", err)
	default:
		c.close()
		return nil, fmt.Errorf("waiting for server_ready: %w", err)
	}
}

// errReaderEnded is waitAnswer's error when the reader ended unanswered.
var errReaderEnded = errors.New("the reader ended before the answer")

// waitAnswer waits for a reader's answer: nil when answered is closed,
// errReaderEnded when ended is closed first, ctx's error when it ends
// first. A reader that gets its answer and then ends can close both
// before the select looks, and select picks at random among ready
// cases: answered is looked at again, so that such an answer counts.
func waitAnswer(ctx context.Context, answered, ended <-chan struct{}) error {
	select {
	case <-answered:
		return nil
	case <-ended:
		select {
		case <-answered:
			return nil
		default:
			return errReaderEnded
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *client) read(ctx context.Context) {
	defer close(c.readerDone)
	// The end of ctx closes the connection, which ends a Read waiting;
	// each Read itself gets no context: with one, the library registers
	// and removes a context.AfterFunc per message, which under a global
	// lifecycle broadcast made the bench's readers cost as much CPU as
	// the server they measure.
	stop := context.AfterFunc(ctx, func() { _ = c.conn.CloseNow() })
	defer stop()
	var buf bytes.Buffer // reused: what is kept of a frame is copied out of it before the next read
	first := true
	var pause *time.Timer
	if c.opt.readDelay > 0 {
		pause = time.NewTimer(time.Hour)
		defer pause.Stop()
	}
	for {
		if pause != nil && !first && !c.hurry.Load() {
			pause.Reset(c.opt.readDelay)
			select {
			case <-pause.C:
			case <-ctx.Done():
			}
		}
		err := readMessage(c.conn, &buf)
		if err == nil && ctx.Err() != nil {
			err = ctx.Err()
		}
		data := buf.Bytes()
		if err != nil {
			if !c.lastFrame.IsZero() {
				err = fmt.Errorf("%w (%s after the last frame)", err, time.Since(c.lastFrame).Round(time.Millisecond))
			}
			c.die(err)
			return
		}
		now := time.Now()
		c.lastFrame = now
		c.frames.Add(1)
		c.bytes.Add(int64(len(data)))
		typ, v := c.frameType(data)
		if first {
			first = false
			if string(typ) == "server_ready" {
				close(c.ready)
				continue
			}
			c.faults.add("first frame not server_ready", fmt.Sprintf("session %s: first frame is %q, not server_ready", c.sid, typ))
			close(c.ready) // let the session go on; the fault is counted
		}
		switch string(typ) {
		case "response":
			c.deliver(now, data, v)
		case "event":
			c.event(data) // agentd's event frames start with their type: never parsed yet
		case "server_shutdown":
			c.shutdown.Store(true)
		case "command_accepted", "command_started", "command_finished", "session_created", "session_deleted", "server_ready":
		case "":
			c.faults.add("frame without a type", "frame without a type: "+prefix(data, 120))
		}
	}
}

// event checks a session event: a connection subscribed to one session
// must see that session's events only, numbered without gaps, and every
// assistant message must end with the mock's answer (in the delta format
// its deltas must add up to it too), however slowly this client reads.
func (c *client) event(data []byte) {
	if c.sid == "" { // the bench's own connection: its sessions are idle
		c.events.Add(1)
		return
	}
	v := c.parseEvent(data)
	ev := v.Get("event")
	ame := ev.Get("assistantMessageEvent")
	sid, evType, ameType := jsonfield.String(v.Get("sessionId")), jsonfield.String(ev.Get("type")), jsonfield.String(ame.Get("type"))
	if sid != c.sid {
		c.faults.add("event of another session", fmt.Sprintf("event of session %q on the connection of %q", sid, c.sid))
	}
	seq := v.GetInt64("seq")
	// A client that fell behind gets the deltas of one content block
	// merged into one frame with the newest seq: a gap closed by a delta
	// is that (the text check below proves nothing was lost); any other
	// gap is a lost event.
	merged := evType == "message_update" && strings.HasSuffix(ameType, "_delta")
	if c.lastSeq != 0 && (seq <= c.lastSeq || (seq != c.lastSeq+1 && !merged)) {
		c.faults.add("event seq gap", fmt.Sprintf("session %s: event seq %d after %d", sid, seq, c.lastSeq))
	}
	// A merged frame delivers every event it stands for.
	if seq != c.lastSeq+1 && merged && c.lastSeq != 0 && seq > c.lastSeq {
		c.merged.Add(1)
		c.events.Add(seq - c.lastSeq)
	} else {
		c.events.Add(1)
	}
	c.lastSeq = seq
	switch evType {
	case "agent_end":
		c.agentEnds.Add(1)
	case "message_start":
		c.streamed.Reset()
	case "message_update":
		if ameType == "text_delta" {
			c.streamed.Write(ame.GetStringBytes("delta")) // the builder copies it
		}
	case "message_end":
		c.checkAnswer(ev.Get("message"))
	}
}

// parseEvent parses a session event frame; nil if it is not JSON (every
// field is then missing). A full-format message_update carries the
// partial message twice after the fields event reads, in agentd's
// layout: {"type":"event","sessionId":…,"seq":…,"event":{"type":…,
// "assistantMessageEvent":{"type":…,"contentIndex":…,"delta":…,
// "partial":…},"message":…}}. Of such a frame only the head before
// "partial" is parsed, closed with }}}: a parse that succeeds cut it at
// that depth (the key cannot occur inside a string, whose quotes are
// escaped), and if every field event reads of it is there, those are
// the frame's own first ones. Any other frame is parsed whole.
func (c *client) parseEvent(data []byte) *fastjson.Value {
	head := data[:min(len(data), maxEventHead)]
	if i := bytes.Index(head, []byte(`,"partial":`)); i > 0 {
		c.head = append(append(c.head[:0], data[:i]...), "}}}"...)
		if v, err := c.json.Parse(c.head); err == nil {
			ame := v.Get("event", "assistantMessageEvent")
			if jsonfield.String(v.Get("event", "type")) == "message_update" && v.Get("sessionId") != nil && v.Get("seq") != nil &&
				ame.Get("type") != nil && ame.Get("delta") != nil {
				return v
			}
		}
	}
	v, _ := c.json.Parse(data)
	return v
}

// maxEventHead is how far parseEvent looks for "partial": a delta merged
// for a client that fell behind may be longer, and is parsed whole.
const maxEventHead = 1 << 10

// checkAnswer compares the message of an assistant message_end with the
// mock's answer.
func (c *client) checkAnswer(m *fastjson.Value) {
	if jsonfield.String(m.Get("role")) != "assistant" {
		return
	}
	c.answers.Add(1)
	var text strings.Builder
	for _, b := range m.GetArray("content") {
		if jsonfield.String(b.Get("type")) == "text" {
			text.Write(b.GetStringBytes("text"))
		}
	}
	if got := text.String(); got != c.opt.answer {
		c.faults.add("wrong final message", fmt.Sprintf("session %s: message_end text is %d bytes %q, want the mock's %d bytes %q",
			c.sid, len(got), prefix([]byte(got), 60), len(c.opt.answer), prefix([]byte(c.opt.answer), 60)))
	}
	if c.opt.delta && c.streamed.String() != c.opt.answer {
		c.faults.add("deltas do not add up", fmt.Sprintf("session %s: the text deltas add up to %d bytes %q, the answer is %d bytes",
			c.sid, c.streamed.Len(), prefix([]byte(c.streamed.String()), 60), len(c.opt.answer)))
	}
	c.streamed.Reset()
}

// deliver hands a response to its command. v is data parsed, or nil if
// it is still to be parsed.
func (c *client) deliver(at time.Time, data []byte, v *fastjson.Value) {
	if v == nil {
		v, _ = c.json.Parse(data)
	}
	id := jsonfield.String(v.Get("id"))
	c.mu.Lock()
	ch := c.pending[id]
	delete(c.pending, id)
	_, late := c.abandoned[id]
	delete(c.abandoned, id)
	c.mu.Unlock()
	if late {
		// Already counted as the command's timeout.
		c.late.Add(1)
		return
	}
	if ch == nil {
		c.faults.add("unmatched response", "response to no pending command: "+prefix(data, 200))
		return
	}
	r := reply{at: at, success: v.GetBool("success"), err: jsonfield.String(v.Get("error"))}
	if v.Get("data") != nil {
		r.frame = bytes.Clone(data) // the buffer is the next frame's
	}
	ch <- r
}

// die records why the reader stopped and fails every waiting command.
func (c *client) die(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dead = err
	for id, ch := range c.pending {
		ch <- reply{lost: err}
		delete(c.pending, id)
	}
}

func (c *client) deadErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

// call sends cmd with id and waits for its response. The latency is from
// just before the write to the reader receiving the response frame.
func (c *client) call(ctx context.Context, id string, cmd map[string]any) (reply, time.Duration, error) {
	cmd["id"] = id
	b, err := json.Marshal(cmd)
	if err != nil {
		return reply{}, 0, fmt.Errorf("encode %s: %w", cmd["type"], err)
	}
	ch := make(chan reply, 1) // buffered: the reader never blocks on a waiter that gave up
	c.mu.Lock()
	if c.dead != nil {
		err := c.dead
		c.mu.Unlock()
		return reply{}, 0, fmt.Errorf("%s %s: connection closed: %w", cmd["type"], id, err)
	}
	if _, dup := c.pending[id]; dup {
		c.mu.Unlock()
		return reply{}, 0, fmt.Errorf("%s %s: id already in flight", cmd["type"], id)
	}
	c.pending[id] = ch
	c.mu.Unlock()
	start := time.Now()
	if err := c.conn.Write(ctx, websocket.MessageText, b); err != nil {
		c.forget(id, false)
		return reply{}, 0, &callError{kind: errSend, err: fmt.Errorf("send %s %s: %w", cmd["type"], id, err)}
	}
	select {
	case r := <-ch:
		if r.lost != nil {
			return r, 0, &callError{kind: errLost, err: fmt.Errorf("%s %s: connection closed before the response: %w", cmd["type"], id, r.lost)}
		}
		return r, r.at.Sub(start), nil
	case <-ctx.Done():
		c.forget(id, true)
		return reply{}, 0, &callError{kind: errWait, err: fmt.Errorf("%s %s: no response after %s: %w", cmd["type"], id, time.Since(start).Round(time.Millisecond), ctx.Err())}
	}
}

// forget drops a command that will not wait for its response; if the
// server may still answer it, its response is expected as late.
func (c *client) forget(id string, answerable bool) {
	c.mu.Lock()
	delete(c.pending, id)
	if answerable {
		c.abandoned[id] = struct{}{}
	}
	c.mu.Unlock()
}

// callErrorKind says how a command failed on the client's side.
type callErrorKind int

const (
	errSend callErrorKind = iota // the command could not be written
	errLost                      // the connection ended before the response
	errWait                      // the wait for the response ran out
)

// callError is a command that got no response.
type callError struct {
	kind callErrorKind
	err  error
}

func (e *callError) Error() string { return e.err.Error() }
func (e *callError) Unwrap() error { return e.err }

// close says goodbye, stops the reader and waits for it.
func (c *client) close() {
	// Close waits (up to 5 s) for the peer's close frame, which the
	// reader reads; a server that already hung up returns at once. A
	// slow reader reads what is left at full speed so the close frame
	// reaches it in time.
	c.hurry.Store(true)
	err := c.conn.Close(websocket.StatusNormalClosure, "bench done")
	_ = err // the connection may be gone already (server shut down): nothing to report
	c.stopReader()
	<-c.readerDone
}

// readMessage reads the next message into buf, which it empties first.
// It gives the library no context, so that reading a message costs what
// the socket costs (see client.read): the caller closes the connection
// to end a wait. The bench's clients and the baseline's read alike.
func readMessage(conn *websocket.Conn, buf *bytes.Buffer) error {
	_, r, err := conn.Reader(context.Background())
	if err != nil {
		return err
	}
	buf.Reset()
	_, err = buf.ReadFrom(r)
	return err
}

// frameType is a frame's "type". agentd writes it first, and under a
// global lifecycle broadcast most frames are read for nothing else: a
// frame that starts so is not parsed, any other is, with the reader's
// parser; v is the frame parsed if it had to be, else nil.
func (c *client) frameType(data []byte) (typ []byte, v *fastjson.Value) {
	const head = `{"type":"`
	if len(data) > len(head) && string(data[:len(head)]) == head {
		rest := data[len(head):]
		if i := bytes.IndexByte(rest, '"'); i >= 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			return rest[:i], nil
		}
	}
	v, err := c.json.Parse(data)
	if err != nil {
		return nil, nil
	}
	return []byte(jsonfield.String(v.Get("type"))), v
}

func prefix(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "..."
}
