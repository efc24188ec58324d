package acp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/tool"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testSessions builds sessions on the faux model with the built-in tools.
type testSessions struct {
	p      *faux.Provider
	dir    string
	policy interaction.Policy
	// checkpoints is the sessions' checkpoint dir ("" for none).
	checkpoints string
}

func (ts *testSessions) Open(_ context.Context, spec Spec) (*session.Session, error) {
	env := tool.Env{Cwd: spec.Cwd, Locks: &tool.FileLocks{}, Scope: tool.NewScope(), TempDir: os.TempDir()}
	var tools []tool.Tool
	for _, n := range tool.BuiltinNames {
		t, err := tool.New(n, env)
		if err != nil {
			return nil, err
		}
		tools = append(tools, t)
	}
	// As the engine does: a tool named like a built-in takes its place.
	for _, x := range spec.Tools {
		replaced := false
		for i, t := range tools {
			if t.Spec().Name == x.Spec().Name {
				tools[i], replaced = x, true
			}
		}
		if !replaced {
			tools = append(tools, x)
		}
	}
	return session.New(session.Config{Cwd: spec.Cwd, SessionsDir: ts.dir, Open: spec.File, Model: faux.Model(),
		Stream: ts.p.Stream, Tools: tools, BashEnv: env, Policy: ts.policy, CheckpointDir: ts.checkpoints})
}

// client drives an Agent over pipes as an editor would.
type client struct {
	t      *testing.T
	w      *io.PipeWriter
	frames chan map[string]any
	done   chan error
	nextID int

	mu      sync.Mutex
	updates []map[string]any // every session/update's "update"
	// answer decides a session/request_permission; nil leaves it open.
	answer func(params map[string]any) map[string]any
	asked  chan map[string]any
	// early are responses read while waiting for another.
	early map[int]map[string]any
	// serve answers the client methods besides permission requests.
	serve map[string]func(params map[string]any) any
}

func startAgent(t *testing.T, ts *testSessions) *client {
	t.Helper()
	if ts == nil {
		ts = &testSessions{p: faux.New(faux.Options{}), dir: t.TempDir()}
	}
	return startAgentWith(t, Options{Sessions: ts, SessionsDir: ts.dir, Version: "test", MaxLineBytes: 4096})
}

// startAgentWith runs an Agent with opt and drives it.
func startAgentWith(t *testing.T, opt Options) *client {
	t.Helper()
	a := New(opt)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &client{t: t, w: inW, frames: make(chan map[string]any, 1024), done: make(chan error, 1), asked: make(chan map[string]any, 16)}
	go func() {
		err := a.Run(context.Background(), inR, outW)
		outW.Close()
		c.done <- err
	}()
	go func() {
		defer close(c.frames)
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("output line is not a JSON object: %q", sc.Text())
				continue
			}
			if m["jsonrpc"] != "2.0" {
				t.Errorf("output line without jsonrpc 2.0: %q", sc.Text())
			}
			c.frames <- m
		}
	}()
	t.Cleanup(func() {
		c.w.Close()
		for range c.frames {
		}
		if err := <-c.done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return c
}

func (c *client) line(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.w, s+"\n"); err != nil {
		c.t.Fatal(err)
	}
}

// send writes a request and returns its id.
func (c *client) send(method string, params any) int {
	c.t.Helper()
	c.nextID++
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.nextID, "method": method, "params": params})
	c.line(string(b))
	return c.nextID
}

// wait reads until the response to id, handling what comes before it.
func (c *client) wait(id int) map[string]any {
	c.t.Helper()
	if f, ok := c.early[id]; ok {
		delete(c.early, id)
		return f
	}
	timeout := time.After(20 * time.Second)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("output ended before the response to %d", id)
			}
			if m, isReq := f["method"].(string); isReq {
				c.handle(m, f)
				continue
			}
			got, isNum := f["id"].(float64)
			if isNum && int(got) == id {
				return f
			}
			if !isNum || int(got) > c.nextID {
				c.t.Fatalf("unexpected frame while waiting for %d: %v", id, f)
			}
			if c.early == nil {
				c.early = map[int]map[string]any{}
			}
			c.early[int(got)] = f
		case <-timeout:
			c.t.Fatalf("no response to %d", id)
		}
	}
}

func (c *client) handle(method string, f map[string]any) {
	params, _ := f["params"].(map[string]any)
	switch method {
	case "session/update":
		c.mu.Lock()
		c.updates = append(c.updates, params["update"].(map[string]any))
		c.mu.Unlock()
	case "session/request_permission":
		c.asked <- params
		if c.answer == nil {
			return
		}
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": f["id"], "result": c.answer(params)})
		c.line(string(b))
	default:
		h := c.serve[method]
		if h == nil {
			c.t.Errorf("unexpected request %s", method)
			return
		}
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": f["id"], "result": h(params)})
		c.line(string(b))
	}
}

func (c *client) call(method string, params any) map[string]any {
	c.t.Helper()
	return c.wait(c.send(method, params))
}

func (c *client) takeUpdates() []map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.updates
	c.updates = nil
	return u
}

func result(t *testing.T, f map[string]any) map[string]any {
	t.Helper()
	r, ok := f["result"].(map[string]any)
	if !ok {
		t.Fatalf("not a success: %v", f)
	}
	return r
}

func (c *client) newSession(cwd string) string {
	c.t.Helper()
	c.call("initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{}})
	r := result(c.t, c.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))
	c.takeUpdate("available_commands_update")
	return r["sessionId"].(string)
}

// takeUpdate waits for a session/update of kind, which the agent sends
// on its own (available_commands_update after session/new), and takes
// it out of the updates the test looks at.
func (c *client) takeUpdate(kind string) map[string]any {
	c.t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		c.mu.Lock()
		for i, u := range c.updates {
			if u["sessionUpdate"] == kind {
				c.updates = append(c.updates[:i:i], c.updates[i+1:]...)
				c.mu.Unlock()
				return u
			}
		}
		c.mu.Unlock()
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("no %s update before the end", kind)
			}
			if m, isReq := f["method"].(string); isReq {
				c.handle(m, f)
				continue
			}
			got, _ := f["id"].(float64)
			if c.early == nil {
				c.early = map[int]map[string]any{}
			}
			c.early[int(got)] = f
		case <-timeout:
			c.t.Fatalf("no %s update", kind)
		}
	}
}

func TestBadInputIsAnsweredAndTheAgentGoesOn(t *testing.T) {
	c := startAgent(t, nil)
	cwd := t.TempDir()
	sid := c.newSession(cwd)
	tests := []struct {
		name, line string
		code       float64
		message    string
	}{
		{"malformed JSON", `{"jsonrpc":"2.0","id":1,`, CodeParseError, "Parse error"},
		{"not an object", `[1,2]`, CodeInvalidRequest, "must be a JSON object"},
		{"no jsonrpc", `{"id":7,"method":"initialize","params":{}}`, CodeInvalidRequest, `"jsonrpc" must be "2.0"`},
		{"id of a wrong type", `{"jsonrpc":"2.0","id":{},"method":"initialize"}`, CodeInvalidRequest, "id must be"},
		{"unknown method", `{"jsonrpc":"2.0","id":8,"method":"session/frobnicate","params":{}}`, CodeMethodNotFound, "Method not found: session/frobnicate"},
		{"too long", `{"jsonrpc":"2.0","id":9,"method":"x","params":"` + strings.Repeat("z", 5000) + `"}`, CodeParseError, "maximum size of 4096"},
		{"no params", `{"jsonrpc":"2.0","id":10,"method":"session/new"}`, CodeInvalidParams, "Invalid params for session/new: params must be an object"},
		{"cwd of a wrong type", `{"jsonrpc":"2.0","id":11,"method":"session/new","params":{"cwd":5,"mcpServers":[]}}`, CodeInvalidParams, `"cwd" must be a string, not number`},
		{"no cwd", `{"jsonrpc":"2.0","id":12,"method":"session/new","params":{"mcpServers":[]}}`, CodeInvalidParams, "cwd is required"},
		{"relative cwd", `{"jsonrpc":"2.0","id":13,"method":"session/new","params":{"cwd":"rel","mcpServers":[]}}`, CodeInvalidParams, "cwd must be an absolute path"},
		{"no protocol version", `{"jsonrpc":"2.0","id":14,"method":"initialize","params":{}}`, CodeInvalidParams, "protocolVersion is required"},
		{"unknown session", `{"jsonrpc":"2.0","id":15,"method":"session/prompt","params":{"sessionId":"nope","prompt":[]}}`, CodeResourceNotFound, "Session nope is not open"},
		{"empty prompt", `{"jsonrpc":"2.0","id":16,"method":"session/prompt","params":{"sessionId":"` + sid + `","prompt":[]}}`, CodeInvalidParams, "prompt is empty"},
		{"audio prompt", `{"jsonrpc":"2.0","id":17,"method":"session/prompt","params":{"sessionId":"` + sid + `","prompt":[{"type":"audio","data":"x","mimeType":"audio/wav"}]}}`, CodeInvalidParams, "audio is not supported"},
		{"prompt of a wrong type", `{"jsonrpc":"2.0","id":18,"method":"session/prompt","params":{"sessionId":"` + sid + `","prompt":"hi"}}`, CodeInvalidParams, `"prompt" must be an array`},
		{"stdio server without command", `{"jsonrpc":"2.0","id":19,"method":"session/new","params":{"cwd":"/","mcpServers":[{"name":"x","args":[],"env":[]}]}}`, CodeInvalidParams, "mcpServers[0] (x): command is required"},
		{"unknown load", `{"jsonrpc":"2.0","id":20,"method":"session/load","params":{"sessionId":"nope","cwd":"/","mcpServers":[]}}`, CodeResourceNotFound, "No session nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.line(tt.line)
			f := <-c.frames
			e, ok := f["error"].(map[string]any)
			if !ok {
				t.Fatalf("no error: %v", f)
			}
			if e["code"] != tt.code || !strings.Contains(e["message"].(string), tt.message) {
				t.Fatalf("got %v %q, want %v containing %q", e["code"], e["message"], tt.code, tt.message)
			}
			// Still serving.
			r := result(t, c.call("initialize", map[string]any{"protocolVersion": 1}))
			if r["protocolVersion"] != float64(1) {
				t.Fatalf("initialize after bad input: %v", r)
			}
		})
	}
}

func TestInitializeIsHonest(t *testing.T) {
	c := startAgent(t, nil)
	r := result(t, c.call("initialize", map[string]any{"protocolVersion": 1}))
	caps := r["agentCapabilities"].(map[string]any)
	if caps["loadSession"] != true {
		t.Errorf("loadSession %v", caps["loadSession"])
	}
	if mcp := caps["mcpCapabilities"].(map[string]any); mcp["http"] != false {
		t.Errorf("http MCP offered without an MCP source: %v", mcp)
	}
	if p := caps["promptCapabilities"].(map[string]any); p["audio"] != false || p["image"] != true {
		t.Errorf("prompt capabilities %v", p)
	}
}

func TestPromptStreamsTheAnswer(t *testing.T) {
	c := startAgent(t, nil)
	sid := c.newSession(t.TempDir())
	r := result(t, c.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "hello there world"}}}))
	if r["stopReason"] != StopEndTurn {
		t.Fatalf("stop %v", r)
	}
	var text strings.Builder
	chunks, usage := 0, 0
	for _, u := range c.takeUpdates() {
		switch u["sessionUpdate"] {
		case "agent_message_chunk":
			chunks++
			text.WriteString(u["content"].(map[string]any)["text"].(string))
		case "usage_update":
			usage++
			if u["size"] != float64(faux.Model().ContextWindow) || u["used"].(float64) <= 0 {
				t.Errorf("usage %v", u)
			}
		}
	}
	if text.String() != "You said: hello there world" || chunks < 2 || usage != 1 {
		t.Fatalf("text %q in %d chunks, %d usage updates", text.String(), chunks, usage)
	}
}

func askPolicy(t *testing.T) interaction.Policy {
	p, err := interaction.ParsePolicy([]byte(`{"rules":[{"tool":"bash","action":"ask"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func selected(id string) func(map[string]any) map[string]any {
	return func(map[string]any) map[string]any {
		return map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": id}}
	}
}

func TestPermissionAnswers(t *testing.T) {
	tests := []struct {
		option     string
		wantStatus string
		wantOutput string
	}{
		{AllowOnce, "completed", "acp-ok"},
		{AllowAlways, "completed", "acp-ok"},
		{RejectOnce, "failed", "rejected"},
		{RejectAlways, "failed", "rejected"},
	}
	for _, tt := range tests {
		t.Run(tt.option, func(t *testing.T) {
			c := startAgent(t, &testSessions{p: faux.New(faux.Options{}), dir: t.TempDir(), policy: askPolicy(t)})
			c.answer = selected(tt.option)
			sid := c.newSession(t.TempDir())
			for round := range 2 {
				r := result(t, c.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "/bash echo acp-ok"}}}))
				if r["stopReason"] != StopEndTurn {
					t.Fatalf("stop %v", r)
				}
				var asked map[string]any
				select {
				case asked = <-c.asked:
				default:
				}
				// "always" answers are not asked again.
				always := tt.option == AllowAlways || tt.option == RejectAlways
				if round == 1 && always {
					if asked != nil {
						t.Fatalf("asked again after %s", tt.option)
					}
				} else {
					if asked == nil {
						t.Fatalf("round %d: not asked", round)
					}
					tc := asked["toolCall"].(map[string]any)
					if tc["kind"] != "execute" || tc["title"] != "echo acp-ok" || len(asked["options"].([]any)) != 4 {
						t.Fatalf("permission request %v", asked)
					}
				}
				var start, end map[string]any
				for _, u := range c.takeUpdates() {
					switch u["sessionUpdate"] {
					case "tool_call":
						start = u
					case "tool_call_update":
						if s := u["status"]; s == "completed" || s == "failed" {
							end = u
						}
					}
				}
				if start == nil || start["kind"] != "execute" || start["status"] != "pending" {
					t.Fatalf("tool_call %v", start)
				}
				if end == nil || end["status"] != tt.wantStatus || !strings.Contains(fmt.Sprint(end["content"]), tt.wantOutput) {
					t.Fatalf("tool_call_update %v", end)
				}
			}
		})
	}
}

func TestCancelSettlesAPendingPermission(t *testing.T) {
	c := startAgent(t, &testSessions{p: faux.New(faux.Options{}), dir: t.TempDir(), policy: askPolicy(t)})
	sid := c.newSession(t.TempDir())
	id := c.send("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "/bash echo never"}}})
	// Read until the permission request arrives; nobody answers it.
	for len(c.asked) == 0 {
		f := <-c.frames
		c.handle(f["method"].(string), f)
	}
	c.line(`{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"` + sid + `"}}`)
	r := result(t, c.wait(id))
	if r["stopReason"] != StopCancelled {
		t.Fatalf("stop %v", r)
	}
	// The session takes the next prompt.
	r = result(t, c.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "again"}}}))
	if r["stopReason"] != StopEndTurn {
		t.Fatalf("after cancel: %v", r)
	}
}

func TestLoadReplaysAndListFinds(t *testing.T) {
	ts := &testSessions{p: faux.New(faux.Options{}), dir: t.TempDir()}
	cwd := t.TempDir()
	if err := os.WriteFile(filepath.Join(cwd, "f.txt"), []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startAgent(t, ts)
	sid := c.newSession(cwd)
	result(t, c.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "first words"}}}))
	result(t, c.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text",
		"text": `/tool edit {"path":"f.txt","edits":[{"oldText":"old","newText":"new"}]}`}}}))
	live := c.takeUpdates()
	var diff map[string]any
	for _, u := range live {
		if u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed" {
			for _, cc := range u["content"].([]any) {
				if m := cc.(map[string]any); m["type"] == "diff" {
					diff = m
				}
			}
		}
	}
	if diff == nil || diff["path"] != filepath.Join(cwd, "f.txt") || diff["oldText"] != "old" || diff["newText"] != "new" {
		t.Fatalf("edit diff %v in %v", diff, live)
	}

	c2 := startAgent(t, ts)
	c2.call("initialize", map[string]any{"protocolVersion": 1})
	l := result(t, c2.call("session/list", map[string]any{"cwd": cwd}))
	ss := l["sessions"].([]any)
	if len(ss) != 1 || ss[0].(map[string]any)["sessionId"] != sid || ss[0].(map[string]any)["title"] != "first words" {
		t.Fatalf("list %v", l)
	}
	result(t, c2.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
	var kinds []string
	for _, u := range c2.takeUpdates() {
		kinds = append(kinds, u["sessionUpdate"].(string))
	}
	want := "user_message_chunk agent_message_chunk user_message_chunk agent_message_chunk tool_call tool_call_update agent_message_chunk"
	if strings.Join(kinds, " ") != want {
		t.Fatalf("replay %v\nwant %s", kinds, want)
	}
	r := result(t, c2.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "more"}}}))
	if r["stopReason"] != StopEndTurn {
		t.Fatalf("prompt after load: %v", r)
	}
}
