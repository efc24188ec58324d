package main

// A black-box client harness for `agentd serve` (the pi-server protocol
// 1.0.0 face): it starts the built binary, dials it over WebSocket (or
// drives --stdio through pipes) and collects every frame, so the
// conformance tests in serve_e2e_test.go can wait for and assert on exact
// frames. Every name here starts with sv; the model mock, the temp dirs
// and the stream-holding proxy are rpc_e2e_test.go's e2eEnv.
//
// Synchronisation is on output (a frame, a log line, a process exit);
// the waits are bounded by generous guards that only fire when something
// is broken. Nothing here measures time.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentd-dev/agentd/internal/cli"
)

const (
	// svWait bounds every wait for a frame or an exit.
	svWait = 30 * time.Second
	// svReadyWait bounds the wait for the "listening" log line. A node
	// of a cluster of embedded NATS servers listens once JetStream has a
	// meta leader: with -race on a loaded 2-core machine, that election
	// alone took 7 s and node A listened 10.2 s after it started.
	svReadyWait = 30 * time.Second
)

// svM is a command or any JSON object.
type svM = map[string]any

// ---------------------------------------------------------------------------
// Frames and JSON access.

type svFrame struct {
	raw string
	m   map[string]any
}

func (f svFrame) typ() string       { return svStr(f.m, "type") }
func (f svFrame) String() string    { return e2eClip(f.raw, 700) }
func (f svFrame) isLifecycle() bool { return strings.HasPrefix(f.typ(), "command_") }

func (f svFrame) isResponse(id string) bool {
	v, ok := f.m["id"].(string)
	return f.typ() == "response" && ok && v == id
}

// isEvent reports a session event frame of session sid whose event has
// type evType ("" for any).
func (f svFrame) isEvent(sid, evType string) bool {
	return f.typ() == "event" && svStr(f.m, "sessionId") == sid && (evType == "" || svStr(f.m, "event", "type") == evType)
}

// svAt walks object keys and array indices; nil when absent.
func svAt(v any, path ...string) any {
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case []any:
			var i int
			if _, err := fmt.Sscanf(p, "%d", &i); err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func svStr(v any, path ...string) string {
	s, _ := svAt(v, path...).(string)
	return s
}

// svNum is the number at path and whether there is one.
func svNum(v any, path ...string) (float64, bool) {
	n, ok := svAt(v, path...).(float64)
	return n, ok
}

func svHas(v any, path ...string) bool {
	if len(path) == 0 {
		return v != nil
	}
	m, ok := svAt(v, path[:len(path)-1]...).(map[string]any)
	if !ok {
		return false
	}
	_, ok = m[path[len(path)-1]]
	return ok
}

func svArr(v any, path ...string) []any {
	a, _ := svAt(v, path...).([]any)
	return a
}

func svJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return string(b)
}

// svText is the text of a message's content (a string or text parts);
// for a message that is not a user's or the assistant's, "<role>".
func svText(msg any) string {
	if r := svStr(msg, "role"); r != "user" && r != "assistant" {
		return "<" + r + ">"
	}
	switch c := svAt(msg, "content").(type) {
	case string:
		return c
	case []any:
		var b strings.Builder
		for _, p := range c {
			b.WriteString(svStr(p, "text"))
		}
		return b.String()
	}
	return ""
}

// svTexts is the text of every message of msgs.
func svTexts(msgs []any) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = svText(m)
	}
	return out
}

// ---------------------------------------------------------------------------
// Checks. They report with Errorf so that one test lists every deviation.

func svEq(t *testing.T, what string, got, want any) bool {
	t.Helper()
	if !reflect.DeepEqual(svNorm(got), svNorm(want)) {
		t.Errorf("%s:\n  got  %s\n  want %s", what, svJSON(got), svJSON(want))
		return false
	}
	return true
}

// svNorm makes Go values comparable with decoded JSON (ints become
// float64, []string becomes []any, ...).
func svNorm(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return v
	}
	return out
}

// svWantOK checks a successful response.
func svWantOK(t *testing.T, r svFrame) bool {
	t.Helper()
	if b, _ := r.m["success"].(bool); !b {
		t.Errorf("want success, got %s", r)
		return false
	}
	return true
}

// svWantErr checks a failed response whose error is exactly want.
func svWantErr(t *testing.T, r svFrame, want string) {
	t.Helper()
	if b, ok := r.m["success"].(bool); !ok || b || svStr(r.m, "error") != want {
		t.Errorf("want success:false error %q, got %s", want, r)
	}
}

// svWantErrPrefix checks a failed response whose error starts with prefix.
func svWantErrPrefix(t *testing.T, r svFrame, prefix string) {
	t.Helper()
	if b, ok := r.m["success"].(bool); !ok || b || !strings.HasPrefix(svStr(r.m, "error"), prefix) {
		t.Errorf("want success:false with an error starting %q, got %s", prefix, r)
	}
}

// svVersion is the response's sessionVersion (-1 when absent).
func svVersion(r svFrame) int {
	n, ok := svNum(r.m, "sessionVersion")
	if !ok {
		return -1
	}
	return int(n)
}

// ---------------------------------------------------------------------------
// The frame collector shared by WebSocket and stdio connections.

type svCollector struct {
	mu      sync.Mutex
	frames  []svFrame
	bad     []string // frames that are not one JSON object
	changed chan struct{}
	ended   bool
	endErr  error
	code    websocket.StatusCode
	reason  string
}

func newSvCollector() *svCollector {
	return &svCollector{changed: make(chan struct{}), code: -1}
}

func (c *svCollector) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *svCollector) add(b []byte) {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	err := dec.Decode(&m)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("more than one JSON value")
		}
	}
	c.mu.Lock()
	if err != nil || m == nil {
		c.bad = append(c.bad, string(b))
	} else {
		c.frames = append(c.frames, svFrame{raw: string(b), m: m})
	}
	c.notifyLocked()
	c.mu.Unlock()
}

func (c *svCollector) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	c.ended, c.endErr = true, err
	c.code = websocket.CloseStatus(err)
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		c.reason = ce.Reason
	}
	c.notifyLocked()
}

// ---------------------------------------------------------------------------
// One client connection (a WebSocket, or the stdio pipes of a --stdio
// server).

type svConn struct {
	t    *testing.T
	name string
	srv  *svServer
	col  *svCollector
	// write sends one frame (WebSocket) or one line (stdio).
	write func([]byte) error
	ws    *websocket.Conn
	// stop ends the reader and waits for it (idempotent).
	stop func()
	ids  *atomic.Int64
	// cursor is where waitEvent looks from.
	cursor int
}

// on returns the connection bound to t: for subtests, whose failures
// must be reported on their own goroutine.
func (c *svConn) on(t *testing.T) *svConn {
	cc := *c
	cc.t = t
	return &cc
}

func (c *svConn) fatalf(format string, args ...any) {
	c.t.Helper()
	c.t.Fatalf("%s: %s\n--- last frames on %s ---\n%s--- server stderr (tail) ---\n%s",
		c.name, fmt.Sprintf(format, args...), c.name, c.tail(40), c.srv.stderrTail(4000))
}

func (c *svConn) tail(n int) string {
	c.col.mu.Lock()
	defer c.col.mu.Unlock()
	var b strings.Builder
	for i := max(0, len(c.col.frames)-n); i < len(c.col.frames); i++ {
		fmt.Fprintf(&b, "%4d %s\n", i, c.col.frames[i])
	}
	for _, s := range c.col.bad {
		fmt.Fprintf(&b, "NOT ONE JSON OBJECT: %s\n", e2eClip(s, 300))
	}
	if c.col.ended {
		fmt.Fprintf(&b, "(ended: %v, close code %d %q)\n", c.col.endErr, c.col.code, c.col.reason)
	}
	return b.String()
}

// send writes one command: a string or []byte as is, anything else as
// its JSON.
func (c *svConn) send(cmd any) {
	c.t.Helper()
	var b []byte
	switch v := cmd.(type) {
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := c.write(b); err != nil {
		c.fatalf("sending %s: %v", e2eClip(string(b), 200), err)
	}
}

// mark is the number of frames received so far.
func (c *svConn) mark() int {
	c.col.mu.Lock()
	defer c.col.mu.Unlock()
	return len(c.col.frames)
}

func (c *svConn) snapshot() []svFrame {
	c.col.mu.Lock()
	defer c.col.mu.Unlock()
	return append([]svFrame(nil), c.col.frames...)
}

func (c *svConn) badFrames() []string {
	c.col.mu.Lock()
	defer c.col.mu.Unlock()
	return append([]string(nil), c.col.bad...)
}

// waitFor returns the first frame at index >= from that pred accepts,
// waiting for it.
func (c *svConn) waitFor(from int, what string, pred func(svFrame) bool) (int, svFrame) {
	c.t.Helper()
	i, f, err := c.tryWaitFor(from, svWait, pred)
	if err != nil {
		c.fatalf("waiting for %s: %v", what, err)
	}
	return i, f
}

// tryWaitFor is waitFor that reports instead of failing.
func (c *svConn) tryWaitFor(from int, limit time.Duration, pred func(svFrame) bool) (int, svFrame, error) {
	guard := time.NewTimer(limit)
	defer guard.Stop()
	for {
		c.col.mu.Lock()
		for i := from; i < len(c.col.frames); i++ {
			if pred(c.col.frames[i]) {
				f := c.col.frames[i]
				c.col.mu.Unlock()
				return i, f, nil
			}
		}
		from = len(c.col.frames)
		ch, ended := c.col.changed, c.col.ended
		code, reason, endErr := c.col.code, c.col.reason, c.col.endErr
		c.col.mu.Unlock()
		if ended {
			return -1, svFrame{}, fmt.Errorf("the connection ended (close code %d %q, %v)", code, reason, endErr)
		}
		select {
		case <-ch:
		case <-guard.C:
			return -1, svFrame{}, fmt.Errorf("nothing within %v", limit)
		}
	}
}

// responseFrom waits for the response with id at index >= from.
func (c *svConn) responseFrom(from int, id string) (int, svFrame) {
	c.t.Helper()
	return c.waitFor(from, "response "+id, func(f svFrame) bool { return f.isResponse(id) })
}

// response waits for the (first) response with id.
func (c *svConn) response(id string) svFrame {
	c.t.Helper()
	_, f := c.responseFrom(0, id)
	return f
}

// call sends cmd, which needs an "id", and waits for its response (the
// first after sending: a replay of an id gets its own).
func (c *svConn) call(cmd svM) svFrame {
	c.t.Helper()
	id, ok := cmd["id"].(string)
	if !ok || id == "" {
		c.t.Fatalf("call needs a command with an id: %s", svJSON(cmd))
	}
	from := c.mark()
	c.send(cmd)
	_, f := c.responseFrom(from, id)
	return f
}

// ok is call that fails the test when the command fails.
func (c *svConn) ok(cmd svM) svFrame {
	c.t.Helper()
	r := c.call(cmd)
	if b, _ := r.m["success"].(bool); !b {
		c.fatalf("%s failed: %s", svJSON(cmd), r)
	}
	return r
}

// newID is a fresh command id with the prefix.
func (c *svConn) newID(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, c.ids.Add(1))
}

// do calls the command typ with fields and a fresh id.
func (c *svConn) do(typ string, fields svM) svFrame {
	c.t.Helper()
	cmd := svM{"id": c.newID(typ), "type": typ}
	for k, v := range fields {
		cmd[k] = v
	}
	return c.call(cmd)
}

// must is do that fails the test when the command fails.
func (c *svConn) must(typ string, fields svM) svFrame {
	c.t.Helper()
	r := c.do(typ, fields)
	if b, _ := r.m["success"].(bool); !b {
		c.fatalf("%s %s failed: %s", typ, svJSON(fields), r)
	}
	return r
}

// waitEvent waits for the next event frame of session sid whose event
// type is evType, after the cursor, and moves the cursor past it.
func (c *svConn) waitEvent(sid, evType string) svFrame {
	c.t.Helper()
	i, f := c.waitFor(c.cursor, fmt.Sprintf("event %s of session %s", evType, sid), func(f svFrame) bool { return f.isEvent(sid, evType) })
	c.cursor = i + 1
	return f
}

// waitType waits for the next frame of type typ after the cursor and
// moves the cursor past it.
func (c *svConn) waitType(typ string) svFrame {
	c.t.Helper()
	i, f := c.waitFor(c.cursor, typ, func(f svFrame) bool { return f.typ() == typ })
	c.cursor = i + 1
	return f
}

// lifecycle is every command_* frame of commandId received so far.
func (c *svConn) lifecycle(commandID string) []svFrame {
	var out []svFrame
	for _, f := range c.snapshot() {
		if f.isLifecycle() && svStr(f.m, "data", "commandId") == commandID {
			out = append(out, f)
		}
	}
	return out
}

// waitLifecycle waits for the phase frame ("command_finished", …) of
// commandId at index >= from.
func (c *svConn) waitLifecycle(from int, phase, commandID string) (int, svFrame) {
	c.t.Helper()
	return c.waitFor(from, phase+" "+commandID, func(f svFrame) bool {
		return f.typ() == phase && svStr(f.m, "data", "commandId") == commandID
	})
}

// events is every event frame of session sid received so far.
func (c *svConn) events(sid string) []svFrame {
	var out []svFrame
	for _, f := range c.snapshot() {
		if f.isEvent(sid, "") {
			out = append(out, f)
		}
	}
	return out
}

// ready waits for the first frame and requires it to be server_ready.
func (c *svConn) ready() svFrame {
	c.t.Helper()
	_, f := c.waitFor(0, "the first frame", func(svFrame) bool { return true })
	if f.typ() != "server_ready" {
		c.fatalf("the first frame is not server_ready: %s", f)
	}
	c.cursor = 1
	return f
}

// waitClosed waits for the connection to end and returns the close code
// and reason (-1 and "" when it ended without a close frame).
func (c *svConn) waitClosed() (websocket.StatusCode, string) {
	c.t.Helper()
	guard := time.NewTimer(svWait)
	defer guard.Stop()
	for {
		c.col.mu.Lock()
		ended, ch, code, reason := c.col.ended, c.col.changed, c.col.code, c.col.reason
		c.col.mu.Unlock()
		if ended {
			return code, reason
		}
		select {
		case <-ch:
		case <-guard.C:
			c.fatalf("the connection is still open after %v", svWait)
		}
	}
}

// close closes a WebSocket connection from the client side and waits for
// its reader.
func (c *svConn) close() {
	if c.ws != nil {
		_ = c.ws.Close(websocket.StatusNormalClosure, "")
	}
	c.stop()
}

// ---------------------------------------------------------------------------
// The server process.

// svBuf is a goroutine-safe buffer that signals each write.
type svBuf struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{}
}

func newSvBuf() *svBuf { return &svBuf{changed: make(chan struct{})} }

func (s *svBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.b.Write(p)
	close(s.changed)
	s.changed = make(chan struct{})
	return n, err
}

func (s *svBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *svBuf) state() (string, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String(), s.changed
}

type svServer struct {
	t     *testing.T
	env   *e2eEnv
	args  []string
	extra []string // extra environment
	stdio bool

	cmd     *exec.Cmd
	stderr  *svBuf
	addr    string
	exited  chan struct{}
	waitErr error

	// in process (svStartInProc): the server runs in the test's process,
	// on the same code as the command; cmd is nil. stop cancels Run's
	// context, as SIGTERM does the command's; runErr is what Run returned.
	serve  *cli.Serve
	stop   context.CancelFunc
	runErr error

	// stdio mode
	stdin  io.WriteCloser
	stdout *os.File
	conn   *svConn
}

type svOpts struct {
	env   []string // extra environment variables
	stdio bool
	// noReady: do not wait for the listening line (for a server expected
	// to fail at startup).
	noReady bool
	// cred runs the server as another user.
	cred *syscall.Credential
	// inProc serves in the test's process instead of starting the
	// binary (not with stdio, noReady or cred).
	inProc bool
}

var svAddrRe = regexp.MustCompile(`addr=(\S+)`)

// svStart runs `agentd serve --port 0 --model mock/mock-model --data-dir
// <env data> <args>` in e and waits until it listens.
func svStart(t *testing.T, e *e2eEnv, args ...string) *svServer {
	t.Helper()
	return svLaunch(t, e, svOpts{}, args...)
}

func svLaunch(t *testing.T, e *e2eEnv, o svOpts, args ...string) *svServer {
	t.Helper()
	if o.inProc {
		return svLaunchInProc(t, e, o, args...)
	}
	all := []string{"serve", "--model", "mock/mock-model", "--data-dir", e.data}
	if o.stdio {
		all = append(all, "--stdio")
	} else {
		all = append(all, "--port", "0")
	}
	all = append(all, args...)
	cmd := exec.Command(agentdBin, all...)
	cmd.Dir = e.cwd
	cmd.Env = append([]string{"HOME=" + e.home, "PATH=" + os.Getenv("PATH"), "TMPDIR=" + e.tmp,
		"MOCK_API_KEY=sk-mock-key", "LANG=C.UTF-8"}, o.env...)
	// Its own process group, so that cleanup also ends the shells it
	// started; WaitDelay bounds the wait for pipes a stray child holds.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: o.cred}
	dieWithTest(cmd)
	cmd.WaitDelay = 5 * time.Second
	s := &svServer{t: t, env: e, args: args, extra: o.env, stdio: o.stdio, cmd: cmd, stderr: newSvBuf(), exited: make(chan struct{})}
	cmd.Stderr = s.stderr
	var readerDone chan struct{}
	if o.stdio {
		var err error
		if s.stdin, err = cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout = w
		s.stdout = r
		defer w.Close() // the child has its copy once started
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	if o.stdio {
		col := newSvCollector()
		readerDone = make(chan struct{})
		var writeMu sync.Mutex
		c := &svConn{t: t, name: "stdio", srv: s, col: col, ids: new(atomic.Int64)}
		c.write = func(b []byte) error {
			writeMu.Lock()
			defer writeMu.Unlock()
			if !bytes.HasSuffix(b, []byte("\n")) {
				b = append(append([]byte(nil), b...), '\n')
			}
			_, err := s.stdin.Write(b)
			return err
		}
		go func() {
			defer close(readerDone)
			br := bufio.NewReaderSize(s.stdout, 1<<20)
			for {
				b, err := br.ReadBytes('\n')
				if len(b) > 0 {
					if b[len(b)-1] != '\n' {
						col.mu.Lock()
						col.bad = append(col.bad, "(no newline) "+string(b))
						col.mu.Unlock()
					} else {
						col.add(bytes.TrimSuffix(b, []byte("\n")))
					}
				}
				if err != nil {
					if err == io.EOF {
						err = nil
					}
					col.end(err)
					return
				}
			}
		}()
		c.stop = func() {
			_ = s.stdout.Close()
			<-readerDone
		}
		s.conn = c
	}
	t.Cleanup(func() {
		s.killGroup()
		<-s.exited
		if readerDone != nil {
			_ = s.stdout.Close()
			<-readerDone
		}
	})
	if !o.stdio && !o.noReady {
		s.waitListening()
	}
	return s
}

// svStartInProc is svStart with the server in the test's own process:
// the same serve (cli.Serve: Open, Run, Close) the binary runs, without
// building, starting and waiting for a process, for tests that need only
// the server's HTTP and WebSocket side. sigterm ends it as SIGTERM would
// (a drain); kill9 is not possible.
func svStartInProc(t *testing.T, e *e2eEnv, args ...string) *svServer {
	t.Helper()
	return svLaunch(t, e, svOpts{inProc: true}, args...)
}

func svLaunchInProc(t *testing.T, e *e2eEnv, o svOpts, args ...string) *svServer {
	t.Helper()
	if o.stdio || o.noReady || o.cred != nil {
		t.Fatal("svLaunchInProc: stdio, noReady and cred need the process")
	}
	env := map[string]string{"HOME": e.home, "PATH": os.Getenv("PATH"), "TMPDIR": e.tmp, "MOCK_API_KEY": "sk-mock-key", "LANG": "C.UTF-8"}
	for _, kv := range o.env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	s := &svServer{t: t, env: e, args: args, extra: o.env, stderr: newSvBuf(), exited: make(chan struct{})}
	m := cli.New(strings.NewReader(""), io.Discard, s.stderr, func(k string) string { return env[k] })
	all := append([]string{"--model", "mock/mock-model", "--data-dir", e.data, "--port", "0"}, args...)
	srv, err := m.ParseServe(all)
	if err != nil {
		t.Fatalf("agentd serve %v: %v", all, err)
	}
	srv.InDir(e.cwd)
	if err := srv.Open(context.Background()); err != nil {
		_ = srv.Close()
		_ = m.Close()
		t.Fatalf("agentd serve %v (in process) did not start: %v\nstderr:\n%s", all, err, s.stderr.String())
	}
	s.serve, s.addr = srv, srv.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	go func() {
		s.runErr = srv.Run(ctx)
		// What Open built goes too, so a restart finds it released.
		_ = srv.Close()
		_ = m.Close()
		close(s.exited)
	}()
	t.Cleanup(func() {
		s.killGroup()
		<-s.exited
		cancel()
	})
	return s
}

// killGroup sends SIGKILL to the server's process group (the server and
// the shells it started); in process, it closes the server.
func (s *svServer) killGroup() {
	if s.serve != nil {
		_ = s.serve.Close()
		return
	}
	if s.cmd.Process != nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	}
}

func (s *svServer) stderrTail(n int) string {
	if s == nil {
		return ""
	}
	str := s.stderr.String()
	if len(str) > n {
		str = "…" + str[len(str)-n:]
	}
	return str
}

// waitListening waits for the stderr line with addr= and records the
// address.
func (s *svServer) waitListening() {
	s.t.Helper()
	guard := time.NewTimer(svReadyWait)
	defer guard.Stop()
	for {
		text, ch := s.stderr.state()
		if m := svAddrRe.FindStringSubmatch(text); m != nil {
			s.addr = strings.Trim(m[1], `"`)
			return
		}
		select {
		case <-ch:
		case <-s.exited:
			s.t.Fatalf("agentd serve exited (%v) before listening\nargs: %v\nstderr:\n%s", s.waitErr, s.cmd.Args, s.stderr.String())
		case <-guard.C:
			s.t.Fatalf("agentd serve logged no addr= within %v\nargs: %v\nstderr:\n%s", svReadyWait, s.cmd.Args, s.stderr.String())
		}
	}
}

// port is the port the server listens on.
func (s *svServer) port() string {
	i := strings.LastIndex(s.addr, ":")
	return s.addr[i+1:]
}

// loopback is the address to dial: the listening one, with a wildcard
// host replaced by 127.0.0.1.
func (s *svServer) loopback() string {
	host := s.addr[:strings.LastIndex(s.addr, ":")]
	switch host {
	case "0.0.0.0", "[::]", "::", "":
		return "127.0.0.1:" + s.port()
	}
	return s.addr
}

type svDialOpts struct {
	header http.Header
	query  string // appended to the URL after "?"
	name   string
}

// dial opens a WebSocket and waits for server_ready.
func (s *svServer) dial(name string) *svConn {
	s.t.Helper()
	c := s.dialRaw(s.t, svDialOpts{name: name})
	c.ready()
	return c
}

// dialRaw opens a WebSocket and starts collecting its frames; it checks
// nothing about them.
func (s *svServer) dialRaw(t *testing.T, o svDialOpts) *svConn {
	t.Helper()
	url := "ws://" + s.loopback() + "/"
	if o.query != "" {
		url += "?" + o.query
	}
	dctx, dcancel := context.WithTimeout(context.Background(), svReadyWait)
	defer dcancel()
	ws, resp, err := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPHeader: o.header})
	if err != nil {
		status := ""
		if resp != nil {
			status = resp.Status
		}
		t.Fatalf("dialing %s: %v (HTTP %s)\nserver stderr:\n%s", url, err, status, s.stderrTail(4000))
	}
	ws.SetReadLimit(64 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	col := newSvCollector()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				col.end(err)
				return
			}
			col.add(b)
		}
	}()
	name := o.name
	if name == "" {
		name = "ws"
	}
	var once sync.Once
	c := &svConn{t: t, name: name, srv: s, col: col, ws: ws, ids: new(atomic.Int64)}
	c.stop = func() {
		once.Do(func() {
			cancel()
			_ = ws.CloseNow()
			<-done
		})
	}
	c.write = func(b []byte) error {
		wctx, wcancel := context.WithTimeout(context.Background(), svWait)
		defer wcancel()
		return ws.Write(wctx, websocket.MessageText, b)
	}
	t.Cleanup(func() {
		c.stop()
		// Spec 3.1: every frame is exactly one JSON object.
		if bad := c.badFrames(); len(bad) > 0 {
			t.Errorf("%s received %d frames that are not one JSON object, first: %s", name, len(bad), e2eClip(bad[0], 300))
		}
	})
	return c
}

// sigterm sends SIGTERM to the server (in process: ends Run's context).
func (s *svServer) sigterm() {
	s.t.Helper()
	if s.serve != nil {
		s.stop()
		return
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		s.t.Fatalf("SIGTERM: %v", err)
	}
}

// kill9 kills the server with SIGKILL and waits for it.
func (s *svServer) kill9() {
	s.t.Helper()
	if s.serve != nil {
		s.t.Fatal("kill -9 needs a process: start this server with svStart, not svStartInProc")
	}
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		s.t.Fatalf("SIGKILL: %v", err)
	}
	<-s.exited
}

// waitExit waits for the server to exit and returns its exit code (-1
// when killed by a signal).
func (s *svServer) waitExit() int {
	s.t.Helper()
	select {
	case <-s.exited:
	case <-time.After(svWait):
		s.t.Fatalf("agentd serve did not exit within %v\nstderr:\n%s", svWait, s.stderrTail(4000))
	}
	if s.serve != nil {
		// The command's exit code for what Run returned.
		if s.runErr != nil {
			return 1
		}
		return 0
	}
	return s.cmd.ProcessState.ExitCode()
}

// restart starts a new server with the same environment, data dir and
// arguments; the old one must have exited.
func (s *svServer) restart() *svServer {
	s.t.Helper()
	select {
	case <-s.exited:
	default:
		s.t.Fatal("restart: the server is still running")
	}
	return svLaunch(s.t, s.env, svOpts{env: s.extra, stdio: s.stdio, inProc: s.serve != nil}, s.args...)
}

// closeStdin ends a --stdio server's input.
func (s *svServer) closeStdin() {
	if err := s.stdin.Close(); err != nil {
		s.t.Fatalf("closing stdin: %v", err)
	}
}

// svStartStdio runs `agentd serve --stdio` and returns the server and
// its connection (stdin/stdout).
func svStartStdio(t *testing.T, e *e2eEnv, args ...string) (*svServer, *svConn) {
	t.Helper()
	s := svLaunch(t, e, svOpts{stdio: true}, args...)
	return s, s.conn
}

// svRunExit runs `agentd serve <args>` expecting it to exit by itself
// (a startup failure); it returns the exit code and stderr. A server that
// keeps running is killed after svWait and reported.
func svRunExit(t *testing.T, e *e2eEnv, env []string, args ...string) (int, string) {
	t.Helper()
	s := svLaunch(t, e, svOpts{env: env, noReady: true}, args...)
	select {
	case <-s.exited:
	case <-time.After(svWait):
		t.Errorf("agentd serve %v did not exit within %v\nstderr:\n%s", args, svWait, s.stderrTail(4000))
		s.killGroup()
		<-s.exited
	}
	return s.cmd.ProcessState.ExitCode(), s.stderr.String()
}

// svHTTPGet fetches path from the server's HTTP side.
func svHTTPGet(t *testing.T, s *svServer, path string) (int, http.Header, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), svWait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.loopback()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// svWaitUntil polls cond (for state outside the protocol, such as what
// the model mock has received) until it holds.
func svWaitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(svWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, svWait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// svMockSaw reports whether the model mock received a request whose body
// contains s.
func svMockSaw(e *e2eEnv, s string) bool {
	for _, r := range e.mock.Requests() {
		if bytes.Contains(r.Body, []byte(s)) {
			return true
		}
	}
	return false
}
