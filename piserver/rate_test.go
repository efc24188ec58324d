package piserver

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd-dev/agentd/pipeline"
)

func sessCmd(sid string) pipeline.Command   { return pipeline.Command{Type: "get_state", SessionID: sid} }
func serverCmd(typ string) pipeline.Command { return pipeline.Command{Type: typ} }
func uiCmd(sid string) pipeline.Command {
	return pipeline.Command{Type: "extension_ui_response", SessionID: sid}
}

// admitN admits cmd n times and fails the test on a refusal.
func admitN(t *testing.T, r *rateLimits, cmd pipeline.Command, n int) {
	t.Helper()
	for i := range n {
		if e := r.admit(cmd); e != nil {
			t.Fatalf("%s %q #%d refused: %s (%s)", cmd.Type, cmd.SessionID, i+1, e.msg, e.limit)
		}
	}
}

func wantRefused(t *testing.T, r *rateLimits, cmd pipeline.Command, limit, msg string) {
	t.Helper()
	e := r.admit(cmd)
	if e == nil {
		t.Fatalf("%s %q admitted, want refused by the %s limit", cmd.Type, cmd.SessionID, limit)
	}
	if e.limit != limit || e.msg != msg {
		t.Fatalf("refused by %s %q, want %s %q", e.limit, e.msg, limit, msg)
	}
}

func TestRateLimitPerSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRateLimits(Limits{SessionRate: 3, GlobalRate: -1, UIResponseRate: -1})
		admitN(t, r, sessCmd("s1"), 3)
		wantRefused(t, r, sessCmd("s1"), "session", "Rate limit exceeded (3 commands/minute)")
		wantRefused(t, r, pipeline.Command{Type: "prompt", SessionID: "s1"}, "session", "Rate limit exceeded (3 commands/minute)")
		// Other sessions and the server bucket have their own windows.
		admitN(t, r, sessCmd("s2"), 3)
		admitN(t, r, serverCmd("list_sessions"), 3)
		wantRefused(t, r, sessCmd("s2"), "session", "Rate limit exceeded (3 commands/minute)")
	})
}

func TestRateLimitServerCommandsShareABucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRateLimits(Limits{SessionRate: 4, GlobalRate: -1, UIResponseRate: -1})
		admitN(t, r, serverCmd("list_sessions"), 1)
		admitN(t, r, serverCmd("health_check"), 1)
		admitN(t, r, serverCmd("get_metrics"), 1)
		admitN(t, r, serverCmd("load_session"), 1)
		wantRefused(t, r, serverCmd("list_stored_sessions"), "session", "Rate limit exceeded (4 commands/minute)")
		wantRefused(t, r, serverCmd("create_session"), "session", "Rate limit exceeded (4 commands/minute)")
		// A server command that names a session counts in that session's
		// window instead.
		admitN(t, r, pipeline.Command{Type: "create_session", SessionID: "s1"}, 1)
	})
}

func TestRateLimitGlobalIsCheckedFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRateLimits(Limits{SessionRate: 1, GlobalRate: 1, UIResponseRate: 1})
		admitN(t, r, uiCmd("s1"), 1)
		// Every limit is now reached; the global one answers.
		wantRefused(t, r, uiCmd("s1"), "global", "Global rate limit exceeded (1 commands/minute)")
		wantRefused(t, r, sessCmd("s2"), "global", "Global rate limit exceeded (1 commands/minute)")
		wantRefused(t, r, serverCmd("list_sessions"), "global", "Global rate limit exceeded (1 commands/minute)")
		if n := r.usage(); n != 1 {
			t.Errorf("usage = %d, want 1", n)
		}
	})
}

func TestRateLimitGlobalAcrossSessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRateLimits(Limits{SessionRate: 100, GlobalRate: 5, UIResponseRate: -1})
		for i := range 5 {
			admitN(t, r, sessCmd(fmt.Sprintf("s%d", i)), 1)
		}
		wantRefused(t, r, sessCmd("fresh"), "global", "Global rate limit exceeded (5 commands/minute)")
		if n := r.usage(); n != 5 {
			t.Errorf("usage = %d, want 5", n)
		}
	})
}

func TestRateLimitExtensionUIResponses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRateLimits(Limits{SessionRate: 100, GlobalRate: -1, UIResponseRate: 2})
		admitN(t, r, uiCmd("s1"), 2)
		wantRefused(t, r, uiCmd("s1"), "ui", "Extension UI response rate limit exceeded (2 responses/minute)")
		// Other commands of the session, and UI responses of other
		// sessions, are not held back by it.
		admitN(t, r, sessCmd("s1"), 5)
		admitN(t, r, uiCmd("s2"), 2)
		wantRefused(t, r, uiCmd("s2"), "ui", "Extension UI response rate limit exceeded (2 responses/minute)")
		// A UI response counts against the session limit too.
		r2 := newRateLimits(Limits{SessionRate: 2, GlobalRate: -1, UIResponseRate: 10})
		admitN(t, r2, uiCmd("s1"), 1)
		admitN(t, r2, sessCmd("s1"), 1)
		wantRefused(t, r2, uiCmd("s1"), "session", "Rate limit exceeded (2 commands/minute)")
	})
}

// The windows slide: a command leaves its window one minute after it was
// admitted, not at the start of a fixed minute.
func TestRateLimitWindowSlides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const refusal = "Rate limit exceeded (2 commands/minute)"
		r := newRateLimits(Limits{SessionRate: 2, GlobalRate: -1, UIResponseRate: -1})
		admitN(t, r, sessCmd("s1"), 1) // t=0
		time.Sleep(30 * time.Second)
		admitN(t, r, sessCmd("s1"), 1) // t=30
		time.Sleep(10 * time.Second)
		wantRefused(t, r, sessCmd("s1"), "session", refusal) // t=40
		time.Sleep(20*time.Second - time.Nanosecond)
		wantRefused(t, r, sessCmd("s1"), "session", refusal) // just before t=60
		time.Sleep(time.Nanosecond)
		admitN(t, r, sessCmd("s1"), 1) // t=60: the one of t=0 has left
		wantRefused(t, r, sessCmd("s1"), "session", refusal)
		time.Sleep(30 * time.Second)
		admitN(t, r, sessCmd("s1"), 1) // t=90: the one of t=30 has left
		wantRefused(t, r, sessCmd("s1"), "session", refusal)
	})
}

func TestRateLimitGlobalWindowSlides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const refusal = "Global rate limit exceeded (2 commands/minute)"
		r := newRateLimits(Limits{SessionRate: -1, GlobalRate: 2, UIResponseRate: -1})
		admitN(t, r, sessCmd("a"), 1) // t=0
		time.Sleep(45 * time.Second)
		admitN(t, r, sessCmd("b"), 1) // t=45
		time.Sleep(15*time.Second - time.Nanosecond)
		wantRefused(t, r, sessCmd("c"), "global", refusal)
		if n := r.usage(); n != 2 {
			t.Errorf("usage = %d, want 2", n)
		}
		time.Sleep(time.Nanosecond)
		if n := r.usage(); n != 1 {
			t.Errorf("usage at t=60 = %d, want 1", n)
		}
		admitN(t, r, sessCmd("c"), 1) // t=60
		wantRefused(t, r, sessCmd("d"), "global", refusal)
		time.Sleep(2 * time.Minute)
		if n := r.usage(); n != 0 {
			t.Errorf("usage after two quiet minutes = %d, want 0", n)
		}
	})
}

func TestRateLimitUIWindowSlides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const refusal = "Extension UI response rate limit exceeded (1 responses/minute)"
		r := newRateLimits(Limits{SessionRate: -1, GlobalRate: -1, UIResponseRate: 1})
		admitN(t, r, uiCmd("s1"), 1)
		time.Sleep(59 * time.Second)
		wantRefused(t, r, uiCmd("s1"), "ui", refusal)
		time.Sleep(time.Second)
		admitN(t, r, uiCmd("s1"), 1)
		wantRefused(t, r, uiCmd("s1"), "ui", refusal)
	})
}

func TestRateLimitsDisabled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := Limits{SessionRate: -1, GlobalRate: -1, UIResponseRate: -1}
		l.fill() // negative stays: disabled
		if l.SessionRate != -1 || l.GlobalRate != -1 || l.UIResponseRate != -1 {
			t.Fatalf("fill changed disabled limits: %+v", l)
		}
		r := newRateLimits(l)
		admitN(t, r, sessCmd("s1"), 5000)
		admitN(t, r, uiCmd("s1"), 5000)
		admitN(t, r, serverCmd("list_sessions"), 5000)
		if n := r.usage(); n != 0 {
			t.Errorf("usage with the global limit off = %d", n)
		}

		// Zero takes the defaults.
		var d Limits
		d.fill()
		if d.SessionRate != 100 || d.GlobalRate != 1000 || d.UIResponseRate != 60 {
			t.Errorf("defaults = %d/%d/%d, want 100/1000/60", d.SessionRate, d.GlobalRate, d.UIResponseRate)
		}
	})
}

// Windows of sessions that have gone quiet are forgotten once there are
// many.
func TestRateLimitSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRateLimits(Limits{SessionRate: 10, GlobalRate: -1, UIResponseRate: 10})
		for i := range 4097 {
			admitN(t, r, uiCmd(fmt.Sprintf("s%d", i)), 1)
		}
		if len(r.keys) != 4097 {
			t.Fatalf("%d windows, want 4097 (all still active)", len(r.keys))
		}
		time.Sleep(time.Minute)
		admitN(t, r, sessCmd("s0"), 1)
		if len(r.keys) != 1 || len(r.ui) != 0 {
			t.Errorf("after a quiet minute: %d session windows, %d ui windows; want 1, 0", len(r.keys), len(r.ui))
		}
		// s0 starts afresh.
		admitN(t, r, sessCmd("s0"), 9)
		wantRefused(t, r, sessCmd("s0"), "session", "Rate limit exceeded (10 commands/minute)")
	})
}

// Through a connection: the refusal is a failure response for the command,
// before admission, and the server counts it.
func TestRateLimitThroughAConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixture(t, fixtureConfig{opts: func(o *Options) { o.Limits.SessionRate = 2 }})
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
		if n := fx.srv.rejected.rateLimit.Load(); n != 1 {
			t.Errorf("rateLimit rejections = %d, want 1", n)
		}
	})
}
