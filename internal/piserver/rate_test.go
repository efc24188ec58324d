package piserver

import (
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/agentd-dev/agentd/internal/server"
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

// Replays are answered with the stored outcome and do not count against
// the rate limit, even with the bucket full (spec §8.1/§8.2): after 2
// commands and 20 replays of key K, the rest of the bucket is still there
// for new commands; once it is full, a new command is refused, but a
// replay of K and a resend of a used id still get their outcomes.
func TestReplaysAreNotRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 10
		fx := newFixture(t, fixtureConfig{opts: func(o *testOptions) { o.Limits.SessionRate = limit }})
		l := &fakeLink{}
		c := fx.connect(t, l)
		c.handle([]byte(`{"type":"list_sessions","id":"k1","idempotencyKey":"K"}`))
		c.handle([]byte(`{"type":"list_sessions","id":"a0"}`))
		synctest.Wait()
		for i := range 20 {
			c.handle(fmt.Appendf(nil, `{"type":"list_sessions","id":"r%d","idempotencyKey":"K"}`, i))
		}
		for i := range limit - 2 {
			c.handle(fmt.Appendf(nil, `{"type":"list_sessions","id":"n%d"}`, i))
		}
		synctest.Wait()
		c.handle([]byte(`{"type":"list_sessions","id":"over"}`))
		synctest.Wait()
		c.handle([]byte(`{"type":"list_sessions","id":"k2","idempotencyKey":"K"}`))
		c.handle([]byte(`{"type":"list_sessions","id":"a0"}`))
		synctest.Wait()

		ws := l.wires(t)
		for i := range 20 {
			_, r := response(t, ws, fmt.Sprintf("r%d", i))
			wantSuccess(t, r)
			if r.m["replayed"] != true {
				t.Fatalf("r%d: not a replay: %s", i, r.raw)
			}
		}
		for i := range limit - 2 {
			_, r := response(t, ws, fmt.Sprintf("n%d", i))
			wantSuccess(t, r)
		}
		_, r := response(t, ws, "over")
		wantError(t, r, fmt.Sprintf("Rate limit exceeded (%d commands/minute)", limit))
		_, r = response(t, ws, "k2")
		wantSuccess(t, r)
		if r.m["replayed"] != true {
			t.Errorf("the replay of K with a full bucket: %s", r.raw)
		}
		var resent []wire
		for _, w := range ws {
			if w.typ() == "response" && w.id() == "a0" {
				resent = append(resent, w)
			}
		}
		if len(resent) != 2 || resent[1].m["success"] != true || resent[1].m["replayed"] != true {
			t.Errorf("the resend of a used id with a full bucket: %v", resent)
		}
		if n := fx.layer.Rejected(server.RejectRate); n != 1 {
			t.Errorf("rateLimit rejections = %d, want 1", n)
		}
	})
}
