package sessionws

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/server"
)

// conn is one client connection, watching the session of its URL.
type conn struct {
	f      *Face
	ws     *server.WebSocket
	client *server.Client
	id     string
	who    server.Principal
	remote string

	// lastActive is when the client last sent anything (a message or a
	// pong), unix ns.
	lastActive atomic.Int64

	// op serializes what changes the subscription (subscribe,
	// unsubscribe, the move off a session that left this node: move.go)
	// with the messages that read it.
	op sync.Mutex
	// ctx ends when the connection's reader does.
	ctx context.Context

	mu sync.Mutex
	// h is the session when this node runs it; nil for one another
	// cluster node runs (cluster.go), or once it moved there (move.go).
	h     *server.Hosted
	watch *watch // while subscribed
	// seeded is the owner's reading of a session another node runs,
	// for a query_state before the client subscribed.
	seeded *trackedView
	// sent are the times of the messages of the last second, for the
	// rate limit.
	sent []time.Time
}

// Write implements server.Link: every message waiting, in one write.
func (c *conn) Write(_ context.Context, frames [][]byte) error { return c.ws.WriteText(frames) }

// Close implements server.Link, mapping the layer's reasons to the
// spec's close codes.
func (c *conn) Close(cl server.Close) {
	code := closeNormal
	switch cl.Kind {
	case server.CloseGoingAway:
		code = closeGoingAway
	case server.CloseOverloaded:
		code = closeServerError
	}
	if cl.Code != 0 {
		code = cl.Code
	}
	c.ws.Close(code, server.ClipCloseReason(cl.Reason))
}

// run reads the client's messages until it goes, with the heartbeat
// beside it.
func (c *conn) run() {
	f := c.f
	c.lastActive.Store(f.opt.Now().UnixNano())
	ctx, cancel := context.WithCancel(f.srv.Context())
	c.ctx = ctx
	var hb sync.WaitGroup
	if f.opt.Heartbeat > 0 {
		hb.Add(1)
		go func() {
			defer hb.Done()
			c.heartbeat(ctx)
		}()
	}
	// The server shutting down unblocks the reader.
	stop := context.AfterFunc(ctx, func() { c.ws.Close(closeGoingAway, "Server shutting down") })
	c.read()
	stop()
	cancel()
	hb.Wait()
	c.op.Lock()
	c.unsubscribe()
	c.op.Unlock()
	c.client.Close(server.Close{})
	<-c.client.Done()
}

func (c *conn) read() {
	max := c.f.opt.MaxMessageBytes
	buf := make([]byte, 0, 4096)
	for {
		buf = buf[:0]
		n, err := c.ws.Read(&buf, max)
		if err != nil {
			return
		}
		c.lastActive.Store(c.f.opt.Now().UnixNano())
		if !c.admitMessage() {
			c.fail(closeTooMany, protocolError("rate_limit_exceeded", "Too many messages: at most "+strconv.Itoa(c.f.opt.MessageRate)+" per second", nil, c.f.opt.Now()))
			c.drain()
			return
		}
		if n > max {
			c.sendError(protocolError("message_too_large", "Message of "+strconv.Itoa(n)+" bytes is over the limit of "+strconv.Itoa(max)+" bytes", map[string]any{"max_bytes": max}, c.f.opt.Now()))
			continue
		}
		c.handle(buf)
		if cap(buf) > 64<<10 {
			buf = make([]byte, 0, 4096) // do not keep a large message's buffer
		}
	}
}

// drain reads and drops what the client still sends after the server
// closed, until its close answer arrives, it goes quiet past the close's
// deadline, or it has sent drainLimit bytes (server.WebSocket.Drain). A
// connection closed with unread input is reset by the kernel, and a
// reset makes the client's kernel drop what it had not read yet: the
// close frame with its code, so a client that sent a burst would see
// 1006 instead of 4429. The deadline moves on while the client sends:
// a fixed one ran out on a loaded machine while the server was still
// reading a 24 MiB burst.
func (c *conn) drain() { _ = c.ws.Drain(drainLimit) }

// drainLimit bounds what a client closed for its message rate may send
// before the server hangs up without reading further: many times what
// the kernel buffers between client and server hold, so a client that
// bursts and then reads learns why it was closed; one that sends more
// is not listening.
const drainLimit = 256 << 20

// admitMessage counts a message against the rate limit.
func (c *conn) admitMessage() bool {
	now := c.f.opt.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	i := 0
	for i < len(c.sent) && now.Sub(c.sent[i]) >= time.Second {
		i++
	}
	c.sent = append(c.sent[:0], c.sent[i:]...)
	if len(c.sent) >= c.f.opt.MessageRate {
		return false
	}
	c.sent = append(c.sent, now)
	return true
}

// heartbeat pings every interval, as a JSON ping and a WebSocket ping
// (which browsers answer by themselves); a client that sent nothing over
// two intervals is closed with 1001.
func (c *conn) heartbeat(ctx context.Context) {
	d := c.f.opt.Heartbeat
	t := time.NewTicker(d)
	defer t.Stop()
	var prev time.Time // the tick before the last
	last := c.f.opt.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := c.f.opt.Now()
		active := time.Unix(0, c.lastActive.Load())
		if c.ws.PongSince(prev) && !prev.IsZero() {
			active = now // a control pong counts as much as a message
		}
		if !prev.IsZero() && active.Before(prev) {
			c.client.Close(server.Close{Kind: server.CloseGoingAway, Reason: "Heartbeat timeout: no answer to two pings"})
			return
		}
		prev, last = last, now
		c.client.Send(encode(&pingMsg{Type: "ping", Timestamp: stamp(now)}))
		if err := c.ws.Ping(); err != nil {
			return
		}
	}
}

// fail sends an error and closes with code once it is written.
func (c *conn) fail(code int, e *errorMsg) {
	c.sendError(e)
	c.client.Close(server.Close{Kind: server.CloseNormal, Code: code, Reason: e.Message})
}

func (c *conn) sendError(e *errorMsg) {
	if e.SessionID == "" {
		e.SessionID = c.id
	}
	c.afterEvents(func(seq uint64) []byte {
		e.Seq = &seq
		return encode(e)
	})
}

// afterEvents queues the frame build makes from the seq of the last
// event frame queued to the client (server.SendAfterEvents), wherever
// its subscription is: on the hosted session, or, for a session another
// node runs, this node's feed of it or the session once taken over here.
func (c *conn) afterEvents(build func(seq uint64) []byte) {
	h := c.hosted()
	if h == nil {
		h = c.f.srv.Watched(c.client, c.id)
	}
	if h == nil {
		c.client.Send(build(0))
		return
	}
	c.f.srv.SendAfterEvents(c.client, h, build)
}

// view is what the connection reads of its session: the hosted session,
// or the view its watch keeps of one another node runs.
func (c *conn) view() view {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.h != nil {
		return hostedView{c.h}
	}
	if c.watch != nil {
		return c.watch.v
	}
	return c.seeded
}

// handle answers one client message.
func (c *conn) handle(b []byte) {
	now := c.f.opt.Now()
	v, err := c.f.schema()
	if err != nil {
		// The embedded schema does not resolve: a broken build, which
		// TestCheckClientMessages catches; say so rather than guess.
		c.sendError(protocolError("internal_error", "The message schema could not be loaded", nil, now))
		return
	}
	typ, body, perr := v.check(b)
	if perr != nil {
		c.sendError(perr.message(now))
		return
	}
	if sid, _ := body["session_id"].(string); sid != "" && sid != c.id {
		c.sendError(protocolError("session_mismatch", "This connection watches session "+c.id+"; connect to "+SessionsPath+sid+" to watch "+sid, map[string]any{"session_id": sid}, now))
		return
	}
	if typ != "ping" && typ != "pong" {
		c.op.Lock()
		defer c.op.Unlock()
	}
	h := c.hosted()
	switch typ {
	case "subscribe":
		c.subscribe(body)
	case "unsubscribe":
		c.leave(func(seq uint64) []byte {
			return encode(&unsubscribedMsg{Type: "unsubscribed", SessionID: c.id, Timestamp: stamp(now), Seq: seq})
		})
		c.client.Close(server.Close{Kind: server.CloseNormal, Reason: "Unsubscribed"})
	case "ping":
		ts, _ := body["timestamp"].(string)
		if ts == "" {
			ts = stamp(now)
		}
		c.client.Send(encode(&pongMsg{Type: "pong", Timestamp: ts}))
	case "pong":
		// A sign of life, counted already.
	case "query_state":
		if h == nil {
			c.queryStateAway(now)
			return
		}
		snap := c.snapshot(now)
		c.f.srv.SendAfterEvents(c.client, h, func(seq uint64) []byte {
			snap.Seq = max(snap.Seq, seq)
			return encode(snap)
		})
	case "provide_input":
		if h == nil {
			c.provideInputAway(body, now)
			return
		}
		c.provideInput(h, body, now)
	}
}

// subscribe starts (or resumes) watching: subscribed first, then what
// was missed or the snapshot, then live messages.
func (c *conn) subscribe(body map[string]any) {
	var after *uint64
	if v, ok := body["after_seq"].(float64); ok {
		a := uint64(v)
		after = &a
	}
	h := c.hosted()
	if h == nil {
		c.subscribeAway(after)
		return
	}
	gone := func() {
		c.fail(closeNotFound, protocolError("session_not_found", "Session "+c.id+" does not exist", nil, c.f.opt.Now()))
	}
	select {
	case <-h.Gone():
		if !h.Deleted() {
			// Unloaded, not deleted: it runs on another node now, or
			// opens again when asked (move.go).
			c.dropHosted()
			c.subscribeAway(after)
			return
		}
		gone()
		return
	default:
	}
	c.mu.Lock()
	w := c.watch
	c.mu.Unlock()
	if w == nil {
		w = c.f.watchFor(h)
		c.mu.Lock()
		c.watch = w // released when c closes
		c.mu.Unlock()
		if !w.add(c) {
			// Deleted after the check above, and the watch has told its
			// connections already: this one would hear nothing.
			gone()
			return
		}
	}
	hold := server.NewHold()
	res := c.f.srv.Subscribe(c.client, h, w, after, hold)
	now := c.f.opt.Now()
	st := h.Status()
	c.client.Send(encode(&subscribedMsg{Type: "subscribed", SessionID: c.id, CurrentState: st.State, ProgressPercentage: st.Step.Percent,
		SubscribedAt: stamp(now), Seq: res.Seq, Resumed: res.Resumed, CursorTooOld: res.TooOld}))
	if res.TooOld {
		snap := c.snapshot(now)
		snap.Seq = res.Seq
		c.client.Send(encode(snap))
	}
	if !res.Resumed {
		// What is waiting on a person now, whatever the cursor.
		for _, r := range h.Session().Interactions() {
			c.client.Send(encode(w.inputRequired(r, res.Seq, now)))
		}
		c.client.Send(encode(w.progress(res.Seq, now)))
	}
	hold.Release()
}

func (c *conn) unsubscribe() { c.leave(nil) }

// leave stops watching; bye, when given, makes the last message from the
// seq of the last event sent, queued as the subscription ends so that it
// reflects every event before it and none follows.
func (c *conn) leave(bye func(seq uint64) []byte) {
	c.mu.Lock()
	w, h := c.watch, c.h
	c.watch = nil
	c.mu.Unlock()
	if w == nil {
		if bye != nil {
			c.client.Send(bye(0))
		}
		return
	}
	if w.away != nil {
		c.f.srv.UnwatchAfterEvents(c.client, c.id, bye)
		c.f.stopAway(w)
		return
	}
	w.remove(c)
	if bye != nil {
		c.f.srv.UnsubscribeAfterEvents(c.client, h, bye)
	} else {
		c.f.srv.Unsubscribe(c.client, h)
	}
	c.f.release(w)
}

// provideInput answers a pending interaction; the first answer from any
// face wins.
func (c *conn) provideInput(h *server.Hosted, body map[string]any, now time.Time) {
	data, _ := body["input_data"].(map[string]any)
	qid, _ := body["question_id"].(string)
	qid, e := c.f.answer(h, qid, data, now)
	if e != nil {
		c.sendError(e)
		return
	}
	c.f.srv.SendAfterEvents(c.client, h, func(seq uint64) []byte {
		return encode(&inputReceivedMsg{Type: "input_received", SessionID: c.id, QuestionID: qid, Timestamp: stamp(now), Seq: seq})
	})
}

// answer gives question qid of hosted session h (the only one pending
// when qid is "") the answer data, or says why not: provide_input on the
// session's node, for a client of this node or of another (cluster.go).
func (f *Face) answer(h *server.Hosted, qid string, data map[string]any, now time.Time) (string, *errorMsg) {
	sess := h.Session()
	if qid == "" {
		pending := sess.Interactions()
		switch len(pending) {
		case 0:
			return "", protocolError("no_pending_input", "Session "+h.ID()+" is not waiting for input", nil, now)
		case 1:
			qid = pending[0].ID
		default:
			ids := make([]string, len(pending))
			for i, p := range pending {
				ids[i] = p.ID
			}
			return "", protocolError("invalid_message_format", strconv.Itoa(len(pending))+" questions are pending: name one with question_id", map[string]any{"pending_questions": ids}, now)
		}
	}
	req, ok := sess.InteractionByID(qid)
	if !ok {
		f.mu.Lock()
		w := f.watches[h]
		f.mu.Unlock()
		if w != nil {
			if by, known := w.resolution(qid); known {
				return "", answerError(qid, &interaction.ResolvedError{ID: qid, By: by}, now)
			}
		}
		return "", protocolError("question_not_found", "Question "+qid+" is not pending (it was answered, timed out or never asked)", map[string]any{"question_id": qid}, now)
	}
	resp, verr := responseOf(req, data)
	if verr != nil {
		return "", verr.message(now)
	}
	if err := sess.Answer(qid, resp); err != nil {
		return "", answerError(qid, err, now)
	}
	return qid, nil
}

// answerError tells a client why its answer was not taken.
func answerError(qid string, err error, now time.Time) *errorMsg {
	var resolved *interaction.ResolvedError
	var verr *interaction.ValidationError
	switch {
	case errors.As(err, &resolved):
		return protocolError("question_already_answered", "Question "+qid+" was already resolved: "+resolved.Error(), map[string]any{"question_id": qid}, now)
	case errors.As(err, &verr):
		return protocolError("invalid_input", "Invalid input: "+verr.Error(), map[string]any{"question_id": qid, "field": verr.Field}, now)
	case errors.Is(err, interaction.ErrNotFound):
		return protocolError("question_not_found", "Question "+qid+" is not pending", map[string]any{"question_id": qid}, now)
	}
	if fe := fault.As(err); fe != nil {
		return protocolError("invalid_input", fe.Message, map[string]any{"question_id": qid}, now)
	}
	return protocolError("internal_error", "The answer could not be delivered", map[string]any{"question_id": qid}, now)
}
