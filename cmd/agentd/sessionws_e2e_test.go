package main

// The per-session WebSocket face (issue 13), black-box against the
// binary: every message is checked against the schema the server serves.

import (
	"testing"
)

// swSession creates a session over pi-server and returns its id and the
// pi-server connection that drives it.
func swSession(t *testing.T, s *svServer) (string, *svConn) {
	t.Helper()
	pi := s.dial("driver")
	r := pi.must("create_session", nil)
	id := svStr(r.m, "data", "sessionId")
	if id == "" {
		t.Fatalf("no session id in %s", r)
	}
	return id, pi
}

func TestSessionWSFollowsARun(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStart(t, e, "--ws-progress-interval", "50ms")
	schema := swSchema(t, s)
	id, pi := swSession(t, s)

	c := swConnect(t, s, schema, id, swDial{})
	sub := c.subscribe(id, nil)
	if sub.str("current_state") != "idle" || sub.m["resumed"] != false {
		t.Fatalf("subscribed %s", sub.raw)
	}
	from := c.mark()
	pi.must("prompt", svM{"sessionId": id, "message": "CMD:echo hi"})
	_, run := c.waitFor(from, "status_change to running", func(m swMsg) bool {
		return m.typ() == "status_change" && m.str("new_state") == "running"
	})
	if run.str("old_state") != "idle" {
		t.Fatalf("first status_change %s", run.raw)
	}
	i, done := c.waitType(from, "completed")
	if done.str("final_state") != "completed" {
		t.Fatalf("completed %s", done.raw)
	}
	res, _ := done.m["results"].(map[string]any)
	if res["tool_calls"] != float64(1) || res["turns"] != float64(2) {
		t.Fatalf("results %s", done.raw)
	}
	t.Logf("messages:\n%s", c.dump(0))
	_ = i
}
