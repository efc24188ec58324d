package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// WebSocket is the server side of one WebSocket connection, for every
// face that speaks WebSocket. coder/websocket does the protocol (the
// handshake, frame parsing and validation, fragments, answering a
// peer's close); agentd adds what a streaming server needs on top:
//
//   - WriteText writes a batch of messages under one write deadline and
//     one flush: the connection is "corked" for the batch, so the
//     library's flush per message lands in a pooled buffer and the batch
//     costs one syscall per buffer's worth, not one per message.
//   - Close sends the close frame and returns at once; the reader (Read,
//     or Drain for a peer that floods) takes the peer's answer. The
//     library's own Close waits for the answer with a fixed 5 s and then
//     resets a connection that still has input, which loses the close
//     frame for a client sending a burst.
//   - Pings and pongs are this type's (Ping, PongSince), under the same
//     writer lock and deadlines as data.
type WebSocket struct {
	ws   *websocket.Conn
	conn *wsConn

	// wmu: one writer at a time (batches, pongs, pings, close). A leaf:
	// taken by the connection's own goroutines, nothing under it.
	wmu       sync.Mutex
	closeSent atomic.Bool
	bufs      *WriteBuffers

	// scratch takes the bytes of a message past what Read keeps; made on
	// the first oversize message. Only the reader touches it.
	scratch []byte
	// draining: Drain is reading; drainLeft is how many more bytes it
	// takes. Only the reader touches them.
	draining  bool
	drainLeft int64
	lastPong  atomic.Int64
}

// WebSocketOptions configure AcceptWebSocket.
type WebSocketOptions struct {
	// OriginPatterns are the browser origins allowed besides the server's
	// own host, as host patterns (path.Match); clients that send no Origin,
	// such as programs, are always allowed.
	OriginPatterns []string
	// Buffers, when set, lend write buffers for the time of a write
	// (Server.WriteBuffers); without, each write allocates its own.
	Buffers *WriteBuffers
}

// wsWriteTimeout bounds one batch's write: a client that stops reading is
// cut off instead of holding its writer forever.
const wsWriteTimeout = 30 * time.Second

// wsControlTimeout bounds writing one control frame.
const wsControlTimeout = 5 * time.Second

// wsBufferSize is the write buffer: a batch of small messages goes out in
// one write per this many bytes. Buffers are pooled and held only while
// writing, so an idle connection holds none.
const wsBufferSize = 64 << 10

// wsFrameBuffer is the library's own per-connection write buffer: a
// frame header or a control frame fits; a larger payload passes through
// to the batch buffer (or the socket) without a copy.
const wsFrameBuffer = 256

// WriteBuffers are the write buffers WebSocket connections share while
// writing (one set per server).
type WriteBuffers struct{ pool sync.Pool }

func (b *WriteBuffers) get(w io.Writer) *bufio.Writer {
	var bw *bufio.Writer
	if b != nil {
		bw, _ = b.pool.Get().(*bufio.Writer)
	}
	if bw == nil {
		bw = bufio.NewWriterSize(w, wsBufferSize)
	}
	bw.Reset(w)
	return bw
}

func (b *WriteBuffers) put(bw *bufio.Writer) {
	bw.Reset(nil)
	if b != nil {
		b.pool.Put(bw)
	}
}

// wsConn is the hijacked connection as the library sees it. While a
// writer holds it corked, what the library writes collects in a batch
// buffer, flushed once at the end of the batch.
type wsConn struct {
	net.Conn
	mu    sync.Mutex // the library's writes and the cork
	batch *bufio.Writer
	once  sync.Once
	cerr  error
}

func (w *wsConn) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.batch != nil {
		return w.batch.Write(p)
	}
	return w.Conn.Write(p)
}

// cork collects writes in a buffer from bufs until uncork.
func (w *wsConn) cork(bufs *WriteBuffers) {
	w.mu.Lock()
	w.batch = bufs.get(w.Conn)
	w.mu.Unlock()
}

// uncork flushes what collected (unless the batch failed) and returns the
// buffer.
func (w *wsConn) uncork(bufs *WriteBuffers, failed bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var err error
	if !failed {
		err = w.batch.Flush()
	}
	bufs.put(w.batch)
	w.batch = nil
	return err
}

func (w *wsConn) Close() error {
	w.once.Do(func() { w.cerr = w.Conn.Close() })
	return w.cerr
}

// hijacker hands the library the hijacked connection wrapped in a
// wsConn, with a small write buffer of its own.
type hijacker struct {
	http.ResponseWriter
	conn *wsConn
}

func (h *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.conn = &wsConn{Conn: nc}
	return h.conn, bufio.NewReadWriter(brw.Reader, bufio.NewWriterSize(h.conn, wsFrameBuffer)), nil
}

// AcceptWebSocket completes a WebSocket handshake. A browser request from
// an origin that is neither the server's own host nor allowed gets 403;
// a request that is not a WebSocket handshake gets the library's error
// status.
func AcceptWebSocket(w http.ResponseWriter, r *http.Request, o WebSocketOptions) (*WebSocket, error) {
	if err := checkOrigin(r, o.OriginPatterns); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return nil, err
	}
	if status, err := checkHandshake(w, r); err != nil {
		http.Error(w, err.Error(), status)
		return nil, fmt.Errorf("websocket handshake: %w", err)
	}
	c := &WebSocket{bufs: o.Buffers}
	hj := &hijacker{ResponseWriter: w}
	ws, err := websocket.Accept(hj, r, &websocket.AcceptOptions{
		// checkOrigin above, whose patterns and messages are agentd's.
		InsecureSkipVerify: true,
		// As before the move from gobwas/ws: no permessage-deflate. The
		// frames are small JSON, mostly already joined; deflate would cost
		// CPU and a compressor's memory per connection.
		CompressionMode: websocket.CompressionDisabled,
		OnPingReceived:  c.onPing,
		OnPongReceived:  func(context.Context, []byte) { c.lastPong.Store(time.Now().UnixNano()) },
	})
	if err != nil {
		if hj.conn != nil {
			_ = hj.conn.Close()
		}
		return nil, fmt.Errorf("websocket handshake: %w", err)
	}
	// Read takes any length and keeps at most its max: the caller decides
	// what an oversize message means.
	ws.SetReadLimit(-1)
	c.ws, c.conn = ws, hj.conn
	c.lastPong.Store(time.Now().UnixNano())
	return c, nil
}

// onPing answers a ping under the writer lock, with the control frame's
// deadline, and not at all once the close is sent (the library would
// write its pong on a connection whose writing side is shut).
func (c *WebSocket) onPing(_ context.Context, payload []byte) bool {
	_ = c.writeControl(opPong, payload)
	return false
}

// checkHandshake answers a request that is not a WebSocket handshake
// with the statuses agentd has always given (the library answers 426 to
// a plain GET, where agentd's clients and tests know 400): 405 for a
// method but GET, 400 without Upgrade: websocket and Connection: Upgrade,
// 426 (naming version 13) for another protocol version. The library
// checks the rest (the key).
func checkHandshake(w http.ResponseWriter, r *http.Request) (int, error) {
	switch {
	case r.Method != http.MethodGet:
		return http.StatusMethodNotAllowed, fmt.Errorf("a WebSocket handshake is a GET, not %s", r.Method)
	case !headerHasToken(r.Header, "Upgrade", "websocket"):
		return http.StatusBadRequest, errors.New("not a WebSocket handshake: no Upgrade: websocket header")
	case !headerHasToken(r.Header, "Connection", "upgrade"):
		return http.StatusBadRequest, errors.New("not a WebSocket handshake: no Connection: Upgrade header")
	case r.Header.Get("Sec-WebSocket-Version") != "13":
		w.Header().Set("Sec-WebSocket-Version", "13")
		return http.StatusUpgradeRequired, fmt.Errorf("WebSocket version %q is not supported: only 13", r.Header.Get("Sec-WebSocket-Version"))
	}
	return 0, nil
}

// headerHasToken reports whether a comma-separated header names token
// (case-insensitive).
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// checkOrigin allows a request with no Origin (not a browser), one from
// the server's own host, and one whose origin host matches a pattern.
func checkOrigin(r *http.Request, patterns []string) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return fmt.Errorf("request Origin %q is not a valid URL with a host", origin)
	}
	if strings.EqualFold(u.Host, r.Host) {
		return nil
	}
	for _, p := range patterns {
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(u.Host)); ok {
			return nil
		}
	}
	return fmt.Errorf("request Origin %q is not authorized for Host %q", u.Host, r.Host)
}

// ErrWebSocketClosed is what Read returns once the peer has closed the
// connection (after the close handshake).
var ErrWebSocketClosed = errors.New("websocket closed")

// ProtocolError is a peer that broke the WebSocket protocol; the
// connection has been closed with 1002.
type ProtocolError struct{ Reason string }

func (e *ProtocolError) Error() string { return "websocket protocol error: " + e.Reason }

// Read reads the next data message, appending to *buf at most max+1 of its
// bytes (the rest is read and dropped), and returns its full length, so a
// caller can refuse an oversize message and go on. Control frames are
// answered on the way: a ping gets its pong, a pong is noted for the
// heartbeat, a close gets its reply and ends the connection
// (ErrWebSocketClosed).
func (c *WebSocket) Read(buf *[]byte, max int) (int, error) {
	_, r, err := c.ws.Reader(context.Background())
	if err != nil {
		return 0, c.readError(err)
	}
	if err := c.drained(0); err != nil {
		return 0, err
	}
	total := 0
	for {
		// Read into *buf's room while it keeps bytes, then into scratch.
		var dst []byte
		keep := max + 1 - len(*buf)
		if keep > 0 {
			if cap(*buf)-len(*buf) < min(keep, 512) {
				*buf = append(*buf, make([]byte, min(keep, 4096))...)[:len(*buf)]
			}
			dst = (*buf)[len(*buf):min(cap(*buf), len(*buf)+keep)]
		} else {
			if c.scratch == nil {
				c.scratch = make([]byte, 4096)
			}
			dst = c.scratch
		}
		n, err := r.Read(dst)
		total += n
		if keep > 0 {
			*buf = (*buf)[:len(*buf)+n]
		}
		if derr := c.drained(n); derr != nil {
			return total, derr
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, c.readError(err)
		}
	}
}

// readError maps the library's read errors: a close from the peer is
// ErrWebSocketClosed; a broken protocol is a ProtocolError, and the
// connection is closed with 1002 (the library sends it for most
// violations itself, not for an unmasked frame); failures of the
// connection pass as they are.
func (c *WebSocket) readError(err error) error {
	var ce websocket.CloseError
	var ne net.Error
	switch {
	case errors.As(err, &ce):
		return ErrWebSocketClosed
	case errors.Is(err, ErrDrainLimit), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed), errors.As(err, &ne):
		return err
	}
	c.failProtocol(err.Error())
	return &ProtocolError{err.Error()}
}

// WriteText writes text messages in one go: one write deadline for the
// batch, one flush (one syscall per buffer's worth).
func (c *WebSocket) WriteText(msgs [][]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closeSent.Load() {
		return ErrWebSocketClosed
	}
	if err := c.conn.SetWriteDeadline(time.Now().Add(wsWriteTimeout)); err != nil {
		return err
	}
	// The deadline bounds this batch only: the library writes its answer
	// to a peer's close after it, on its own clock.
	defer c.conn.SetWriteDeadline(time.Time{})
	c.conn.cork(c.bufs)
	var err error
	for _, m := range msgs {
		// context.Background: the deadline is the connection's, set
		// above; a context with a deadline costs a timer per frame.
		if err = c.ws.Write(context.Background(), websocket.MessageText, m); err != nil {
			break
		}
	}
	if ferr := c.conn.uncork(c.bufs, err != nil); err == nil {
		err = ferr
	}
	return err
}

// The control opcodes this type writes itself (RFC 6455, 5.5).
const (
	opClose = 0x8
	opPing  = 0x9
	opPong  = 0xA
)

// writeControl writes one control frame, unless the close is sent.
func (c *WebSocket) writeControl(op byte, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closeSent.Load() {
		return nil
	}
	return c.writeControlLocked(op, payload)
}

// writeControlLocked writes a control frame (at most 125 bytes of
// payload; a server's frames are not masked) in one write: the library
// writes only under wmu or in one write of its own (its answer to a
// close), so the frame is never inside another.
func (c *WebSocket) writeControlLocked(op byte, payload []byte) error {
	if err := c.conn.SetWriteDeadline(time.Now().Add(wsControlTimeout)); err != nil {
		return err
	}
	defer c.conn.SetWriteDeadline(time.Time{})
	var frame [2 + 125]byte
	frame[0] = 0x80 | op
	frame[1] = byte(copy(frame[2:], payload))
	_, err := c.conn.Write(frame[:2+int(frame[1])])
	return err
}

// Ping sends a ping; PongSince says whether its pong came.
func (c *WebSocket) Ping() error { return c.writeControl(opPing, nil) }

// PongSince reports whether a pong arrived after t.
func (c *WebSocket) PongSince(t time.Time) bool { return c.lastPong.Load() >= t.UnixNano() }

// closeWait is how long a peer has to answer a close, and how long a
// peer being drained may send nothing.
const closeWait = 5 * time.Second

// Close closes the connection with a close code and a reason (cut to the
// 123 bytes a close frame holds): it sends the close frame, stops writing,
// and gives the peer a few seconds to answer before the connection is
// dropped. The reader (Read) returns once the peer has answered or the
// time is up; Close may be called more than once.
func (c *WebSocket) Close(code int, reason string) {
	c.sendClose(code, reason)
	// Read returns when the peer's close arrives, or at this deadline.
	_ = c.conn.SetReadDeadline(time.Now().Add(closeWait))
}

// ErrDrainLimit is Drain's error once the peer has sent its limit.
var ErrDrainLimit = errors.New("websocket: the peer sent more than the drain limit after the close")

// Drain reads and drops what the peer sends after Close until its close
// answer arrives (ErrWebSocketClosed), it sends nothing for closeWait, or
// it has sent limit bytes (ErrDrainLimit). The close's deadline moves on
// with every chunk read: a peer still sending a burst is alive, and
// however long reading the burst takes on a loaded machine, the peer's
// writes go through and its close frame then reaches it. A connection
// closed with unread input is reset instead, and the reset makes the
// peer's kernel drop what it had not read yet, the close frame with it.
// The limit bounds what a peer that never stops costs.
func (c *WebSocket) Drain(limit int64) error {
	c.draining, c.drainLeft = true, limit
	defer func() { c.draining = false }()
	var buf []byte
	for {
		if _, err := c.Read(&buf, 0); err != nil {
			return err
		}
		buf = buf[:0]
	}
}

// drained counts n bytes read against a drain, and gives the peer
// closeWait more; outside Drain it does nothing.
func (c *WebSocket) drained(n int) error {
	if !c.draining {
		return nil
	}
	if c.drainLeft -= int64(n); c.drainLeft < 0 {
		return ErrDrainLimit
	}
	return c.conn.SetReadDeadline(time.Now().Add(closeWait))
}

// sendClose writes the close frame once, and shuts the writing side: the
// library's answer to the peer's close, should it come, is not sent
// twice.
func (c *WebSocket) sendClose(code int, reason string) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closeSent.Load() {
		return
	}
	var body []byte
	if code != int(websocket.StatusNoStatusRcvd) && code != 0 {
		reason = ClipCloseReason(reason)
		body = make([]byte, 2+len(reason))
		body[0], body[1] = byte(code>>8), byte(code)
		copy(body[2:], reason)
	}
	_ = c.writeControlLocked(opClose, body)
	c.closeSent.Store(true)
	if tc, ok := c.conn.Conn.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
}

// MaxCloseReason is the most bytes of reason a close frame holds (its
// payload is at most 125 bytes, 2 of them the code).
const MaxCloseReason = 123

// ClipCloseReason cuts a close reason to what a close frame holds, at a
// character boundary: a reason cut inside a UTF-8 character is invalid
// UTF-8, which browsers treat as a protocol error (1006, reason lost).
// Every face's WebSocket closes through it.
func ClipCloseReason(reason string) string { return ClipUTF8(reason, MaxCloseReason) }

// ClipUTF8 cuts s to at most n bytes without splitting a UTF-8 character.
func ClipUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Back up over continuation bytes (10xxxxxx) to the start of the
	// character that does not fit.
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// failProtocol closes a connection whose peer broke the protocol.
func (c *WebSocket) failProtocol(reason string) {
	c.sendClose(int(websocket.StatusProtocolError), reason)
	c.Drop()
}

// Drop closes the underlying connection at once.
func (c *WebSocket) Drop() { _ = c.ws.CloseNow() }

// RemoteAddr is the peer's address.
func (c *WebSocket) RemoteAddr() string { return c.conn.RemoteAddr().String() }
