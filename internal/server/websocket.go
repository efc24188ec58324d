package server

import (
	"bufio"
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

	"github.com/gobwas/ws"
)

// WebSocket is the server side of one WebSocket connection, for every
// face that speaks WebSocket. It is built on gobwas/ws's frame-level API
// rather than a message-level library because a server that streams
// events must send many small messages cheaply: WriteText writes every
// message it is given under one deadline and one flush (one syscall for a
// batch), where a message-level library flushes, and arms a timer, per
// message.
type WebSocket struct {
	conn net.Conn
	br   *bufio.Reader

	// wmu: one writer at a time (batches, pongs, pings, close). A leaf:
	// taken by the connection's own goroutines, nothing under it.
	wmu       sync.Mutex
	closeSent bool
	bufs      *WriteBuffers
	// hdr is where a frame header is made, under wmu: the library's
	// WriteHeader allocates one per message.
	hdr [ws.MaxHeaderSize]byte

	inMessage bool // a fragmented message is being read
	// draining: Drain is reading; drainLeft is how many more bytes it
	// takes. Only the reader touches them.
	draining  bool
	drainLeft int64
	lastPong  atomic.Int64
	closeOnce sync.Once
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

// wsBufferSize is the write buffer: a batch of small messages goes out in
// one write per this many bytes. Buffers are pooled and held only while
// writing, so an idle connection holds none.
const wsBufferSize = 64 << 10

// WriteBuffers are the write buffers WebSocket connections share while
// writing (one set per server).
type WriteBuffers struct{ pool sync.Pool }

// withBuffer runs fn with a write buffer on the connection and flushes
// it; c.wmu is held.
func (c *WebSocket) withBuffer(fn func(*bufio.Writer) error) error {
	var bw *bufio.Writer
	if c.bufs != nil {
		bw, _ = c.bufs.pool.Get().(*bufio.Writer)
	}
	if bw == nil {
		bw = bufio.NewWriterSize(c.conn, wsBufferSize)
	}
	bw.Reset(c.conn)
	err := fn(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	if c.bufs != nil {
		c.bufs.pool.Put(bw)
	}
	return err
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
	conn, rw, _, err := ws.HTTPUpgrader{Timeout: 10 * time.Second}.Upgrade(r, w)
	if err != nil {
		if conn != nil {
			_ = conn.Close()
		}
		return nil, fmt.Errorf("websocket handshake: %w", err)
	}
	c := &WebSocket{conn: conn, br: rw.Reader, bufs: o.Buffers}
	c.lastPong.Store(time.Now().UnixNano())
	return c, nil
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
	total := 0
	var scratch [4096]byte
	for {
		h, err := ws.ReadHeader(c.br)
		if err != nil {
			return total, err
		}
		if err := c.drained(2); err != nil {
			return total, err
		}
		state := ws.StateServerSide
		if c.inMessage {
			state |= ws.StateFragmented
		}
		if err := ws.CheckHeader(h, state); err != nil {
			c.failProtocol(err.Error())
			return total, &ProtocolError{err.Error()}
		}
		if h.OpCode.IsControl() {
			payload := make([]byte, h.Length)
			if _, err := io.ReadFull(c.br, payload); err != nil {
				return total, err
			}
			if err := c.drained(len(payload)); err != nil {
				return total, err
			}
			ws.Cipher(payload, h.Mask, 0)
			switch h.OpCode {
			case ws.OpPing:
				if err := c.writeControl(ws.OpPong, payload); err != nil {
					return total, err
				}
			case ws.OpPong:
				c.lastPong.Store(time.Now().UnixNano())
			case ws.OpClose:
				code, _ := ws.ParseCloseFrameData(payload)
				if code == 0 {
					code = ws.StatusNoStatusRcvd
				}
				c.sendClose(int(code), "")
				return total, ErrWebSocketClosed
			}
			continue
		}
		c.inMessage = !h.Fin
		// Read the payload in chunks, unmasking as it comes, keeping what
		// fits.
		var off int64
		for off < h.Length {
			n := int64(len(scratch))
			if rem := h.Length - off; rem < n {
				n = rem
			}
			chunk := scratch[:n]
			if _, err := io.ReadFull(c.br, chunk); err != nil {
				return total, err
			}
			if err := c.drained(len(chunk)); err != nil {
				return total, err
			}
			ws.Cipher(chunk, h.Mask, int(off))
			if keep := max + 1 - len(*buf); keep > 0 {
				*buf = append(*buf, chunk[:min(int64(keep), n)]...)
			}
			off += n
		}
		total += int(h.Length)
		if h.Fin {
			return total, nil
		}
	}
}

// WriteText writes text messages in one go: one write deadline for the
// batch, one flush (one syscall per buffer's worth).
func (c *WebSocket) WriteText(msgs [][]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closeSent {
		return ErrWebSocketClosed
	}
	if err := c.conn.SetWriteDeadline(time.Now().Add(wsWriteTimeout)); err != nil {
		return err
	}
	return c.withBuffer(func(bw *bufio.Writer) error {
		for _, m := range msgs {
			if err := ws.WriteHeaderBuffer(bw, ws.Header{Fin: true, OpCode: ws.OpText, Length: int64(len(m))}, c.hdr[:]); err != nil {
				return err
			}
			if _, err := bw.Write(m); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeControl writes one control frame.
func (c *WebSocket) writeControl(op ws.OpCode, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closeSent {
		return nil
	}
	return c.writeControlLocked(op, payload)
}

func (c *WebSocket) writeControlLocked(op ws.OpCode, payload []byte) error {
	if err := c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	return c.withBuffer(func(bw *bufio.Writer) error {
		if err := ws.WriteHeaderBuffer(bw, ws.Header{Fin: true, OpCode: op, Length: int64(len(payload))}, c.hdr[:]); err != nil {
			return err
		}
		_, err := bw.Write(payload)
		return err
	})
}

// Ping sends a ping; PongSince says whether its pong came.
func (c *WebSocket) Ping() error { return c.writeControl(ws.OpPing, nil) }

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

// sendClose writes the close frame once.
func (c *WebSocket) sendClose(code int, reason string) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closeSent {
		return
	}
	reason = ClipCloseReason(reason)
	var body []byte
	if code != int(ws.StatusNoStatusRcvd) && code != 0 {
		body = ws.NewCloseFrameBody(ws.StatusCode(code), reason)
	}
	_ = c.writeControlLocked(ws.OpClose, body)
	c.closeSent = true
	if tc, ok := c.conn.(interface{ CloseWrite() error }); ok {
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
	c.sendClose(int(ws.StatusProtocolError), reason)
	c.Drop()
}

// Drop closes the underlying connection at once.
func (c *WebSocket) Drop() {
	c.closeOnce.Do(func() { _ = c.conn.Close() })
}

// RemoteAddr is the peer's address.
func (c *WebSocket) RemoteAddr() string { return c.conn.RemoteAddr().String() }
