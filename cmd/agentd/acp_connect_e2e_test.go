package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// acpProc drives `agentd acp` over its stdio as an editor would: it
// sends requests, collects session/update, and answers
// session/request_permission with answer (nil leaves them open).
type acpProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *svBuf
	frames chan map[string]any
	exited chan struct{}

	mu      sync.Mutex
	nextID  int
	early   map[int]map[string]any
	updates []map[string]any
	asked   chan map[string]any
	answer  func(params map[string]any) map[string]any
}

func startACPProc(t *testing.T, e *e2eEnv, args ...string) *acpProc {
	t.Helper()
	cmd := exec.Command(agentdBin, append([]string{"acp"}, args...)...)
	cmd.Dir = e.cwd
	cmd.Env = []string{"HOME=" + e.home, "PATH=" + os.Getenv("PATH"), "AGENTD_DATA_DIR=" + e.data, "TMPDIR=" + e.tmp, "LANG=C.UTF-8"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithTest(cmd)
	cmd.WaitDelay = 5 * time.Second
	p := &acpProc{t: t, cmd: cmd, stderr: newSvBuf(), frames: make(chan map[string]any, 4096), exited: make(chan struct{}),
		early: map[int]map[string]any{}, asked: make(chan map[string]any, 16)}
	cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.frames)
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("agentd acp wrote a line that is not JSON: %q", sc.Text())
				continue
			}
			p.frames <- m
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.stdin.Close()
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
	})
	return p
}

func (p *acpProc) write(v any) {
	p.t.Helper()
	b, _ := json.Marshal(v)
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		p.t.Fatalf("writing to agentd acp: %v\nstderr:\n%s", err, p.stderr.String())
	}
}

func (p *acpProc) send(method string, params any) int {
	p.t.Helper()
	p.nextID++
	p.write(map[string]any{"jsonrpc": "2.0", "id": p.nextID, "method": method, "params": params})
	return p.nextID
}

// wait reads frames until the response to id, serving the agent's
// requests and notifications that come first.
func (p *acpProc) wait(id int) map[string]any {
	p.t.Helper()
	if f, ok := p.early[id]; ok {
		delete(p.early, id)
		return f
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case f, ok := <-p.frames:
			if !ok {
				p.t.Fatalf("agentd acp ended before the response to %d\nstderr:\n%s", id, p.stderr.String())
			}
			if m, isReq := f["method"].(string); isReq {
				p.handle(m, f)
				continue
			}
			got, _ := f["id"].(float64)
			if int(got) == id {
				return f
			}
			p.early[int(got)] = f
		case <-timeout:
			p.t.Fatalf("no response to %d\nstderr:\n%s", id, p.stderr.String())
		}
	}
}

// awaitAsk reads frames until a permission request arrives.
func (p *acpProc) awaitAsk() map[string]any {
	p.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case a := <-p.asked:
			return a
		case f, ok := <-p.frames:
			if !ok {
				p.t.Fatalf("agentd acp ended before asking\nstderr:\n%s", p.stderr.String())
			}
			if m, isReq := f["method"].(string); isReq {
				p.handle(m, f)
				continue
			}
			got, _ := f["id"].(float64)
			p.early[int(got)] = f
		case <-timeout:
			p.t.Fatalf("no permission request\nstderr:\n%s", p.stderr.String())
		}
	}
}

func (p *acpProc) handle(method string, f map[string]any) {
	params, _ := f["params"].(map[string]any)
	switch method {
	case "session/update":
		p.mu.Lock()
		p.updates = append(p.updates, params["update"].(map[string]any))
		p.mu.Unlock()
	case "session/request_permission":
		p.asked <- params
		if p.answer != nil {
			p.write(map[string]any{"jsonrpc": "2.0", "id": f["id"], "result": p.answer(params)})
		}
	default:
		p.t.Errorf("unexpected request from agentd acp: %s", method)
	}
}

func (p *acpProc) call(method string, params any) map[string]any {
	p.t.Helper()
	f := p.wait(p.send(method, params))
	r, ok := f["result"].(map[string]any)
	if !ok {
		p.t.Fatalf("%s: not a success: %v\nstderr:\n%s", method, f, p.stderr.String())
	}
	return r
}

func (p *acpProc) takeUpdates() []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.updates
	p.updates = nil
	return u
}

func acpChose(option string) func(map[string]any) map[string]any {
	return func(map[string]any) map[string]any {
		return map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": option}}
	}
}

func acpUpdateText(us []map[string]any, kind string) string {
	var b strings.Builder
	for _, u := range us {
		if u["sessionUpdate"] == kind {
			if c, ok := u["content"].(map[string]any); ok {
				b.WriteString(fmt.Sprint(c["text"]))
			}
		}
	}
	return b.String()
}

func acpCallEnd(us []map[string]any) map[string]any {
	for _, u := range us {
		if u["sessionUpdate"] == "tool_call_update" && (u["status"] == "completed" || u["status"] == "failed") {
			return u
		}
	}
	return nil
}

// agentd acp --connect: the editor's session is a session of agentd
// serve. A pi-server client lists it and watches its runs while the
// editor prompts, approves, rejects and cancels through ACP; another
// editor loads it with its history.
func TestACPConnectBridgesToServe(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStart(t, e, "--policy", e.writePolicy(`{"rules":[{"tool":"bash","action":"ask"}]}`))
	url := "ws://" + s.addr + "/"
	ed := startACPProc(t, e, "--connect", url)
	init := ed.call("initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{}})
	if caps, _ := init["agentCapabilities"].(map[string]any); caps["loadSession"] != true {
		t.Fatalf("initialize: %v", init)
	}
	sid, _ := ed.call("session/new", map[string]any{"cwd": e.cwd, "mcpServers": []any{}})["sessionId"].(string)
	if sid == "" {
		t.Fatal("session/new gave no sessionId")
	}

	// The browser's side: the session is there, and it watches it.
	w := s.dial("W")
	if list := w.must("list_sessions", nil); !strings.Contains(list.raw, `"sessionId":"`+sid+`"`) {
		t.Fatalf("list_sessions does not show the editor's session %s: %s", sid, list)
	}
	w.must("switch_session", svM{"sessionId": sid})

	start := time.Now()
	r := ed.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "hello over the bridge"}}})
	if r["stopReason"] != "end_turn" {
		t.Fatalf("prompt: %v", r)
	}
	t.Logf("session/prompt through the bridge answered in %v", time.Since(start))
	us := ed.takeUpdates()
	if text := acpUpdateText(us, "agent_message_chunk"); !strings.Contains(text, "Hello") {
		t.Fatalf("no streamed answer: %v", us)
	}
	w.waitEvent(sid, "agent_end")

	// Approved through the editor; the browser sees the request and the run.
	ed.answer = acpChose("allow_once")
	r = ed.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "CMD:echo bridged-run"}}})
	if r["stopReason"] != "end_turn" {
		t.Fatalf("approved prompt: %v", r)
	}
	asked := <-ed.asked
	tc, _ := asked["toolCall"].(map[string]any)
	if tc["title"] != "echo bridged-run" || tc["kind"] != "execute" {
		t.Fatalf("permission request: %v", asked)
	}
	us = ed.takeUpdates()
	end := acpCallEnd(us)
	if end == nil || end["status"] != "completed" || !strings.Contains(fmt.Sprint(end["content"]), "bridged-run") {
		t.Fatalf("approved call: %v", us)
	}
	if end["toolCallId"] != tc["toolCallId"] {
		t.Errorf("the permission asked about %v, the call was %v", tc["toolCallId"], end["toolCallId"])
	}
	w.waitEvent(sid, "extension_ui_request")
	if te := w.waitEvent(sid, "tool_execution_end"); !strings.Contains(te.raw, "bridged-run") {
		t.Fatalf("the watcher's tool_execution_end: %s", te)
	}

	// Rejected.
	ed.answer = acpChose("reject_once")
	ed.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "CMD:echo rejected-run"}}})
	<-ed.asked
	if end := acpCallEnd(ed.takeUpdates()); end == nil || end["status"] != "failed" {
		t.Fatalf("rejected call: %v", end)
	}

	// Cancelled while the editor has not answered.
	ed.answer = nil
	id := ed.send("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "CMD:echo pending-run"}}})
	ed.awaitAsk()
	ed.write(map[string]any{"jsonrpc": "2.0", "method": "session/cancel", "params": map[string]any{"sessionId": sid}})
	f := ed.wait(id)
	if res, _ := f["result"].(map[string]any); res["stopReason"] != "cancelled" {
		t.Fatalf("cancelled prompt: %v", f)
	}

	// Listed, and loaded by another editor with its history.
	list := ed.call("session/list", map[string]any{})
	if !strings.Contains(fmt.Sprint(list["sessions"]), sid) {
		t.Fatalf("session/list: %v", list)
	}
	// The browser's prompt waits for an approval when the second editor
	// loads the session: the editor is asked, and its answer runs the call.
	w.send(svM{"type": "prompt", "id": "pending-at-load", "sessionId": sid, "message": "CMD:echo pending-at-load"})
	atAsk, _ := w.waitFor(w.mark(), "the approval of the browser's call", func(f svFrame) bool {
		return f.isEvent(sid, "extension_ui_request") && strings.Contains(f.raw, "echo pending-at-load")
	})
	ed2 := startACPProc(t, e, "--connect", url)
	ed2.answer = acpChose("allow_once")
	ed2.call("initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{}})
	ed2.call("session/load", map[string]any{"sessionId": sid, "cwd": e.cwd, "mcpServers": []any{}})
	us = ed2.takeUpdates()
	if !strings.Contains(acpUpdateText(us, "user_message_chunk"), "hello over the bridge") || acpCallEnd(us) == nil {
		t.Fatalf("session/load replay: %v", us)
	}
	if tc, _ := ed2.awaitAsk()["toolCall"].(map[string]any); tc["title"] != "echo pending-at-load" {
		t.Fatalf("the loading editor was asked about %v, want the pending call", tc)
	}
	_, te := w.waitFor(atAsk, "the end of the browser's call", func(f svFrame) bool { return f.isEvent(sid, "tool_execution_end") })
	if !strings.Contains(te.raw, `"text":"pending-at-load`) {
		t.Fatalf("the call approved by the loading editor: %s", te)
	}
	if r := w.response("pending-at-load"); !strings.Contains(r.raw, `"success":true`) {
		t.Fatalf("the browser's prompt: %s", r)
	}
	ed2.stopped(t)

	// The server goes away while the editor is being asked: the prompt
	// fails saying so, and so does what the editor asks next.
	id = ed.send("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "CMD:echo orphan-run"}}})
	ed.awaitAsk()
	s.kill9()
	f = ed.wait(id)
	if e, _ := f["error"].(map[string]any); !strings.Contains(fmt.Sprint(e["message"]), "connection to agentd serve ended") {
		t.Fatalf("prompt when the server died: %v", f)
	}
	f = ed.wait(ed.send("session/new", map[string]any{"cwd": e.cwd, "mcpServers": []any{}}))
	if e, _ := f["error"].(map[string]any); !strings.Contains(fmt.Sprint(e["message"]), "connection to agentd serve ended") {
		t.Fatalf("session/new when the server is gone: %v", f)
	}
	ed.stopped(t)
}

// stopped closes the editor's side and requires agentd acp to exit 0
// soon after.
func (p *acpProc) stopped(t *testing.T) {
	t.Helper()
	_ = p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("agentd acp did not exit after its stdin closed\nstderr:\n%s", p.stderr.String())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("agentd acp exited %d\nstderr:\n%s", code, p.stderr.String())
	}
}

// A bad --connect fails at once with an error that says what to do.
func TestACPConnectErrors(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	tokened := svStart(t, e, "--token", "s3cret-bridge-token-42")
	// A port nothing listens on: one that was just free.
	down := svStart(t, e2eNewEnv(t, e2eOpts{}))
	downURL := "ws://" + down.addr + "/"
	down.kill9()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"not a websocket url", []string{"--connect", "127.0.0.1:3141"}, "want the WebSocket URL of agentd serve"},
		{"a local policy", []string{"--connect", "ws://" + tokened.addr + "/", "--policy", "p.json"}, "--policy: with --connect the sessions are agentd serve's"},
		{"server down", []string{"--connect", downURL}, "is `agentd serve` running there?"},
		{"token missing", []string{"--connect", "ws://" + tokened.addr + "/"}, "--token or AGENTD_TOKEN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startACPProc(t, e, tc.args...)
			select {
			case <-p.exited:
			case <-time.After(30 * time.Second):
				t.Fatal("agentd acp did not exit")
			}
			if p.cmd.ProcessState.ExitCode() == 0 || !strings.Contains(p.stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant it to say %q", p.cmd.ProcessState.ExitCode(), p.stderr.String(), tc.want)
			}
		})
	}
	// With the token it connects.
	p := startACPProc(t, e, "--connect", "ws://"+tokened.addr+"/", "--token", "s3cret-bridge-token-42")
	p.call("initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{}})
	if sid := p.call("session/new", map[string]any{"cwd": e.cwd, "mcpServers": []any{}})["sessionId"]; sid == "" {
		t.Fatal("no session")
	}
}

// The official ACP SDK as the editor, bridged to agentd serve: a streamed
// answer, a call approved, one rejected, a cancel while asked, and after
// the editor restarts, the session listed and loaded from the server;
// a pi-server client sees the same session and its runs.
func TestACPConnectWithTheOfficialClient(t *testing.T) {
	acpNodeModules(t)
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStart(t, e, "--policy", e.writePolicy(`{"rules":[{"tool":"bash","action":"ask"}]}`))
	steps := e.acpClient([]string{
		"init", "new", "prompt:hello over the bridge",
		"allow:CMD:echo approved-run", "reject:CMD:echo rejected-run", "cancel:CMD:echo pending-run",
		"prompt:still here",
		"restart", "init", "list", "load", "prompt:after load",
	}, "--connect", "ws://"+s.addr+"/")

	sid, _ := acpFind(t, steps, "new").Result["sessionId"].(string)
	hello := acpFind(t, steps, "prompt:hello over the bridge")
	if hello.StopReason != "end_turn" || hello.Text != "Hello from mock! You said: hello over the bridge" {
		t.Fatalf("prompt: stop %q text %q", hello.StopReason, hello.Text)
	}
	t.Logf("through the bridge: session/prompt to first session/update %.1f ms (whole turn %.1f ms)", hello.FirstUpdateMs, hello.TotalMs)
	allow := acpFind(t, steps, "allow:CMD:echo approved-run")
	if end := acpToolEnd(allow); len(allow.Asked) != 1 || end == nil || end["status"] != "completed" || !strings.Contains(fmt.Sprint(end["content"]), "approved-run") {
		t.Fatalf("approved: asked %v end %v", allow.Asked, end)
	}
	if end := acpToolEnd(acpFind(t, steps, "reject:CMD:echo rejected-run")); end == nil || end["status"] != "failed" {
		t.Fatalf("rejected: %v", end)
	}
	if c := acpFind(t, steps, "cancel:CMD:echo pending-run"); c.StopReason != "cancelled" || len(c.Asked) != 1 {
		t.Fatalf("cancel while asking: stop %q asked %d", c.StopReason, len(c.Asked))
	}
	if still := acpFind(t, steps, "prompt:still here"); still.StopReason != "end_turn" {
		t.Fatalf("prompt after cancel: %q", still.StopReason)
	}
	if list := acpFind(t, steps, "list"); !strings.Contains(fmt.Sprint(list.Result["sessions"]), sid) {
		t.Fatalf("list: %v", list.Result)
	}
	load := acpFind(t, steps, "load")
	if !strings.Contains(acpUpdateText(load.Updates, "user_message_chunk"), "hello over the bridge") {
		t.Fatalf("load replay: %v", load.Updates)
	}
	if after := acpFind(t, steps, "prompt:after load"); after.StopReason != "end_turn" {
		t.Fatalf("prompt after load: %q", after.StopReason)
	}

	// The browser's side: the same session, with every prompt in it.
	w := s.dial("W")
	w.must("switch_session", svM{"sessionId": sid})
	msgs := w.must("get_messages", svM{"sessionId": sid})
	for _, want := range []string{"hello over the bridge", "approved-run", "still here", "after load"} {
		if !strings.Contains(msgs.raw, want) {
			t.Errorf("get_messages on pi-server lacks %q", want)
		}
	}
}
