package server

import (
	"bufio"
	"bytes"
	"net"
	"testing"
	"time"
)

// nopConn is a net.Conn that accepts every write and deadline.
type nopConn struct{ net.Conn }

func (nopConn) Write(p []byte) (int, error)      { return len(p), nil }
func (nopConn) SetWriteDeadline(time.Time) error { return nil }
func (nopConn) SetReadDeadline(time.Time) error  { return nil }
func (nopConn) Close() error                     { return nil }

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
		c := &WebSocket{conn: nopConn{}, br: bufio.NewReader(bytes.NewReader(input))}
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
