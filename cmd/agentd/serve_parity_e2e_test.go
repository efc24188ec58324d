package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// Where agentd's pi-server face and pi-server's clients disagreed
// (issue: pi-server parity).
func TestServeParity(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e, "--rate-limit", "100")
	c := s.dial("A")

	t.Run("a flood of one session's commands does not lock out its delete", func(t *testing.T) {
		svCreate(c, "flooded")
		limited := 0
		for i := range 120 {
			r := c.call(svM{"id": fmt.Sprint("r", i), "type": "get_state", "sessionId": "flooded"})
			if r.m["success"] == false && strings.Contains(svStr(r.m, "error"), "Rate limit") {
				limited++
			}
		}
		if limited == 0 {
			t.Fatal("the flood was never rate limited; the test needs it to be")
		}
		svWantOK(t, c.call(svM{"id": "del-flooded", "type": "delete_session", "sessionId": "flooded"}))
	})

	t.Run("every response to a command with an id echoes it, valid or not", func(t *testing.T) {
		for _, id := range []string{"anon:1:2", strings.Repeat("x", 300)} {
			from := c.mark()
			c.send(svM{"id": id, "type": "list_sessions"})
			_, r := c.waitFor(from, "the refusal", func(f svFrame) bool { return f.typ() == "response" && f.m["success"] == false })
			svEq(t, "echoed id", svStr(r.m, "id"), id)
		}
	})

	t.Run("load_session outside the allowed places tells nothing of what exists", func(t *testing.T) {
		missing := filepath.Join(e.root, "elsewhere", "missing.jsonl")
		r := c.do("load_session", svM{"sessionPath": missing})
		svWantErrPrefix(t, r, "sessionPath must be under an allowed session directory")
	})

	t.Run("a load_session without an id answers with sessionVersion 0", func(t *testing.T) {
		created := svCreate(c, "to-reload")
		file := svStr(created.m, "data", "sessionInfo", "sessionFile")
		c.must("delete_session", svM{"sessionId": "to-reload"})
		r := c.must("load_session", svM{"sessionPath": file})
		svEq(t, "sessionId", svStr(r.m, "data", "sessionId"), "to-reload")
		svEq(t, "sessionVersion", r.m["sessionVersion"], float64(0))
	})
}
