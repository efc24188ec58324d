package server

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// cmd is a command as the rate limits see it.
type cmd struct {
	typ, sid string
	class    RateClass
}

func sessCmd(sid string) cmd   { return cmd{"get_state", sid, RateData} }
func serverCmd(typ string) cmd { return cmd{typ, "", RateData} }
func namedCmd(typ, sid string) cmd {
	return cmd{typ, sid, RateData}
}
func uiCmd(sid string) cmd      { return cmd{"extension_ui_response", sid, RateUIResponse} }
func controlCmd(sid string) cmd { return cmd{"delete_session", sid, RateControl} }

// admitN admits c n times and fails the test on a refusal.
func admitN(t *testing.T, r *rateLimits, c cmd, n int) {
	t.Helper()
	for i := range n {
		if e := r.admit(c.sid, c.class, time.Now()); e != nil {
			t.Fatalf("%s %q #%d refused: %s (%s)", c.typ, c.sid, i+1, e.Message, e.Limit)
		}
	}
}

func wantRefused(t *testing.T, r *rateLimits, c cmd, limit Rejection, msg string) {
	t.Helper()
	e := r.admit(c.sid, c.class, time.Now())
	if e == nil {
		t.Fatalf("%s %q admitted, want refused by the %s limit", c.typ, c.sid, limit)
	}
	if e.Limit != limit || e.Message != msg {
		t.Fatalf("refused by %s %q, want %s %q", e.Limit, e.Message, limit, msg)
	}
}

func TestRateLimitPerSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRateLimits(Limits{SessionRate: 3, GlobalRate: -1, UIResponseRate: -1})
		admitN(t, r, sessCmd("s1"), 3)
		wantRefused(t, r, sessCmd("s1"), RejectRate, "Rate limit exceeded (3 commands/minute)")
		wantRefused(t, r, namedCmd("prompt", "s1"), RejectRate, "Rate limit exceeded (3 commands/minute)")
		// Other sessions and the server bucket have their own windows.
		admitN(t, r, sessCmd("s2"), 3)
		admitN(t, r, serverCmd("list_sessions"), 3)
		wantRefused(t, r, sessCmd("s2"), RejectRate, "Rate limit exceeded (3 commands/minute)")
	})
}

func TestRateLimitServerCommandsShareABucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRateLimits(Limits{SessionRate: 4, GlobalRate: -1, UIResponseRate: -1})
		admitN(t, r, serverCmd("list_sessions"), 1)
		admitN(t, r, serverCmd("health_check"), 1)
		admitN(t, r, serverCmd("get_metrics"), 1)
		admitN(t, r, serverCmd("load_session"), 1)
		wantRefused(t, r, serverCmd("list_stored_sessions"), RejectRate, "Rate limit exceeded (4 commands/minute)")
		wantRefused(t, r, serverCmd("create_session"), RejectRate, "Rate limit exceeded (4 commands/minute)")
		// A server command that names a session counts in that session's
		// window instead.
		admitN(t, r, namedCmd("create_session", "s1"), 1)
	})
}

func TestRateLimitGlobalIsCheckedFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRateLimits(Limits{SessionRate: 1, GlobalRate: 1, UIResponseRate: 1})
		admitN(t, r, sessCmd("s1"), 1)
		// Every data limit is now reached; the global one answers.
		wantRefused(t, r, sessCmd("s1"), RejectGlobalRate, "Global rate limit exceeded (1 commands/minute)")
		wantRefused(t, r, sessCmd("s2"), RejectGlobalRate, "Global rate limit exceeded (1 commands/minute)")
		wantRefused(t, r, serverCmd("list_sessions"), RejectGlobalRate, "Global rate limit exceeded (1 commands/minute)")
		if n := r.usage(time.Now()); n != 1 {
			t.Errorf("usage = %d, want 1", n)
		}
	})
}

// Control commands (delete, switch, aborts, answers) have a budget of
// their own: a client that flooded a session with data-plane commands can
// still stop it, and the server's flood does not lock anyone out either.
func TestRateLimitControlIsNeverStarvedByData(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRateLimits(Limits{SessionRate: 3, GlobalRate: 5, ControlRate: 2, UIResponseRate: 10})
		admitN(t, r, sessCmd("s1"), 3)
		admitN(t, r, sessCmd("s2"), 2)
		wantRefused(t, r, sessCmd("s1"), RejectGlobalRate, "Global rate limit exceeded (5 commands/minute)")
		admitN(t, r, controlCmd("s1"), 1)
		admitN(t, r, uiCmd("s1"), 1)
		// The control budget is bounded too.
		wantRefused(t, r, controlCmd("s1"), RejectControl, "Control rate limit exceeded (2 control commands/minute)")
		admitN(t, r, controlCmd("s2"), 2)
		// And control traffic does not use up the data budget.
		r2 := newRateLimits(Limits{SessionRate: 2, GlobalRate: 2, ControlRate: 100, UIResponseRate: 100})
		admitN(t, r2, controlCmd("s1"), 50)
		admitN(t, r2, sessCmd("s1"), 2)
	})
}

func TestRateLimitGlobalAcrossSessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRateLimits(Limits{SessionRate: 100, GlobalRate: 5, UIResponseRate: -1})
		for i := range 5 {
			admitN(t, r, sessCmd(fmt.Sprintf("s%d", i)), 1)
		}
		wantRefused(t, r, sessCmd("fresh"), RejectGlobalRate, "Global rate limit exceeded (5 commands/minute)")
		if n := r.usage(time.Now()); n != 5 {
			t.Errorf("usage = %d, want 5", n)
		}
	})
}

func TestRateLimitExtensionUIResponses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRateLimits(Limits{SessionRate: 100, GlobalRate: -1, UIResponseRate: 2})
		admitN(t, r, uiCmd("s1"), 2)
		wantRefused(t, r, uiCmd("s1"), RejectUIRate, "Extension UI response rate limit exceeded (2 responses/minute)")
		// Other commands of the session, and UI responses of other
		// sessions, are not held back by it.
		admitN(t, r, sessCmd("s1"), 5)
		admitN(t, r, uiCmd("s2"), 2)
		wantRefused(t, r, uiCmd("s2"), RejectUIRate, "Extension UI response rate limit exceeded (2 responses/minute)")
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
		wantRefused(t, r, sessCmd("s1"), RejectRate, refusal) // t=40
		time.Sleep(20*time.Second - time.Nanosecond)
		wantRefused(t, r, sessCmd("s1"), RejectRate, refusal) // just before t=60
		time.Sleep(time.Nanosecond)
		admitN(t, r, sessCmd("s1"), 1) // t=60: the one of t=0 has left
		wantRefused(t, r, sessCmd("s1"), RejectRate, refusal)
		time.Sleep(30 * time.Second)
		admitN(t, r, sessCmd("s1"), 1) // t=90: the one of t=30 has left
		wantRefused(t, r, sessCmd("s1"), RejectRate, refusal)
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
		wantRefused(t, r, sessCmd("c"), RejectGlobalRate, refusal)
		if n := r.usage(time.Now()); n != 2 {
			t.Errorf("usage = %d, want 2", n)
		}
		time.Sleep(time.Nanosecond)
		if n := r.usage(time.Now()); n != 1 {
			t.Errorf("usage at t=60 = %d, want 1", n)
		}
		admitN(t, r, sessCmd("c"), 1) // t=60
		wantRefused(t, r, sessCmd("d"), RejectGlobalRate, refusal)
		time.Sleep(2 * time.Minute)
		if n := r.usage(time.Now()); n != 0 {
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
		wantRefused(t, r, uiCmd("s1"), RejectUIRate, refusal)
		time.Sleep(time.Second)
		admitN(t, r, uiCmd("s1"), 1)
		wantRefused(t, r, uiCmd("s1"), RejectUIRate, refusal)
	})
}

func TestRateLimitsDisabled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := Limits{SessionRate: -1, GlobalRate: -1, ControlRate: -1, UIResponseRate: -1}
		l.fill() // negative stays: disabled
		if l.SessionRate != -1 || l.GlobalRate != -1 || l.ControlRate != -1 || l.UIResponseRate != -1 {
			t.Fatalf("fill changed disabled limits: %+v", l)
		}
		r := newRateLimits(l)
		admitN(t, r, sessCmd("s1"), 5000)
		admitN(t, r, uiCmd("s1"), 5000)
		admitN(t, r, controlCmd("s1"), 5000)
		admitN(t, r, serverCmd("list_sessions"), 5000)
		if n := r.usage(time.Now()); n != 0 {
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
			admitN(t, r, sessCmd(fmt.Sprintf("s%d", i)), 1)
			admitN(t, r, uiCmd(fmt.Sprintf("s%d", i)), 1)
		}
		if len(r.data) != 4097 {
			t.Fatalf("%d windows, want 4097 (all still active)", len(r.data))
		}
		time.Sleep(time.Minute)
		admitN(t, r, sessCmd("s0"), 1)
		if len(r.data) != 1 || len(r.ui) != 0 || len(r.control) != 0 {
			t.Errorf("after a quiet minute: %d session windows, %d ui windows, %d control windows; want 1, 0, 0", len(r.data), len(r.ui), len(r.control))
		}
		// s0 starts afresh.
		admitN(t, r, sessCmd("s0"), 9)
		wantRefused(t, r, sessCmd("s0"), RejectRate, "Rate limit exceeded (10 commands/minute)")
	})
}
