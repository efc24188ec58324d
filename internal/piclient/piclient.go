// Package piclient is a client of agentd serve's pi-server WebSocket, for
// the programs that drive a server over it: `agentd acp --connect`
// (package acp) and `agentd bench` (package loadgen). A Conn dials, waits
// for server_ready, sends commands and hands each its response by id,
// and gives every other frame, in order, to its owner's handler, from one
// reader goroutine that Close stops and waits for.
package piclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/valyala/fastjson"

	"github.com/agentd-dev/agentd/internal/jsonfield"
)

// Options configure Dial.
type Options struct {
	// Header is sent with the handshake (e.g. Authorization).
	Header http.Header
	// HTTPClient dials; nil is http.DefaultClient.
	HTTPClient *http.Client
	// Timeout bounds the dial and the wait for server_ready; 0 is 15 s.
	Timeout time.Duration
	// Until, when set, bounds the connection: it is closed when Until
	// ends. Without, it lasts until Close or the server ends it.
	Until context.Context
	// Frame gets every frame, server_ready first, in the order they came,
	// on the reader goroutine (the first on Dial's); a response is handed
	// to its command before, and Frame.Delivered says so. The frame's
	// bytes and parsed value are valid until it returns. The reader reads
	// the next frame when it returns, so a handler that sleeps makes a
	// slow client.
	Frame func(Frame)
	// NotReady, when set, is called with the type of a first frame that
	// is not server_ready, and the connection goes on (the frame is then
	// handled as any other); when nil, Dial fails.
	NotReady func(typ []byte)
	// Ended, when set, is called once by the reader when the connection
	// ends, with why, before the commands still waiting fail and Send
	// refuses new ones.
	Ended func(err error)
}

// Frame is one frame the server sent.
type Frame struct {
	// At is when the reader got it.
	At time.Time
	// Type is its "type" ("" for a frame without one).
	Type []byte
	// Data is the frame.
	Data []byte
	// Value is the frame parsed, when the reader had to parse it to find
	// its type or id; nil otherwise.
	Value *fastjson.Value
	// Delivered: a response handed to its command, or one that came
	// after its command gave up (Late). A response neither is unmatched.
	Delivered bool
}

// Reply is a command's response, or its loss.
type Reply struct {
	// At is when the reader got the response: the latency a caller
	// measures excludes its own wait to be scheduled.
	At      time.Time
	Success bool
	// Error is the server's error text when Success is false.
	Error string
	// Frame is a copy of the response frame when it has data.
	Frame []byte
	// Lost is why the connection ended before the response came.
	Lost error
}

// Get is the response's data, or the field of it at keys; nil if there
// is none.
func (r Reply) Get(keys ...string) *fastjson.Value {
	if r.Frame == nil {
		return nil
	}
	var p jsonfield.Parser
	v, err := p.Parse(r.Frame)
	if err != nil {
		return nil
	}
	return v.Get(append([]string{"data"}, keys...)...)
}

// Decode decodes the response's data into out; no data leaves out as it
// is.
func (r Reply) Decode(out any) error {
	if r.Frame == nil {
		return nil
	}
	var f struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(r.Frame, &f); err != nil {
		return err
	}
	if len(f.Data) == 0 {
		return nil
	}
	return json.Unmarshal(f.Data, out)
}

// DialError is a handshake that failed; Status is the HTTP status the
// server answered with, 0 if none.
type DialError struct {
	URL    string
	Status int
	Err    error
}

func (e *DialError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("dial %s: HTTP %d: %v", e.URL, e.Status, e.Err)
	}
	return fmt.Sprintf("dial %s: %v", e.URL, e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// ErrNotReady is Dial's error when the first frame is not server_ready.
var ErrNotReady = errors.New("the first frame is not server_ready")

// Conn is one connection to a pi-server WebSocket.
type Conn struct {
	ws  *websocket.Conn
	opt Options

	mu        sync.Mutex
	pending   map[string]chan Reply
	abandoned map[string]struct{} // commands that gave up waiting: their response is late, not unmatched
	late      int64
	dead      error // why the reader stopped; no new commands after it is set

	stop       context.CancelFunc
	readerDone chan struct{}
	lastFrame  time.Time        // reader only
	json       jsonfield.Parser // reader only
}

// Dial connects to the pi-server WebSocket at url (ws:// or wss://) and
// waits for its server_ready. ctx bounds the dial and the wait; the
// connection lasts until Close, the server ends it, or o.Until ends.
func Dial(ctx context.Context, url string, o Options) (*Conn, error) {
	if o.Timeout == 0 {
		o.Timeout = 15 * time.Second
	}
	dctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	ws, resp, err := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPClient: o.HTTPClient, HTTPHeader: o.Header})
	if err != nil {
		de := &DialError{URL: url, Err: err}
		if resp != nil {
			de.Status = resp.StatusCode
		}
		return nil, de
	}
	// get_state and agent_end frames carry whole messages; the default
	// 32 KiB limit is for untrusted peers.
	ws.SetReadLimit(64 << 20)
	c := &Conn{ws: ws, opt: o, pending: map[string]chan Reply{}, abandoned: map[string]struct{}{}, readerDone: make(chan struct{})}
	// The first frame, read here under dctx: a server that refuses the
	// connection closes it before server_ready, with its reason.
	var buf bytes.Buffer
	stop := context.AfterFunc(dctx, func() { _ = ws.CloseNow() })
	err = ReadMessage(ws, &buf)
	if !stop() || (err != nil && dctx.Err() != nil) {
		err = dctx.Err()
	}
	if err != nil {
		_ = ws.CloseNow()
		return nil, fmt.Errorf("no server_ready: %w", err)
	}
	c.lastFrame = time.Now()
	typ, v := c.frameType(buf.Bytes())
	ready := string(typ) == "server_ready"
	if !ready {
		if o.NotReady == nil {
			_ = ws.CloseNow()
			return nil, ErrNotReady
		}
		o.NotReady(typ)
	}
	c.handle(c.lastFrame, buf.Bytes(), typ, v)
	until := o.Until
	if until == nil {
		until = context.Background()
	}
	rctx, stopReader := context.WithCancel(until)
	c.stop = stopReader
	go c.read(rctx)
	return c, nil
}

// read reads frames until the connection ends; then every command
// waiting fails.
func (c *Conn) read(ctx context.Context) {
	defer close(c.readerDone)
	// The end of ctx closes the connection, which ends a Read waiting;
	// each Read itself gets no context: with one, the library registers
	// and removes a context.AfterFunc per message, which under a global
	// lifecycle broadcast made the bench's readers cost as much CPU as
	// the server they measure.
	stop := context.AfterFunc(ctx, func() { _ = c.ws.CloseNow() })
	defer stop()
	var buf bytes.Buffer // reused: what is kept of a frame is copied out of it before the next read
	for {
		err := ReadMessage(c.ws, &buf)
		if err == nil && ctx.Err() != nil {
			err = ctx.Err()
		}
		if err != nil {
			c.die(fmt.Errorf("%w (%s after the last frame)", err, time.Since(c.lastFrame).Round(time.Millisecond)))
			return
		}
		now := time.Now()
		c.lastFrame = now
		data := buf.Bytes()
		typ, v := c.frameType(data)
		c.handle(now, data, typ, v)
	}
}

// handle delivers a response to its command, and hands every frame to
// the owner.
func (c *Conn) handle(at time.Time, data, typ []byte, v *fastjson.Value) {
	delivered := false
	if string(typ) == "response" {
		if v == nil {
			v, _ = c.json.Parse(data)
		}
		delivered = c.deliver(at, data, v)
	}
	if c.opt.Frame != nil {
		c.opt.Frame(Frame{At: at, Type: typ, Data: data, Value: v, Delivered: delivered})
	}
}

// deliver hands a response to its command; false if no command waits
// for it and it is not a late one.
func (c *Conn) deliver(at time.Time, data []byte, v *fastjson.Value) bool {
	id := jsonfield.String(v.Get("id"))
	c.mu.Lock()
	ch := c.pending[id]
	delete(c.pending, id)
	_, late := c.abandoned[id]
	delete(c.abandoned, id)
	if late {
		c.late++
	}
	c.mu.Unlock()
	if late {
		return true
	}
	if ch == nil {
		return false
	}
	r := Reply{At: at, Success: v.GetBool("success"), Error: jsonfield.String(v.Get("error"))}
	if v.Get("data") != nil {
		r.Frame = bytes.Clone(data) // the buffer is the next frame's
	}
	ch <- r
	return true
}

// die tells the owner why the reader stopped, then fails every waiting
// command and every one after: the owner's state says why before any
// command learns it.
func (c *Conn) die(err error) {
	if c.opt.Ended != nil {
		c.opt.Ended(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dead = err
	for id, ch := range c.pending {
		ch <- Reply{Lost: err}
		delete(c.pending, id)
	}
}

// Err is why the connection ended; nil while it lasts.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

// Late is how many responses came after their command gave up waiting.
func (c *Conn) Late() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.late
}

// Send writes cmd with id (set as its "id") and returns the channel its
// response comes on, buffered: the reader never waits for a caller that
// gave up (Forget).
func (c *Conn) Send(ctx context.Context, id string, cmd map[string]any) (<-chan Reply, error) {
	cmd["id"] = id
	b, err := json.Marshal(cmd)
	if err != nil {
		return nil, &CallError{Kind: ErrSend, Err: fmt.Errorf("encode %s: %w", cmd["type"], err)}
	}
	ch := make(chan Reply, 1)
	c.mu.Lock()
	if c.dead != nil {
		err := c.dead
		c.mu.Unlock()
		return nil, &CallError{Kind: ErrLost, Err: fmt.Errorf("%s %s: connection closed: %w", cmd["type"], id, err)}
	}
	if _, dup := c.pending[id]; dup {
		c.mu.Unlock()
		return nil, &CallError{Kind: ErrSend, Err: fmt.Errorf("%s %s: id already in flight", cmd["type"], id)}
	}
	c.pending[id] = ch
	c.mu.Unlock()
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		c.Forget(id, false)
		return nil, &CallError{Kind: ErrSend, Err: fmt.Errorf("send %s %s: %w", cmd["type"], id, err)}
	}
	return ch, nil
}

// Call sends cmd with id and waits for its response. The latency is from
// just before the write to the reader receiving the response frame.
func (c *Conn) Call(ctx context.Context, id string, cmd map[string]any) (Reply, time.Duration, error) {
	start := time.Now()
	ch, err := c.Send(ctx, id, cmd)
	if err != nil {
		return Reply{}, 0, err
	}
	select {
	case r := <-ch:
		if r.Lost != nil {
			return r, 0, &CallError{Kind: ErrLost, Err: fmt.Errorf("%s %s: connection closed before the response: %w", cmd["type"], id, r.Lost)}
		}
		return r, r.At.Sub(start), nil
	case <-ctx.Done():
		c.Forget(id, true)
		return Reply{}, 0, &CallError{Kind: ErrWait, Err: fmt.Errorf("%s %s: no response after %s: %w", cmd["type"], id, time.Since(start).Round(time.Millisecond), ctx.Err())}
	}
}

// Forget drops a command that will not wait for its response; if the
// server may still answer it (answerable), its response counts as late.
func (c *Conn) Forget(id string, answerable bool) {
	c.mu.Lock()
	delete(c.pending, id)
	if answerable {
		c.abandoned[id] = struct{}{}
	}
	c.mu.Unlock()
}

// CallErrorKind says how a command failed on the client's side.
type CallErrorKind int

const (
	ErrSend CallErrorKind = iota // the command could not be written
	ErrLost                      // the connection ended before the response
	ErrWait                      // the wait for the response ran out
)

// CallError is a command that got no response.
type CallError struct {
	Kind CallErrorKind
	Err  error
}

func (e *CallError) Error() string { return e.Err.Error() }
func (e *CallError) Unwrap() error { return e.Err }

// Close says goodbye with reason, stops the reader and waits for it. The
// library's Close waits (up to 5 s) for the server's close frame, which
// the reader reads; a server that already hung up returns at once.
func (c *Conn) Close(reason string) {
	_ = c.ws.Close(websocket.StatusNormalClosure, reason) // the connection may be gone already: nothing to report
	c.stop()
	<-c.readerDone
}

// Done is closed when the reader has ended.
func (c *Conn) Done() <-chan struct{} { return c.readerDone }

// ReadMessage reads the next message into buf, which it empties first.
// It gives the library no context, so that reading a message costs what
// the socket costs: the caller closes the connection to end a wait.
func ReadMessage(conn *websocket.Conn, buf *bytes.Buffer) error {
	_, r, err := conn.Reader(context.Background())
	if err != nil {
		return err
	}
	buf.Reset()
	_, err = buf.ReadFrom(r)
	return err
}

// frameType is a frame's "type", with the reader's parser.
func (c *Conn) frameType(data []byte) ([]byte, *fastjson.Value) { return FrameType(&c.json, data) }

// FrameType is a frame's "type". agentd writes it first, and under a
// global lifecycle broadcast most frames are read for nothing else: a
// frame that starts so is not parsed, any other is, with p; v is the
// frame parsed if it had to be, else nil.
func FrameType(p *jsonfield.Parser, data []byte) (typ []byte, v *fastjson.Value) {
	const head = `{"type":"`
	if len(data) > len(head) && string(data[:len(head)]) == head {
		rest := data[len(head):]
		if i := bytes.IndexByte(rest, '"'); i >= 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			return rest[:i], nil
		}
	}
	v, err := p.Parse(data)
	if err != nil {
		return nil, nil
	}
	return []byte(jsonfield.String(v.Get("type"))), v
}
