package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// A bash call the policy allowed, which had started when the server was
// killed (-9), is not offered again after the restart: on main it came
// back as a fresh "Allow bash?" question, and approving it ran it a
// second time (the file read start,start,end). It is recorded as
// interrupted, no approval is pending, and the file shows one start.
func TestServeStartedToolCallInterruptedByKill(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStart(t, e)
	a := s.dial("A")
	const sid = "crash"
	svCreate(a, sid)
	log := filepath.Join(e.cwd, "run.log")
	a.send(svM{"id": "p1", "type": "prompt", "sessionId": sid,
		"message": "CMD:echo start >> run.log; echo started-$((40+2)); sleep 60; echo end >> run.log"})
	// The call has run its first line once its output streams (the
	// command's text, which every update repeats, says started-$((40+2))).
	a.waitFor(0, "the command's first output", func(f svFrame) bool {
		return f.isEvent(sid, "tool_execution_update") && strings.Contains(f.raw, "started-42")
	})
	s.kill9()
	s = s.restart()
	b := s.dial("B")
	b.must("switch_session", svM{"sessionId": sid})

	msgs := svArr(b.must("get_messages", svM{"sessionId": sid}).m, "data", "messages")
	if len(msgs) == 0 {
		t.Fatal("no messages after the restart")
	}
	last := msgs[len(msgs)-1]
	if svStr(last, "role") != "toolResult" || svAt(last, "isError") != true || !strings.Contains(svJSON(last), "interrupted") {
		t.Fatalf("the conversation should end with the call's interrupted result, got %s", svJSON(last))
	}
	if n, _ := svNum(b.must("get_metrics", nil).m, "data", "stores", "extensionUI", "pendingCount"); n != 0 {
		t.Fatalf("%v approvals pending after the restart: the started call is offered again", n)
	}
	if got := strings.Join(svLines(t, log), ","); got != "start" {
		t.Fatalf("run.log reads %q, want start (the call ran once and was cut off)", got)
	}
	// The session goes on: the next prompt runs, the model reading the
	// interrupted result in its context.
	svPrompt(b, sid, "and now?")
	if got := strings.Join(svLines(t, log), ","); got != "start" {
		t.Fatalf("after the next prompt run.log reads %q: the interrupted call ran again", got)
	}
}
