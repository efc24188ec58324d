package main

// A black-box client of the per-session WebSocket face
// (/api/v1/ws/sessions/{id}): it dials the built binary, collects every
// message, and checks each against the schema the server serves. Names
// start with sw.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// swMsg is one message received.
type swMsg struct {
	raw string
	m   map[string]any
}

func (m swMsg) typ() string { s, _ := m.m["type"].(string); return s }
func (m swMsg) str(k string) string {
	s, _ := m.m[k].(string)
	return s
}
func (m swMsg) num(k string) float64 {
	f, _ := m.m[k].(float64)
	return f
}
func (m swMsg) seq() uint64 { return uint64(m.num("seq")) }

// pause stops reading, as a client that stopped reading; resume goes on.
func (c *swClient) pause() {
	c.mu.Lock()
	c.paused = make(chan struct{})
	c.mu.Unlock()
}

func (c *swClient) resume() {
	c.mu.Lock()
	close(c.paused)
	c.mu.Unlock()
}

// swClient is one connection.
type swClient struct {
	t   *testing.T
	ws  *websocket.Conn
	url string

	mu      sync.Mutex
	msgs    []swMsg
	changed chan struct{}
	closed  bool
	code    websocket.StatusCode
	reason  string
	err     error
	// paused holds the reader, as a client that stopped reading.
	paused chan struct{}
	// stopping: the test closes the connection; what the reader then
	// gets is no failure.
	stopping bool

	stop func()
}

// swSchema compiles the schema the server serves, once per server.
func swSchema(t *testing.T, s *svServer) *jsonschema.Schema {
	t.Helper()
	resp, err := http.Get("http://" + s.loopback() + "/api/v1/ws/schema.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), "schema+json") {
		t.Fatalf("schema: HTTP %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	b, _ := io.ReadAll(resp.Body)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	const url = "https://agentd.dev/schemas/session-websocket.json"
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(url + "#/$defs/server")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

type swDial struct {
	path   string // default /api/v1/ws/sessions/<id>
	token  string // Authorization: Bearer
	query  string
	header http.Header
	// smallBuffer shrinks the client's socket receive buffer, so a client
	// that stops reading backs up into the server's queue quickly.
	smallBuffer bool
	// wait bounds the dial (svReadyWait when 0): a node may hold an
	// upgrade until a session's next owner can take it.
	wait time.Duration
}

// swConnect dials the face for session id; it does not subscribe.
func swConnect(t *testing.T, s *svServer, schema *jsonschema.Schema, id string, o swDial) *swClient {
	t.Helper()
	path := o.path
	if path == "" {
		path = "/api/v1/ws/sessions/" + id
	}
	url := "ws://" + s.loopback() + path
	if o.query != "" {
		url += "?" + o.query
	}
	h := o.header
	if h == nil {
		h = http.Header{}
	}
	if o.token != "" {
		h.Set("Authorization", "Bearer "+o.token)
	}
	wait := svReadyWait
	if o.wait > 0 {
		wait = o.wait
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	do := &websocket.DialOptions{HTTPHeader: h}
	if o.smallBuffer {
		do.HTTPClient = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				_ = conn.(*net.TCPConn).SetReadBuffer(4096)
			}
			return conn, err
		}}}
	}
	ws, resp, err := websocket.Dial(ctx, url, do)
	if err != nil {
		status := ""
		if resp != nil {
			status = resp.Status
		}
		t.Fatalf("dialing %s: %v (HTTP %s)\nserver stderr:\n%s", url, err, status, s.stderrTail(3000))
	}
	ws.SetReadLimit(16 << 20)
	c := &swClient{t: t, ws: ws, url: url, changed: make(chan struct{}), paused: make(chan struct{})}
	close(c.paused)
	rctx, rcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c.mu.Lock()
			p := c.paused
			c.mu.Unlock()
			select {
			case <-p:
			case <-rctx.Done():
				c.end(rctx.Err())
				return
			}
			_, b, err := ws.Read(rctx)
			if err != nil {
				c.end(err)
				return
			}
			var m map[string]any
			if jerr := json.Unmarshal(b, &m); jerr != nil {
				c.end(fmt.Errorf("message is not a JSON object: %q", b))
				return
			}
			if !bytes.HasSuffix(b, []byte("\n")) || bytes.Count(b, []byte("\n")) != 1 {
				c.end(fmt.Errorf("message is not one line ending with a newline: %q", b))
				return
			}
			if schema != nil {
				inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(b))
				if verr := schema.Validate(inst); verr != nil {
					c.end(fmt.Errorf("message does not match the served schema: %v\n%s", verr, b))
					return
				}
			}
			c.mu.Lock()
			c.msgs = append(c.msgs, swMsg{raw: string(b), m: m})
			close(c.changed)
			c.changed = make(chan struct{})
			c.mu.Unlock()
		}
	}()
	var once sync.Once
	c.stop = func() {
		once.Do(func() {
			c.mu.Lock()
			c.stopping = true
			c.mu.Unlock()
			rcancel()
			_ = ws.CloseNow()
			<-done
		})
	}
	t.Cleanup(func() {
		c.stop()
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.err != nil && !c.closed {
			t.Errorf("%s: %v", url, c.err)
		}
	})
	return c
}

func (c *swClient) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		c.closed, c.code, c.reason = true, ce.Code, ce.Reason
	} else if c.err == nil && !c.stopping && !errors.Is(err, context.Canceled) {
		c.err = err
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *swClient) send(v any) {
	c.t.Helper()
	b, ok := v.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(v); err != nil {
			c.t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), svWait)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// mark is where later waits start.
func (c *swClient) mark() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.msgs)
}

func (c *swClient) all() []swMsg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]swMsg(nil), c.msgs...)
}

// waitFor waits for a message from index from on that pred accepts.
func (c *swClient) waitFor(from int, what string, pred func(swMsg) bool) (int, swMsg) {
	c.t.Helper()
	deadline := time.NewTimer(svWait)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		for i := from; i < len(c.msgs); i++ {
			if pred(c.msgs[i]) {
				m := c.msgs[i]
				c.mu.Unlock()
				return i + 1, m
			}
		}
		ch, closed, err := c.changed, c.closed, c.err
		c.mu.Unlock()
		if closed || err != nil {
			c.t.Fatalf("waiting for %s: connection ended (close %d %q, err %v); got:\n%s", what, c.code, c.reason, err, c.dump(from))
		}
		select {
		case <-ch:
		case <-deadline.C:
			c.t.Fatalf("no %s within %v; got:\n%s", what, svWait, c.dump(from))
		}
	}
}

// waitType waits for the next message of type typ.
func (c *swClient) waitType(from int, typ string) (int, swMsg) {
	c.t.Helper()
	return c.waitFor(from, typ, func(m swMsg) bool { return m.typ() == typ })
}

func (c *swClient) dump(from int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for i := from; i < len(c.msgs); i++ {
		b.WriteString(e2eClip(c.msgs[i].raw, 400))
	}
	return b.String()
}

// waitClosed waits for the server to close and returns its close code
// and reason.
func (c *swClient) waitClosed() (websocket.StatusCode, string) {
	c.t.Helper()
	deadline := time.NewTimer(svWait)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ch, closed, err := c.changed, c.closed, c.err
		code, reason := c.code, c.reason
		c.mu.Unlock()
		if closed {
			return code, reason
		}
		if err != nil {
			c.t.Fatalf("connection failed without a close frame: %v", err)
		}
		select {
		case <-ch:
		case <-deadline.C:
			c.t.Fatalf("the server did not close within %v; got:\n%s", svWait, c.dump(0))
		}
	}
}

// subscribe subscribes and returns the subscribed message.
func (c *swClient) subscribe(id string, extra map[string]any) swMsg {
	c.t.Helper()
	from := c.mark()
	m := map[string]any{"type": "subscribe", "session_id": id}
	for k, v := range extra {
		m[k] = v
	}
	c.send(m)
	_, sub := c.waitType(from, "subscribed")
	return sub
}
