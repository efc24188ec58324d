package server

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// inputConn is a net.Conn whose reads are input, and which accepts
// every write and deadline.
type inputConn struct {
	net.Conn
	in *bytes.Reader
}

func (c inputConn) Read(p []byte) (int, error)     { return c.in.Read(p) }
func (inputConn) Write(p []byte) (int, error)      { return len(p), nil }
func (inputConn) SetDeadline(time.Time) error      { return nil }
func (inputConn) SetWriteDeadline(time.Time) error { return nil }
func (inputConn) SetReadDeadline(time.Time) error  { return nil }
func (inputConn) Close() error                     { return nil }
func (inputConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }

// hijackable is a ResponseWriter whose connection is conn.
type hijackable struct {
	*httptest.ResponseRecorder
	conn net.Conn
}

func (h hijackable) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return h.conn, bufio.NewReadWriter(bufio.NewReader(h.conn), bufio.NewWriter(h.conn)), nil
}

// acceptInput is a WebSocket, past the handshake, that reads input.
func acceptInput(t *testing.T, input []byte) *WebSocket {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Upgrade", "websocket")
	r.Header.Set("Sec-WebSocket-Version", "13")
	r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	c, err := AcceptWebSocket(hijackable{httptest.NewRecorder(), inputConn{in: bytes.NewReader(input)}}, r, WebSocketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// FuzzWebSocketRead feeds a client's bytes to the frame reader: it never
// panics, never keeps more than max+1 bytes of a message, and ends with
// an error at the end of the input.
func FuzzWebSocketRead(f *testing.F) {
	masked := func(op byte, fin bool, payload string) []byte {
		b := []byte{op, 0x80 | byte(len(payload)), 1, 2, 3, 4}
		if fin {
			b[0] |= 0x80
		}
		p := []byte(payload)
		for i := range p {
			p[i] ^= b[2+i%4]
		}
		return append(b, p...)
	}
	f.Add(masked(0x1, true, `{"type":"list_sessions"}`))
	f.Add(append(masked(0x1, false, "ab"), masked(0x0, true, "cd")...))
	f.Add(append(masked(0x9, true, "ping"), masked(0x1, true, "x")...))
	f.Add(masked(0x8, true, "\x03\xe8bye"))
	f.Add([]byte{0x81, 0x02, 'h', 'i'})
	f.Add([]byte{0x81, 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, input []byte) {
		const max = 16
		c := acceptInput(t, input)
		defer c.Drop()
		for range 1000 {
			var buf []byte
			n, err := c.Read(&buf, max)
			if len(buf) > max+1 || len(buf) > n {
				t.Fatalf("kept %d bytes of a %d-byte message (max %d)", len(buf), n, max)
			}
			if err != nil {
				return
			}
		}
		t.Fatal("no end of input after 1000 messages")
	})
}
