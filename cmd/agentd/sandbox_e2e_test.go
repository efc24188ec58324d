package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/sandbox"
)

// agentd serve confines the model's bash commands by default
// (workspace-write): a write under the session's directory succeeds, one
// in $HOME is refused, and the refusal is put to the person as an
// approval on the pi-server face. Allow reruns the command with access;
// Reject leaves it refused. --sandbox full-access is today's behaviour.
func TestSandboxServe(t *testing.T) {
	t.Parallel()
	if s := sandbox.Probe(); s.Err != nil {
		t.Skipf("no Landlock on this kernel, the sandbox cannot be tested: %v", s.Err)
	}
	const cmd = `CMD:touch inside && touch "$HOME/outside"`
	cases := []struct {
		name    string
		args    []string
		answer  string // the person's answer to the escalation; "" when none is expected
		outside bool   // whether $HOME/outside is created
	}{
		{"default, rejected", nil, "Reject", false},
		{"default, allowed once", nil, "Allow", true},
		{"full-access", []string{"--sandbox", "full-access"}, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := e2eNewEnv(t, e2eOpts{})
			s := svStart(t, e, c.args...)
			A := s.dial("A")
			const sid = "sb"
			svCreate(A, sid)
			A.send(svM{"id": "p1", "type": "prompt", "sessionId": sid, "message": cmd})
			if c.answer != "" {
				req := A.waitEvent(sid, "extension_ui_request")
				ev := req.m["event"]
				svEq(t, "title", svAt(ev, "title"), "bash wants to write outside the workspace (approving runs the command again)")
				if msg := svStr(ev, "message"); !strings.Contains(msg, "workspace-write") || !strings.Contains(msg, "outside") {
					t.Errorf("the request should say what refused what: %q", msg)
				}
				svWantOK(t, A.call(svM{"id": "ans", "type": "extension_ui_response", "sessionId": sid,
					"requestId": svStr(ev, "requestId"), "response": svM{"method": "select", "value": c.answer}}))
			}
			te := A.waitEvent(sid, "tool_execution_end")
			svWantOK(t, A.response("p1"))
			if _, err := os.Stat(filepath.Join(e.cwd, "inside")); err != nil {
				t.Errorf("a write in the workspace failed: %v; %s", err, te)
			}
			_, err := os.Stat(filepath.Join(e.home, "outside"))
			if got := err == nil; got != c.outside {
				t.Fatalf("$HOME/outside created = %v, want %v; %s", got, c.outside, te)
			}
			svEq(t, "tool isError", svAt(te.m, "event", "isError"), !c.outside)
			if !c.outside && !strings.Contains(te.raw, "sandbox") {
				t.Errorf("the model should be told the sandbox refused it: %s", te)
			}
		})
	}
}

// Provider keys and the server token are not passed to confined tools;
// full-access keeps today's environment.
func TestSandboxServeSecrets(t *testing.T) {
	t.Parallel()
	if s := sandbox.Probe(); s.Err != nil {
		t.Skipf("no Landlock on this kernel, the sandbox cannot be tested: %v", s.Err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "key=[]"},
		{[]string{"--sandbox", "full-access"}, "key=[sk-mock-key]"},
	} {
		t.Run(strings.Join(append([]string{"default"}, c.args...), " "), func(t *testing.T) {
			t.Parallel()
			e := e2eNewEnv(t, e2eOpts{})
			s := svStart(t, e, c.args...)
			A := s.dial("A")
			svCreate(A, "sb")
			A.send(svM{"id": "p1", "type": "prompt", "sessionId": "sb", "message": `CMD:echo "key=[$MOCK_API_KEY]"`})
			te := A.waitEvent("sb", "tool_execution_end")
			svWantOK(t, A.response("p1"))
			if got := svStr(te.m, "event", "result", "content", "0", "text"); !strings.Contains(got, c.want) {
				t.Fatalf("tool output %q, want %q", got, c.want)
			}
		})
	}
}

// The same escalation over the REST face: the refused command shows as
// tool_pending on the event stream; confirm reruns it with access,
// reject leaves it refused.
func TestSandboxServeREST(t *testing.T) {
	t.Parallel()
	if s := sandbox.Probe(); s.Err != nil {
		t.Skipf("no Landlock on this kernel, the sandbox cannot be tested: %v", s.Err)
	}
	for _, c := range []struct {
		action  string
		outside bool
	}{{"confirm", true}, {"reject", false}} {
		t.Run(c.action, func(t *testing.T) {
			t.Parallel()
			e := e2eNewEnv(t, e2eOpts{})
			s := svStart(t, e)
			base := "http://" + s.loopback() + "/api/v2/conversations/sbx"
			call := func(method, url string, body any) map[string]any {
				t.Helper()
				b, _ := json.Marshal(body)
				req, _ := http.NewRequest(method, url, bytes.NewReader(b))
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var out map[string]any
				_ = json.NewDecoder(resp.Body).Decode(&out)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s %s: %d %v", method, url, resp.StatusCode, out)
				}
				return out
			}
			created := call("PUT", base, svM{"auto_confirm": true, "messages": []svM{{"role": "user", "content": `CMD:touch inside && touch "$HOME/outside"`}}})
			sid := svStr(created, "session_id")
			resp, err := http.Get(base + "/events?session_id=" + sid)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			events := make(chan map[string]any, 64)
			go func() {
				defer close(events)
				sc := bufio.NewScanner(resp.Body)
				sc.Buffer(make([]byte, 1<<20), 1<<20)
				for sc.Scan() {
					if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
						var ev map[string]any
						if json.Unmarshal([]byte(data), &ev) == nil {
							events <- ev
						}
					}
				}
			}()
			waitType := func(typ string) map[string]any {
				t.Helper()
				for ev := range events {
					if svStr(ev, "type") == typ {
						return ev
					}
				}
				t.Fatalf("the event stream ended before %s", typ)
				return nil
			}
			call("POST", base+"/step", svM{"session_id": sid})
			pending := waitType("tool_pending")
			call("POST", base+"/tool/confirm", svM{"session_id": sid, "tool_id": svStr(pending, "tool_id"), "action": c.action})
			waitType("run_ended")
			resp.Body.Close()
			for range events {
			}
			// The command ran (confined) before the person was asked: what
			// was pending was the sandbox's question, not the gate's.
			if _, err := os.Stat(filepath.Join(e.cwd, "inside")); err != nil {
				t.Fatalf("the command did not run before the escalation: %v", err)
			}
			_, err = os.Stat(filepath.Join(e.home, "outside"))
			if got := err == nil; got != c.outside {
				t.Fatalf("$HOME/outside created = %v, want %v", got, c.outside)
			}
		})
	}
}

// A client may choose a stricter sandbox for its session with
// create_session's sandbox field, never a looser one; the session keeps
// it when it is loaded again after kill -9 and a restart.
func TestSandboxServePerSession(t *testing.T) {
	t.Parallel()
	if s := sandbox.Probe(); s.Err != nil {
		t.Skipf("no Landlock on this kernel, the sandbox cannot be tested: %v", s.Err)
	}
	e := e2eNewEnv(t, e2eOpts{})
	s := svStart(t, e)
	A := s.dial("A")
	svWantErr(t, A.call(svM{"id": "c0", "type": "create_session", "sessionId": "loose", "sandbox": "full-access"}),
		"Sandbox mode full-access is not allowed: this server runs tools in workspace-write, and a session may only choose that or a stricter mode; sandbox must be read-only or workspace-write")
	svWantErr(t, A.call(svM{"id": "c1", "type": "create_session", "sessionId": "bad", "sandbox": "none"}),
		`Unknown sandbox mode "none": sandbox must be read-only or workspace-write`)
	A.must("create_session", svM{"sessionId": "ro", "sandbox": "read-only"})
	// refusedInCwd runs a write in the workspace and reports whether the
	// sandbox refused it (read-only asks the person, who says no).
	refusedInCwd := func(c *svConn, name string) bool {
		t.Helper()
		c.send(svM{"id": "p-" + name, "type": "prompt", "sessionId": "ro", "message": "CMD:touch " + name})
		req := c.waitEvent("ro", "extension_ui_request")
		svEq(t, "title", svAt(req.m, "event", "title"), "bash wants to write files in the workspace (approving runs the command again)")
		svWantOK(t, c.call(svM{"id": "a-" + name, "type": "extension_ui_response", "sessionId": "ro",
			"requestId": svStr(req.m, "event", "requestId"), "response": svM{"method": "select", "value": "Reject"}}))
		c.waitEvent("ro", "tool_execution_end")
		svWantOK(t, c.response("p-"+name))
		_, err := os.Stat(filepath.Join(e.cwd, name))
		return err != nil
	}
	if !refusedInCwd(A, "before") {
		t.Fatal("read-only session wrote in its workspace")
	}
	// kill -9: nothing is written on the way out, so the mode must have
	// been durable from the create on.
	s.kill9()
	s = s.restart()
	B := s.dial("B")
	B.must("switch_session", svM{"sessionId": "ro"})
	if !refusedInCwd(B, "after") {
		t.Fatal("after kill -9 and a restart the session lost its read-only sandbox")
	}
	// The other faces see the mode too.
	if got := rsSandboxOf(rsOK(t, s, "GET", rsConvPath("ro")+"/config", nil)); got != "read-only" {
		t.Fatalf("the REST face reports the pi-server session's sandbox as %q", got)
	}
}
