package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/sandbox"
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
				svEq(t, "title", svAt(ev, "title"), "bash wants to write outside the workspace")
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
