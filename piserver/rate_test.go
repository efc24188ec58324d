package piserver

import (
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/agentd-dev/agentd/server"
)

// Through a connection: the refusal is a failure response for the command,
// before admission, and the server counts it.
func TestRateLimitThroughAConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixture(t, fixtureConfig{opts: func(o *testOptions) { o.Limits.SessionRate = 2 }})
		l := &fakeLink{}
		c := fx.connect(t, l)
		for i := range 3 {
			c.handle(fmt.Appendf(nil, `{"type":"list_sessions","id":"l%d"}`, i))
		}
		synctest.Wait()
		ws := l.wires(t)
		_, r := response(t, ws, "l1")
		wantSuccess(t, r)
		_, r = response(t, ws, "l2")
		wantError(t, r, "Rate limit exceeded (2 commands/minute)")
		if r.m["command"] != "list_sessions" {
			t.Errorf("refusal = %s", r.raw)
		}
		if index(ws, func(w wire) bool { return w.typ() == "command_accepted" && w.data()["commandId"] == "l2" }) >= 0 {
			t.Error("a rate-limited command was admitted")
		}
		if n := fx.layer.Rejected(server.RejectRate); n != 1 {
			t.Errorf("rateLimit rejections = %d, want 1", n)
		}
	})
}
