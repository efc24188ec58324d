package server

import (
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
)

// A WebSocket passed on to a session's owner (ClusterProxy: the
// per-session WebSocket of a client of another node) ends with a close
// frame when the owner dies, as the SSE stream ends with a comment
// (sseCut): 1001 (going away, the spec's code for a server that stops),
// with a reason that says to reconnect and resume with after_seq. Before,
// the proxy closed the client's TCP connection without one, mid-frame if
// the owner died mid-frame, and a client could not tell a dead node from
// a broken network. The reconnection is a GET, which ClusterProxy holds
// until the session's next owner (or this node) can serve it.
//
// The owner's bytes go to the client by whole frames (a frame is buffered
// until its last byte has come), so the close frame never lands inside
// one; a control frame may come between the fragments of a message
// (RFC 6455 §5.4), so frames are enough, messages need not be whole.

// wsCloseGoingAway is RFC 6455's 1001, the session WebSocket spec's code
// for a server that goes away.
const wsCloseGoingAway = 1001

// wsCut is the owner's side of a WebSocket passed on: reads give the
// client whole frames, and a close frame when the owner's connection
// breaks without one; writes (the client's frames) go to the owner.
type wsCut struct {
	conn   io.ReadWriteCloser
	reason string
	buf    []byte // read, not yet a whole frame
	out    []byte // whole frames (or the final close) to give out
	// closing is set once the owner sent a close frame: the end of
	// its connection after that is the close handshake, as it is.
	closing bool
	ended   bool
	// broken is set once a write to the owner failed: the read side
	// (which fails too) ends the connection, with the close frame,
	// rather than the proxy's copier closing the client's connection
	// first on the write error.
	broken atomic.Bool
}

func newWSCut(conn io.ReadWriteCloser, sessionID string) *wsCut {
	return &wsCut{conn: conn, reason: ClipCloseReason("The node running session " + sessionID + " stopped; reconnect and subscribe with after_seq")}
}

func (c *wsCut) Read(p []byte) (int, error) {
	for len(c.out) == 0 {
		if c.ended {
			return 0, io.EOF
		}
		chunk := make([]byte, 32<<10)
		n, err := c.conn.Read(chunk)
		c.buf = append(c.buf, chunk[:n]...)
		if k := c.wholeFrames(); k > 0 {
			c.out = append(c.out, c.buf[:k]...)
			c.buf = append(c.buf[:0], c.buf[k:]...)
		}
		if err != nil {
			if c.closing {
				c.out = append(c.out, c.buf...) // the owner closed: as it is
			} else {
				// The owner went away: what is left is not a whole frame,
				// and is dropped; the client resumes from the last event
				// it got.
				c.out = append(c.out, wsCloseFrame(wsCloseGoingAway, c.reason)...)
			}
			c.buf, c.ended = nil, true
		}
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

// wholeFrames is the length of the whole frames buf starts with; it
// notes a close frame among them.
func (c *wsCut) wholeFrames() int {
	at := 0
	for {
		n, op, ok := wsFrameLen(c.buf[at:])
		if !ok {
			return at
		}
		if op == 0x8 {
			c.closing = true
		}
		at += n
	}
}

// wsFrameLen is the length of the frame b starts with, header and
// payload, and its opcode; ok false while b does not hold all of it.
func wsFrameLen(b []byte) (n int, op byte, ok bool) {
	if len(b) < 2 {
		return 0, 0, false
	}
	op = b[0] & 0x0f
	head := 2
	size := uint64(b[1] & 0x7f)
	switch size {
	case 126:
		head += 2
		if len(b) < head {
			return 0, 0, false
		}
		size = uint64(binary.BigEndian.Uint16(b[2:4]))
	case 127:
		head += 8
		if len(b) < head {
			return 0, 0, false
		}
		size = binary.BigEndian.Uint64(b[2:10])
	}
	if b[1]&0x80 != 0 {
		head += 4 // a mask key (a server's frames have none; passed as they are)
	}
	if len(b) < head || size > uint64(len(b)-head) {
		return 0, 0, false
	}
	return head + int(size), op, true
}

// wsCloseFrame is an unmasked close frame (a server's) with code and
// reason; reason is at most 123 bytes (ClipCloseReason).
func wsCloseFrame(code uint16, reason string) []byte {
	f := make([]byte, 4, 4+len(reason))
	f[0] = 0x80 | 0x8 // FIN, close
	f[1] = byte(2 + len(reason))
	binary.BigEndian.PutUint16(f[2:], code)
	return append(f, reason...)
}

// Write passes the client's frames on; once a write failed, it drops
// them (see broken).
func (c *wsCut) Write(p []byte) (int, error) {
	if c.broken.Load() {
		return len(p), nil
	}
	if _, err := c.conn.Write(p); err != nil {
		c.broken.Store(true)
	}
	return len(p), nil
}

func (c *wsCut) Close() error { return c.conn.Close() }

// cutWebSocket wraps the owner's side of a WebSocket upgrade (wsCut).
func cutWebSocket(res *http.Response, sessionID string) error {
	if res.StatusCode != http.StatusSwitchingProtocols || !strings.EqualFold(res.Header.Get("Upgrade"), "websocket") {
		return nil
	}
	conn, ok := res.Body.(io.ReadWriteCloser)
	if !ok {
		return errors.New("a WebSocket upgrade passed on has no connection to write to")
	}
	res.Body = newWSCut(conn, sessionID)
	return nil
}
