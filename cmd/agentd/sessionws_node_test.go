package main

// The per-session WebSocket from a client written in another language:
// testdata/node/session-watch.cjs, a Node script on the npm ws package,
// follows a session driven over REST, through a server restart.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// swNodeModules finds node and the ws package and returns the
// node_modules directory to put on NODE_PATH ("" when node finds ws by
// itself). Without them the test skips, saying how to get them; .ci/run
// installs both and sets AGENTD_WS_NODE_MODULES, so in CI it runs.
func swNodeModules(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not on PATH: this test runs a Node client (node 18 or later with the npm package ws@8); .ci/run installs both")
	}
	if dir := os.Getenv("AGENTD_WS_NODE_MODULES"); dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(abs, "ws", "package.json")); err != nil {
			t.Fatalf("AGENTD_WS_NODE_MODULES=%s holds no ws package: %v", dir, err)
		}
		return abs
	}
	local, err := filepath.Abs(filepath.Join("testdata", "node", "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(local, "ws", "package.json")); err == nil {
		return local
	}
	if exec.Command("node", "-e", "require.resolve('ws')").Run() == nil {
		return ""
	}
	t.Skip("the npm package ws is not installed: run `npm install --prefix cmd/agentd/testdata/node`, or set AGENTD_WS_NODE_MODULES to a node_modules directory holding ws@8 (.ci/run does)")
	return ""
}

// swFreePort is a port nothing listens on now: the server is started on
// it, and started again on it after a restart, where the client
// reconnects. It is below the kernel's ephemeral range, so that while the
// server is down no other test's server (started with --port 0) and no
// outgoing connection can take it.
func swFreePort(t *testing.T) string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				low = n
			}
		}
	}
	for range 100 {
		port := 10000 + rand.IntN(low-10000)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		l.Close()
		return strconv.Itoa(port)
	}
	t.Fatalf("no free port between 10000 and %d", low)
	return ""
}

// swREST calls the REST face with a bearer token.
type swREST struct {
	base, token string
}

func (r swREST) call(t *testing.T, method, path string, body any) map[string]any {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), svWait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+r.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: HTTP %d %s", method, path, resp.StatusCode, out)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("%s %s: %v: %s", method, path, err, out)
	}
	return m
}

// swNode is the Node client process: its stdout lines (the server's
// messages) and its stderr (what it did).
type swNode struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr *svBuf
	exited chan struct{}
	err    error
	read   chan struct{} // closed when stdout has been read to its end

	mu      sync.Mutex
	lines   []swMsg
	bad     []string
	changed chan struct{}
}

func swStartNode(t *testing.T, modules, url, session, token string, runs int) *swNode {
	t.Helper()
	return swRunNode(t, modules, "session-watch.cjs", []string{"AGENTD_WS_TOKEN=" + token,
		"AGENTD_WS_BACKOFF_MS=100", "AGENTD_WS_BACKOFF_MAX_MS=1600"}, url, session, strconv.Itoa(runs))
}

// swRunNode runs testdata/node/<script> with args, reading its stdout as
// JSON lines.
func swRunNode(t *testing.T, modules, script string, env []string, args ...string) *swNode {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("testdata", "node", script))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", append([]string{path}, args...)...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	if modules != "" {
		cmd.Env = append(cmd.Env, "NODE_PATH="+modules)
	} else if p := os.Getenv("NODE_PATH"); p != "" {
		cmd.Env = append(cmd.Env, "NODE_PATH="+p)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithTest(cmd)
	cmd.WaitDelay = 5 * time.Second
	n := &swNode{t: t, cmd: cmd, stderr: newSvBuf(), exited: make(chan struct{}), read: make(chan struct{}), changed: make(chan struct{})}
	cmd.Stderr = n.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(n.read)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			n.add(sc.Text())
		}
	}()
	go func() {
		<-n.read
		n.err = cmd.Wait()
		close(n.exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-n.exited
	})
	return n
}

func (n *swNode) add(line string) {
	var m map[string]any
	err := json.Unmarshal([]byte(line), &m)
	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil || m == nil {
		n.bad = append(n.bad, line)
	} else {
		n.lines = append(n.lines, swMsg{raw: line, m: m})
	}
	close(n.changed)
	n.changed = make(chan struct{})
}

func (n *swNode) mark() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.lines)
}

func (n *swNode) all() []swMsg {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]swMsg(nil), n.lines...)
}

func (n *swNode) dump() string {
	var b strings.Builder
	for i, m := range n.all() {
		fmt.Fprintf(&b, "%3d %s\n", i, e2eClip(m.raw, 300))
	}
	return b.String() + "--- node stderr ---\n" + n.stderr.String()
}

// waitType waits for a line of type typ at index from or later.
func (n *swNode) waitType(from int, typ string) (int, swMsg) {
	n.t.Helper()
	guard := time.NewTimer(svWait)
	defer guard.Stop()
	for exited := false; ; {
		n.mu.Lock()
		for i := from; i < len(n.lines); i++ {
			if n.lines[i].typ() == typ {
				m := n.lines[i]
				n.mu.Unlock()
				return i + 1, m
			}
		}
		ch := n.changed
		n.mu.Unlock()
		if exited {
			n.t.Fatalf("the node client exited (%v) before sending %s:\n%s", n.err, typ, n.dump())
		}
		select {
		case <-ch:
		case <-n.exited:
			// Its last line may have come in since the look above, and
			// select picks at random between the two: look once more
			// (stdout was read to its end before exited closed).
			exited = true
		case <-guard.C:
			n.t.Fatalf("no %s from the node client within %v:\n%s", typ, svWait, n.dump())
		}
	}
}

// waitStderr waits until the client's stderr matches re count times.
func (n *swNode) waitStderr(re *regexp.Regexp, count int) {
	n.t.Helper()
	guard := time.NewTimer(svWait)
	defer guard.Stop()
	for exited := false; ; {
		text, ch := n.stderr.state()
		if len(re.FindAllString(text, -1)) >= count {
			return
		}
		if exited {
			n.t.Fatalf("the node client exited (%v) before logging %d× %s:\n%s", n.err, count, re, n.dump())
		}
		select {
		case <-ch:
		case <-n.exited:
			// As in waitType: look once more (cmd.Wait copied all of
			// stderr before exited closed).
			exited = true
		case <-guard.C:
			n.t.Fatalf("the node client did not log %d× %s within %v:\n%s", count, re, svWait, n.dump())
		}
	}
}

func (n *swNode) waitExit() {
	n.t.Helper()
	select {
	case <-n.exited:
	case <-time.After(svWait):
		n.t.Fatalf("the node client did not exit within %v:\n%s", svWait, n.dump())
	}
	if n.err != nil {
		n.t.Fatalf("the node client failed: %v\n%s", n.err, n.dump())
	}
}

// swShape is a run of messages as one line: each type, with a
// status_change's new state, and runs of progress_update folded into one
// "progress". Pings and pongs are left out: their timing is the
// heartbeat's.
func swShape(msgs []swMsg) string {
	var parts []string
	for _, m := range msgs {
		p := m.typ()
		switch p {
		case "ping", "pong":
			continue
		case "status_change":
			p += ":" + m.str("new_state")
		case "progress_update":
			p = "progress"
			if len(parts) > 0 && parts[len(parts)-1] == p {
				continue
			}
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " ")
}

func TestSessionWSNodeClient(t *testing.T) {
	t.Parallel()
	modules := swNodeModules(t)
	e := e2eNewEnv(t, e2eOpts{})
	secret := []byte(strings.Repeat("n0de", 12))
	secretPath := filepath.Join(e.root, "jwt.secret")
	if err := os.WriteFile(secretPath, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	port := swFreePort(t)
	s := svStart(t, e, "--port", port, "--jwt-secret-file", secretPath, "--ws-progress-interval", "20ms")
	if s.port() != port {
		t.Fatalf("listening on %s, want the fixed port %s", s.addr, port)
	}
	schema := swSchema(t, s)

	// The client's token: its subject, and the conversation it may watch
	// (a session nobody authenticated created belongs to no subject).
	const conv = "watched-from-node"
	token := swToken(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "node-client", "sessions": []string{conv}})
	rest := swREST{base: "http://" + s.loopback(), token: token}
	created := rest.call(t, "PUT", "/api/v2/conversations/"+conv, map[string]any{})
	attachment, _ := created["session_id"].(string)
	if attachment == "" {
		t.Fatalf("PUT answered %v", created)
	}

	url := "ws://127.0.0.1:" + port + "/api/v1/ws/sessions/" + conv
	node := swStartNode(t, modules, url, conv, token, 2)
	node.waitType(0, "subscribed")

	// A first run over REST: a tool call, its result, an answer. The
	// model's first answer is held back a little, so the run is long
	// enough to see progress while it runs.
	slow := func(s *wiremock.Script) { s.FirstDelay = 150 * time.Millisecond }
	e.tweak("CMD:echo first-run", slow)
	e.tweak("CMD:echo second-run", slow)
	rest.call(t, "POST", "/api/v2/conversations/"+conv, map[string]any{"role": "user", "content": "CMD:echo first-run"})
	rest.call(t, "POST", "/api/v2/conversations/"+conv+"/step", map[string]any{"session_id": attachment, "auto_confirm": true})
	node.waitType(0, "completed")

	// A clean restart on the same port and data dir while the client
	// runs: it is cut off, fails to reconnect while nothing listens
	// (twice, so that the backoff shows), then resumes.
	s.sigterm()
	if code := s.waitExit(); code != 0 {
		t.Fatalf("agentd serve exited %d on SIGTERM\n%s", code, s.stderrTail(3000))
	}
	down := node.mark()
	failed := regexp.MustCompile(`connect failed attempt=\d+`)
	already := len(failed.FindAllString(node.stderr.String(), -1))
	node.waitStderr(failed, already+2)
	s2 := s.restart()
	if s2.port() != port {
		t.Fatalf("restarted on %s, want %s", s2.addr, port)
	}
	_, resub := node.waitType(down, "subscribed")

	rest2 := swREST{base: "http://" + s2.loopback(), token: token}
	rest2.call(t, "POST", "/api/v2/conversations/"+conv, map[string]any{"role": "user", "content": "CMD:echo second-run"})
	// The attachment did not outlive the restart; the design document's
	// path steps without one.
	rest2.call(t, "POST", "/api/conversations/"+conv+"/step", map[string]any{"auto_confirm": true})
	node.waitExit()

	msgs := node.all()
	if bad := node.bad; len(bad) > 0 {
		t.Fatalf("the client printed lines that are not JSON objects: %q", bad)
	}
	// Every message, before and after the restart, is what the served
	// schema says.
	for i, m := range msgs {
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(m.raw))
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if err := schema.Validate(inst); err != nil {
			t.Errorf("line %d does not match the served schema: %v\n%s", i, err, m.raw)
		}
	}

	// Split where the client subscribed again.
	split := -1
	for i := down; i < len(msgs); i++ {
		if msgs[i].typ() == "subscribed" {
			split = i
			break
		}
	}
	before, after := msgs[:split], msgs[split:]
	if got, want := swShape(before), "subscribed progress status_change:running progress status_change:completed completed"; got != want && got != want+" progress" {
		t.Errorf("the first run as the client saw it:\n  %s\nwant\n  %s [progress]\n%s", got, want, node.dump())
	}
	if got, want := swShape(after), "subscribed status_change:running progress status_change:completed completed"; got != want+" unsubscribed" && got != want+" progress unsubscribed" {
		t.Errorf("after the restart:\n  %s\nwant\n  %s [progress] unsubscribed\n%s", got, want, node.dump())
	}
	for _, part := range [][]swMsg{before, after} {
		for _, m := range part {
			if m.typ() == "completed" && m.str("final_state") != "completed" {
				t.Errorf("a run ended %s: %s", m.str("final_state"), m.raw)
			}
		}
	}

	// The resubscription resumed from the last seq the client had seen:
	// nothing missed, nothing again.
	var cursor uint64
	for _, m := range before {
		cursor = max(cursor, m.seq())
	}
	if resub.m["resumed"] != true || resub.seq() != cursor || resub.m["cursor_too_old"] == true {
		t.Errorf("resubscribed %s, want resumed at seq %d", resub.raw, cursor)
	}
	if !strings.Contains(node.stderr.String(), fmt.Sprintf(`"after_seq":%d`, cursor)) {
		t.Errorf("the client did not resubscribe with after_seq %d:\n%s", cursor, node.stderr.String())
	}
	seen := map[string]bool{}
	var lastChange uint64
	for _, m := range msgs {
		switch m.typ() {
		case "status_change", "completed", "error", "input_required":
			key := fmt.Sprintf("%s@%d", m.typ(), m.seq())
			if seen[key] {
				t.Errorf("%s arrived twice:\n%s", key, node.dump())
			}
			seen[key] = true
		}
		if m.typ() == "status_change" {
			if m.seq() <= lastChange {
				t.Errorf("status_change at seq %d after one at %d", m.seq(), lastChange)
			}
			lastChange = m.seq()
		}
	}
	var head uint64
	for _, m := range after[1:] {
		if m.typ() != "ping" && m.typ() != "pong" && m.seq() <= cursor {
			t.Errorf("after resuming at %d, a message at seq %d: %s", cursor, m.seq(), m.raw)
		}
		head = max(head, m.seq())
	}
	// unsubscribed reflects every event sent before it: a client that
	// keeps the last seq it read as its cursor must not go back.
	if last := msgs[len(msgs)-1]; last.typ() != "unsubscribed" || last.seq() != head {
		t.Errorf("the last message %s, want unsubscribed at seq %d", last.raw, head)
	}

	// The backoff doubled while the server was down.
	var delays []int
	for _, d := range regexp.MustCompile(`reconnect delay_ms=(\d+)`).FindAllStringSubmatch(node.stderr.String(), -1) {
		n, _ := strconv.Atoi(d[1])
		delays = append(delays, n)
	}
	if !strings.Contains(" "+fmt.Sprint(delays)[1:], " 100 200 400") {
		t.Errorf("reconnect delays %v, want 100, 200, 400 in a row", delays)
	}
}

// TestSessionWSSpecClient runs the spec's own example client, its class
// unchanged, under Node with the ws package: it connects on the spec's
// /conversions/ path with ?token=, subscribes, follows a run started over
// REST to completed, and after the server restarts it reconnects by
// itself (its backoff starts at a second) and follows the next run.
func TestSessionWSSpecClient(t *testing.T) {
	t.Parallel()
	modules := swNodeModules(t)
	e := e2eNewEnv(t, e2eOpts{})
	secret := []byte(strings.Repeat("spec", 12))
	secretPath := filepath.Join(e.root, "jwt.secret")
	if err := os.WriteFile(secretPath, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	port := swFreePort(t)
	s := svStart(t, e, "--port", port, "--jwt-secret-file", secretPath, "--ws-progress-interval", "20ms")
	const conv = "watched-by-the-spec-client"
	token := swToken(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "spec-client", "sessions": []string{conv}})
	rest := swREST{base: "http://" + s.loopback(), token: token}
	created := rest.call(t, "PUT", "/api/v2/conversations/"+conv, map[string]any{})
	attachment, _ := created["session_id"].(string)

	node := swRunNode(t, modules, "spec-client-run.cjs", nil, "ws://127.0.0.1:"+port, conv, token, "2")
	node.waitType(0, "subscribed")
	e.tweak("CMD:echo spec-one", func(s *wiremock.Script) { s.FirstDelay = 100 * time.Millisecond })
	rest.call(t, "POST", "/api/v2/conversations/"+conv, map[string]any{"role": "user", "content": "CMD:echo spec-one"})
	rest.call(t, "POST", "/api/v2/conversations/"+conv+"/step", map[string]any{"session_id": attachment, "auto_confirm": true})
	_, first := node.waitType(0, "completed")
	if first.str("final_state") != "completed" || !strings.Contains(first.raw, "spec-one") {
		t.Fatalf("first run: %s", first.raw)
	}

	s.sigterm()
	if code := s.waitExit(); code != 0 {
		t.Fatalf("agentd serve exited %d on SIGTERM\n%s", code, s.stderrTail(3000))
	}
	down := node.mark()
	s2 := s.restart()
	if s2.port() != port {
		t.Fatalf("restarted on %s, want %s", s2.addr, port)
	}
	node.waitType(down, "subscribed")
	rest2 := swREST{base: "http://" + s2.loopback(), token: token}
	rest2.call(t, "POST", "/api/v2/conversations/"+conv, map[string]any{"role": "user", "content": "CMD:echo spec-two"})
	rest2.call(t, "POST", "/api/conversations/"+conv+"/step", map[string]any{"auto_confirm": true})
	_, second := node.waitType(down, "completed")
	if second.str("final_state") != "completed" || !strings.Contains(second.raw, "spec-two") {
		t.Fatalf("second run: %s", second.raw)
	}
	node.waitExit()
	log := node.stderr.String()
	for _, want := range []string{"Connected", "Subscribed to session: " + conv, "Disconnected: 1001", "Reconnecting in 1000ms", "Workflow completed"} {
		if !strings.Contains(log, want) {
			t.Errorf("the client did not log %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "[error]") {
		t.Errorf("the client logged errors:\n%s", log)
	}
}

// The waits on a Node client see what it wrote last, though it exited
// right after: its end, seen on the same wake-up as its last output, does
// not hide that output.
func TestSWNodeWaitsSeeTheLastOutput(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not on PATH")
	}
	last := regexp.MustCompile(`(?m)^last written$`)
	tests := []struct {
		name string
		wait func(*swNode)
	}{
		{"waitType", func(n *swNode) { n.waitType(0, "last") }},
		{"waitStderr", func(n *swNode) { n.waitStderr(last, 1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 10 {
				n := swRunNode(t, "", "print-and-exit.cjs", nil, "2000")
				tt.wait(n)
				n.waitExit()
			}
		})
	}
}
