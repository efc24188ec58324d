package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// wsServer accepts WebSocket connections and hands each to serve.
func wsServer(t *testing.T, o WebSocketOptions, serve func(*WebSocket)) *httptest.Server {
	t.Helper()
	var wg sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Counted before the upgrade: once the connection is hijacked,
		// srv.Close no longer waits for this handler.
		wg.Add(1)
		defer wg.Done()
		c, err := AcceptWebSocket(w, r, o)
		if err != nil {
			return
		}
		defer c.Drop()
		serve(c)
	}))
	t.Cleanup(func() {
		srv.Close()
		wg.Wait()
	})
	return srv
}

func dialWS(t *testing.T, srv *httptest.Server, h http.Header) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// pingSeen is a client's connection that closes sent once the client has
// written a ping frame (a client frame's first byte is FIN and the opcode:
// 0x89), so a test can order a message after the ping without sleeping.
type pingSeen struct {
	net.Conn
	once sync.Once
	sent chan struct{}
}

func (c *pingSeen) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if len(b) > 0 && b[0] == 0x89 {
		c.once.Do(func() { close(c.sent) })
	}
	return n, err
}

// dialWSPingSeen dials like dialWS through a pingSeen connection and
// returns its sent channel.
func dialWSPingSeen(t *testing.T, srv *httptest.Server) (*websocket.Conn, <-chan struct{}) {
	t.Helper()
	sent := make(chan struct{})
	var d net.Dialer
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &pingSeen{Conn: nc, sent: sent}, nil
	}}
	t.Cleanup(tr.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c, sent
}

// echo reads messages and writes back, for each, its length and text,
// until the connection ends.
func echo(max int, ended chan<- error) func(*WebSocket) {
	return func(c *WebSocket) {
		for {
			var buf []byte
			n, err := c.Read(&buf, max)
			if err != nil {
				ended <- err
				return
			}
			if err := c.WriteText([][]byte{fmt.Appendf(nil, "%d:%s", n, buf)}); err != nil {
				ended <- err
				return
			}
		}
	}
}

func TestWebSocketReadsAndAnswers(t *testing.T) {
	ended := make(chan error, 1)
	srv := wsServer(t, WebSocketOptions{}, echo(10, ended))
	c, pingSent := dialWSPingSeen(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	read := func() string {
		t.Helper()
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if err := c.Write(ctx, websocket.MessageText, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "5:hello" {
		t.Errorf("echo = %q", got)
	}
	// A message in fragments.
	w, err := c.Writer(ctx, websocket.MessageText)
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{"ab", "cd", "ef"} {
		if _, err := w.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "6:abcdef" {
		t.Errorf("fragmented = %q", got)
	}
	// Over the limit: the full length is reported, max+1 bytes kept, and
	// the connection goes on.
	if err := c.Write(ctx, websocket.MessageText, []byte(strings.Repeat("x", 100000))); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "100000:"+strings.Repeat("x", 11) {
		t.Errorf("oversize = %q", got)
	}
	// A ping is answered while messages flow (the client library reads
	// the pong in its Read).
	pinged := make(chan error, 1)
	go func() { pinged <- c.Ping(ctx) }()
	// The ping must be on the wire before the message, so that the read
	// of the answer below also reads the pong.
	select {
	case <-pingSent:
	case <-ctx.Done():
		t.Fatal("the ping was never written")
	}
	if err := c.Write(ctx, websocket.MessageText, []byte("after ping")); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "10:after ping" {
		t.Errorf("after ping = %q", got)
	}
	if err := <-pinged; err != nil {
		t.Fatalf("ping: %v", err)
	}
	// The client closes: the server's reader learns it, the handshake
	// completes.
	if err := c.Close(4000, "bye"); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := <-ended; !errors.Is(err, ErrWebSocketClosed) {
		t.Errorf("server reader ended with %v", err)
	}
}

func TestWebSocketBatchAndClose(t *testing.T) {
	srv := wsServer(t, WebSocketOptions{}, func(c *WebSocket) {
		var batch [][]byte
		for i := range 500 {
			batch = append(batch, fmt.Appendf(nil, "m%d", i))
		}
		if err := c.WriteText(batch); err != nil {
			return
		}
		c.Close(1008, strings.Repeat("r", 200))
		var buf []byte
		for {
			if _, err := c.Read(&buf, 0); err != nil {
				return
			}
		}
	})
	c := dialWS(t, srv, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range 500 {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if string(b) != fmt.Sprintf("m%d", i) {
			t.Fatalf("message %d = %q", i, b)
		}
	}
	_, _, err := c.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 1008 || len(ce.Reason) != 123 {
		t.Errorf("close = %v", err)
	}
}

func TestWebSocketOrigin(t *testing.T) {
	srv := wsServer(t, WebSocketOptions{OriginPatterns: []string{"*.example.test"}}, func(c *WebSocket) { c.Close(1000, "") })
	for origin, ok := range map[string]bool{
		"":                        true,
		"http://app.example.test": true,
		"http://evil.com":         false,
		"not a url":               false,
	} {
		h := http.Header{}
		if origin != "" {
			h.Set("Origin", origin)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), &websocket.DialOptions{HTTPHeader: h})
		cancel()
		if ok != (err == nil) {
			t.Errorf("origin %q: err %v", origin, err)
		}
		if !ok && (resp == nil || resp.StatusCode != http.StatusForbidden) {
			t.Errorf("origin %q: response %v, want 403", origin, resp)
		}
		if c != nil {
			c.CloseNow()
		}
	}
}

// A request that is not a WebSocket handshake gets the status it always
// got: 405, 400 or 426 (with the version the server speaks).
func TestWebSocketNotAHandshake(t *testing.T) {
	srv := wsServer(t, WebSocketOptions{}, func(c *WebSocket) { c.Close(1000, "") })
	ws := http.Header{"Connection": {"keep-alive, Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}}
	with := func(k, v string) http.Header {
		h := ws.Clone()
		if v == "" {
			h.Del(k)
		} else {
			h.Set(k, v)
		}
		return h
	}
	tests := []struct {
		name    string
		method  string
		h       http.Header
		status  int
		version string
	}{
		{"plain GET", http.MethodGet, http.Header{}, http.StatusBadRequest, ""},
		{"POST", http.MethodPost, ws, http.StatusMethodNotAllowed, ""},
		{"no Upgrade", http.MethodGet, with("Upgrade", ""), http.StatusBadRequest, ""},
		{"no Connection: Upgrade", http.MethodGet, with("Connection", "keep-alive"), http.StatusBadRequest, ""},
		{"version 8", http.MethodGet, with("Sec-Websocket-Version", "8"), http.StatusUpgradeRequired, "13"},
		{"bad key", http.MethodGet, with("Sec-Websocket-Key", "short"), http.StatusBadRequest, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, srv.URL, nil)
			req.Header = tt.h
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.status || resp.Header.Get("Sec-Websocket-Version") != tt.version {
				t.Errorf("%d (version %q), want %d (%q)", resp.StatusCode, resp.Header.Get("Sec-Websocket-Version"), tt.status, tt.version)
			}
		})
	}
}

// A client frame without a mask breaks the protocol: the server answers
// 1002 and ends the connection.
func TestWebSocketUnmaskedFrame(t *testing.T) {
	ended := make(chan error, 1)
	srv := wsServer(t, WebSocketOptions{}, echo(100, ended))
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	if _, err := conn.Write([]byte{0x81, 0x02, 'h', 'i'}); err != nil { // FIN text, length 2, no mask
		t.Fatal(err)
	}
	var pe *ProtocolError
	if err := <-ended; !errors.As(err, &pe) {
		t.Fatalf("server reader ended with %v", err)
	}
	head := make([]byte, 4)
	if _, err := br.Read(head); err != nil {
		t.Fatal(err)
	}
	if head[0] != 0x88 || head[2] != 0x03 || head[3] != 0xea { // close, code 1002
		t.Errorf("close frame = % x", head)
	}
}

// A close reason longer than a close frame holds is cut at a character
// boundary: 122 × "x" + "é" closes with the 122 x's, valid UTF-8, not a
// reason ending in half of the é (which a browser takes as a protocol
// error).
func TestWebSocketCloseReasonClippedAtACharacter(t *testing.T) {
	reason := strings.Repeat("x", 122) + "é"
	srv := wsServer(t, WebSocketOptions{}, func(c *WebSocket) {
		c.Close(4001, reason)
		var buf []byte
		for {
			if _, err := c.Read(&buf, 0); err != nil {
				return
			}
		}
	})
	c := dialWS(t, srv, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err := c.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 4001 || ce.Reason != strings.Repeat("x", 122) {
		t.Errorf("close = %v, want 4001 with 122 x's", err)
	}
}

func TestClipUTF8(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"abc", 3, "abc"},
		{"abcd", 3, "abc"},
		{"abé", 3, "ab"},  // é is 2 bytes: it does not fit whole
		{"abé", 4, "abé"}, // it does
		{"a€b", 3, "a"},   // € is 3 bytes
		{"a€b", 4, "a€"},
		{"😀", 3, ""},           // 4 bytes
		{"x\xffy", 2, "x\xff"}, // bytes that are no UTF-8 are kept as they are
		{strings.Repeat("x", 122) + "é", MaxCloseReason, strings.Repeat("x", 122)},
	}
	for _, tt := range tests {
		if got := ClipUTF8(tt.in, tt.n); got != tt.want {
			t.Errorf("ClipUTF8(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

// clip and clipRunes, for log lines and progress text, cut where
// ClipUTF8 does and mark the cut; the log's clip cut inside a character.
func TestClipRunes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdef", 3, "abc…"},
		{"ab" + "é" + "cd", 3, "ab…"},
		{"€uro", 2, "…"},
	} {
		if got := clipRunes(tc.in, tc.n); got != tc.want {
			t.Errorf("clipRunes(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
		if got := clip(tc.in, tc.n); got != tc.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
