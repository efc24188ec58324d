package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

// wsFrame is an unmasked frame with opcode op and payload.
func wsFrame(op byte, payload string) []byte {
	f := []byte{0x80 | op}
	switch n := len(payload); {
	case n < 126:
		f = append(f, byte(n))
	case n < 1<<16:
		f = append(f, 126, 0, 0)
		binary.BigEndian.PutUint16(f[2:], uint16(n))
	default:
		f = append(f, 127, 0, 0, 0, 0, 0, 0, 0, 0)
		binary.BigEndian.PutUint64(f[2:], uint64(n))
	}
	return append(f, payload...)
}

// brokenConn gives parts, then err; writes fail with werr.
type brokenConn struct {
	brokenBody
	werr   error
	writes int
}

func (b *brokenConn) Write(p []byte) (int, error) {
	b.writes++
	if b.werr != nil {
		return 0, b.werr
	}
	return len(p), nil
}

func join(parts ...[]byte) string { return string(bytes.Join(parts, nil)) }

// A WebSocket passed on goes out by whole frames; one the owner closes
// (close frame, then the end of the connection) goes out as it is, one
// that breaks ends after its last whole frame with a close frame that
// says why.
func TestWSCut(t *testing.T) {
	closeFrame := string(wsCloseFrame(wsCloseGoingAway, "The node running session s stopped; reconnect and subscribe with after_seq"))
	text := wsFrame(0x1, `{"type":"event","seq":1}`+"\n")
	big := wsFrame(0x1, strings.Repeat("x", 70000))
	mid := wsFrame(0x1, strings.Repeat("y", 300))
	ping := wsFrame(0x9, "")
	ownerClose := wsFrame(0x8, "\x03\xe9bye")
	tests := []struct {
		name  string
		parts []string
		err   error
		want  string
	}{
		{"broken at once", nil, errors.New("reset"), closeFrame},
		{"broken between frames", []string{join(text, ping)}, io.EOF, join(text, ping) + closeFrame},
		{"broken mid-frame", []string{join(text, big[:40000])}, io.ErrUnexpectedEOF, string(text) + closeFrame},
		{"broken mid-header", []string{join(text, mid[:3])}, io.EOF, string(text) + closeFrame},
		{"a frame in many reads", []string{string(big[:1]), string(big[1:5]), string(big[5:65536]), string(big[65536:])}, io.EOF, string(big) + closeFrame},
		{"closed by the owner", []string{join(text, ownerClose)}, io.EOF, join(text, ownerClose)},
		{"closed by the owner, then broken", []string{join(ownerClose, text[:3])}, errors.New("reset"), join(ownerClose, text[:3])},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn := &brokenConn{brokenBody: brokenBody{parts: tc.parts, err: tc.err}}
			got, err := io.ReadAll(newWSCut(conn, "s"))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got %q,\nwant %q", clipFrames(got), clipFrames([]byte(tc.want)))
			}
		})
	}
}

func clipFrames(b []byte) string {
	if len(b) > 200 {
		return string(b[:100]) + "…" + string(b[len(b)-100:])
	}
	return string(b)
}

// The close frame is well formed: FIN and opcode 8, no mask, the code
// and a reason a client can read, within a control frame's 125 bytes
// however long the session id.
func TestWSCloseFrame(t *testing.T) {
	c := newWSCut(&brokenConn{}, strings.Repeat("é", 200))
	f := wsCloseFrame(wsCloseGoingAway, c.reason)
	n, op, ok := wsFrameLen(f)
	if !ok || n != len(f) || op != 0x8 || f[0] != 0x88 || f[1]&0x80 != 0 || int(f[1]) > 125 {
		t.Fatalf("close frame % x: len %d op %d ok %v", f[:4], n, op, ok)
	}
	if code := binary.BigEndian.Uint16(f[2:4]); code != 1001 {
		t.Errorf("code %d, want 1001", code)
	}
}

// A write to an owner that is gone is dropped rather than reported: the
// proxy's copier would otherwise close the client's connection before
// the read side sent the close frame.
func TestWSCutWriteToADeadOwner(t *testing.T) {
	conn := &brokenConn{werr: errors.New("broken pipe")}
	c := newWSCut(conn, "s")
	for range 3 {
		if n, err := c.Write([]byte("abc")); n != 3 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if conn.writes != 1 {
		t.Errorf("%d writes reached the dead owner, want 1", conn.writes)
	}
}

// Whatever the owner sends, however it arrives, what the client gets is
// the owner's bytes up to the end of their last whole frame and then one
// close frame, or, when the owner closed (a close frame among them),
// everything as it was.
func FuzzWSCut(f *testing.F) {
	f.Add([]byte{0x81, 0x02, 'h', 'i', 0x89, 0x00}, 3)
	f.Add([]byte{0x81, 0x7e, 0x01, 0x00, 'x'}, 1)
	f.Add([]byte{0x88, 0x02, 0x03, 0xe8, 0x81}, 2)
	f.Add([]byte{0x81, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 4)
	f.Add([]byte{0x81, 0x84, 1, 2, 3, 4, 'a', 'b', 'c', 'd'}, 5)
	f.Fuzz(func(t *testing.T, in []byte, cut int) {
		step := max(1, cut%17+1)
		var parts []string
		for rest := in; len(rest) > 0; {
			n := min(len(rest), step)
			parts = append(parts, string(rest[:n]))
			rest = rest[n:]
		}
		got, err := io.ReadAll(newWSCut(&brokenConn{brokenBody: brokenBody{parts: parts, err: io.EOF}}, "s"))
		if err != nil {
			t.Fatal(err)
		}
		whole, closed := 0, false
		for {
			n, op, ok := wsFrameLen(in[whole:])
			if !ok {
				break
			}
			closed = closed || op == 0x8
			whole += n
		}
		want := append(append([]byte(nil), in[:whole]...), wsCloseFrame(wsCloseGoingAway, "The node running session s stopped; reconnect and subscribe with after_seq")...)
		if closed {
			want = in
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("got % x\nwant % x", got, want)
		}
	})
}
