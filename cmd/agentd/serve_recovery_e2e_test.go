package main

import (
	"testing"
)

// After a crash, a client can ask what the journal recovered: the
// outcomes kept for replay, and the commands that were cut off (which
// answer "interrupted" when retried). Every connection is told in
// startup_recovery_summary, without paths or ids; get_command_history
// lists recent commands.
func TestServeStartupRecoveryAndHistory(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStart(t, e)
	a := s.dial("A")
	svCreate(a, "rec")
	a.must("bash", svM{"sessionId": "rec", "command": "echo done"})
	a.send(svM{"id": "cut-off", "type": "bash", "sessionId": "rec", "command": "sleep 60"})
	a.waitFor(0, "the long command started", func(f svFrame) bool {
		return f.typ() == "command_started" && svStr(f.m, "data", "commandId") == "cut-off"
	})
	s.kill9()
	s = s.restart()
	b := s.dial("B")

	sum := b.waitType("startup_recovery_summary")
	svEq(t, "summary enabled", svAt(sum.m, "data", "enabled"), true)
	svEq(t, "summary initState", svAt(sum.m, "data", "initState"), "ready")
	svEq(t, "summary journalPath", svAt(sum.m, "data", "journalPath"), "[redacted]")
	svEq(t, "summary ids", len(svArr(sum.m, "data", "recoveredOutcomeIds")), 0)
	svEq(t, "summary in flight", len(svArr(sum.m, "data", "recoveredInFlight")), 0)
	if n, _ := svNum(sum.m, "data", "recoveredInFlightFailures"); n != 1 {
		t.Errorf("summary recoveredInFlightFailures = %v, want 1: %s", n, sum)
	}

	r := b.must("get_startup_recovery", nil)
	if p := svStr(r.m, "data", "journalPath"); p == "" || p == "[redacted]" {
		t.Errorf("journalPath = %q", p)
	}
	var inFlight []string
	for _, x := range svArr(r.m, "data", "recoveredInFlight") {
		inFlight = append(inFlight, svStr(x, "commandId")+":"+svStr(x, "commandType"))
	}
	svEq(t, "recovered in flight", inFlight, []string{"cut-off:bash"})
	ids := map[string]bool{}
	for _, x := range svArr(r.m, "data", "recoveredOutcomeIds") {
		ids[x.(string)] = true
	}
	if !ids["create_session-1"] || !ids["bash-2"] {
		t.Errorf("recovered outcome ids = %v", ids)
	}
	// The cut-off command answers as interrupted, and is not run again.
	svWantErr(t, b.call(svM{"id": "cut-off", "type": "bash", "sessionId": "rec", "command": "sleep 60"}), "Command interrupted by server restart")

	h := b.must("get_command_history", svM{"limit": 3})
	svEq(t, "history returned", svAt(h.m, "data", "returned"), float64(3))
	svEq(t, "history entries", len(svArr(h.m, "data", "entries")), 3)
	svEq(t, "history truncated", svAt(h.m, "data", "truncated"), true)
	for _, k := range []string{"enabled", "initialized", "journalPath", "maxItemsReturned", "maxItemsAllowed"} {
		if !svHas(h.m, "data", k) {
			t.Errorf("get_command_history lacks %s: %s", k, h)
		}
	}
	svWantErrPrefix(t, b.do("get_command_history", svM{"limit": 0}), "Validation failed: limit")
	svWantErrPrefix(t, b.do("get_command_history", svM{"limit": "x"}), "Validation failed: limit")

	m := b.must("get_metrics", nil)
	for _, k := range []string{"doubleUnregisterErrors", "pendingConnectionCount", "zombieSessionsDetected", "zombieSessionsCleaned"} {
		if _, ok := svNum(m.m, "data", k); !ok {
			t.Errorf("get_metrics lacks the number %s", k)
		}
	}
	if n, _ := svNum(m.m, "data", "stores", "journal", "records"); n < 1 {
		t.Errorf("stores.journal = %v", svAt(m.m, "data", "stores", "journal"))
	}
	if _, ok := svNum(m.m, "data", "stores", "replay", "outcomeCount"); !ok {
		t.Errorf("stores.replay = %v", svAt(m.m, "data", "stores", "replay"))
	}
}
