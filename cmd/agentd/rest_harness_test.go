package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// A client of the conversation API (REST + Server-Sent Events) of one
// agentd serve process: plain net/http, and an SSE reader that parses
// the stream line by line as a browser's EventSource does.

// rsReply is one REST answer.
type rsReply struct {
	status int
	header http.Header
	body   string
	m      map[string]any
	list   []any
}

func (r rsReply) str(k string) string { s, _ := r.m[k].(string); return s }

func (r rsReply) String() string { return e2eClip(r.body, 700) }

// rsDo sends a request to the server; body is JSON-encoded unless nil.
// hdr are header name/value pairs.
func rsDo(t *testing.T, s *svServer, method, path string, body any, hdr ...string) rsReply {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), svWait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+s.loopback()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v\nserver stderr:\n%s", method, path, err, s.stderrTail(3000))
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := rsReply{status: resp.StatusCode, header: resp.Header, body: string(b)}
	_ = json.Unmarshal(b, &r.m)
	_ = json.Unmarshal(b, &r.list)
	return r
}

// rsOK is rsDo that requires a 200.
func rsOK(t *testing.T, s *svServer, method, path string, body any, hdr ...string) rsReply {
	t.Helper()
	r := rsDo(t, s, method, path, body, hdr...)
	if r.status != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, path, r.status, r)
	}
	return r
}

// rsEvent is one SSE frame: its id line and its data, one JSON object.
type rsEvent struct {
	id  string
	raw string
	m   map[string]any
}

func (e rsEvent) typ() string { s, _ := e.m["type"].(string); return s }

func (e rsEvent) str(k string) string { s, _ := e.m[k].(string); return s }

// rsStream is an open event stream, read by a goroutine of its own that
// close stops and waits for.
type rsStream struct {
	t      *testing.T
	resp   *http.Response
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	events  []rsEvent
	bad     []string // lines that are neither id, data nor a comment
	ended   bool
	err     error // what ended the stream; nil for a clean end
	changed chan struct{}
}

// rsStepTool sends prompt to conversation id on its event stream, runs
// one step with tools confirmed and waits until the model's tool call
// completed; it returns the stream and where the step's events begin.
func rsStepTool(t *testing.T, s *svServer, id, prompt string) (*rsStream, int) {
	t.Helper()
	st := rsOpen(t, s, rsConvPath(id)+"/events")
	_, conn := st.waitType(0, "connected")
	rsOK(t, s, "POST", rsConvPath(id), map[string]any{"role": "user", "content": prompt})
	from := st.mark()
	rsOK(t, s, "POST", rsConvPath(id)+"/step", map[string]any{"session_id": conn.str("session_id"), "auto_confirm": true})
	st.waitType(from, "tool_complete")
	return st, from
}

// rsOpen opens GET path as an event stream; hdr are header pairs.
func rsOpen(t *testing.T, s *svServer, path string, hdr ...string) *rsStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+s.loopback()+path, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("GET %s: %d %s %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	st := &rsStream{t: t, resp: resp, cancel: cancel, done: make(chan struct{}), changed: make(chan struct{})}
	go st.read()
	t.Cleanup(st.close)
	return st
}

func (st *rsStream) read() {
	defer close(st.done)
	br := bufio.NewReader(st.resp.Body)
	var id string
	var data []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			st.mu.Lock()
			st.ended = true
			if err != io.EOF {
				st.err = err
			}
			st.notifyLocked()
			st.mu.Unlock()
			return
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		switch {
		case line == "":
			if len(data) == 0 {
				id = ""
				continue
			}
			ev := rsEvent{id: id, raw: strings.Join(data, "\n")}
			id, data = "", nil
			st.mu.Lock()
			if json.Unmarshal([]byte(ev.raw), &ev.m) != nil {
				st.bad = append(st.bad, ev.raw)
			}
			st.events = append(st.events, ev)
			st.notifyLocked()
			st.mu.Unlock()
		case strings.HasPrefix(line, "id: "):
			id = line[len("id: "):]
		case strings.HasPrefix(line, "data: "):
			data = append(data, line[len("data: "):])
		case strings.HasPrefix(line, ":"):
			// A comment (a ping).
		default:
			// No event: lines, ever (clients listen with onmessage).
			st.mu.Lock()
			st.bad = append(st.bad, line)
			st.mu.Unlock()
		}
	}
}

func (st *rsStream) notifyLocked() {
	close(st.changed)
	st.changed = make(chan struct{})
}

// close drops the connection and waits for the reader.
func (st *rsStream) close() {
	st.cancel()
	<-st.done
	st.resp.Body.Close()
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.bad) > 0 {
		st.t.Errorf("stream lines that are not id/data/comment lines of one JSON object: %q", st.bad)
	}
}

func (st *rsStream) mark() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.events)
}

func (st *rsStream) snapshot() []rsEvent {
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]rsEvent(nil), st.events...)
}

func (st *rsStream) dump(from int) string {
	var b strings.Builder
	for i, e := range st.snapshot() {
		if i >= from {
			b.WriteString("  id=" + e.id + " " + e2eClip(e.raw, 300) + "\n")
		}
	}
	return b.String()
}

// waitFor waits for the first event from index from that pred accepts
// and returns its index.
func (st *rsStream) waitFor(from int, what string, pred func(rsEvent) bool) (int, rsEvent) {
	st.t.Helper()
	guard := time.NewTimer(svWait)
	defer guard.Stop()
	for {
		st.mu.Lock()
		for i := from; i < len(st.events); i++ {
			if pred(st.events[i]) {
				ev := st.events[i]
				st.mu.Unlock()
				return i, ev
			}
		}
		ch, ended, err := st.changed, st.ended, st.err
		st.mu.Unlock()
		if ended {
			st.t.Fatalf("the stream ended (%v) before %s; it had:\n%s", err, what, st.dump(from))
		}
		select {
		case <-ch:
		case <-guard.C:
			st.t.Fatalf("no %s within %v; the stream had:\n%s", what, svWait, st.dump(from))
		}
	}
}

// waitType waits for an event of type typ.
func (st *rsStream) waitType(from int, typ string) (int, rsEvent) {
	st.t.Helper()
	return st.waitFor(from, typ, func(e rsEvent) bool { return e.typ() == typ })
}

// waitEnded waits for the server to end the stream and returns what
// ended it (nil for a clean end of the body).
func (st *rsStream) waitEnded() error {
	st.t.Helper()
	guard := time.NewTimer(svWait)
	defer guard.Stop()
	for {
		st.mu.Lock()
		ch, ended, err := st.changed, st.ended, st.err
		st.mu.Unlock()
		if ended {
			return err
		}
		select {
		case <-ch:
		case <-guard.C:
			st.t.Fatalf("the stream is still open after %v", svWait)
		}
	}
}
