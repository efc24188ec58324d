package main

// What the server promises across restarts and retries (issue: the shared
// session layer): a retried create or load answers and the connection goes
// on; a known session id works after a restart without load_session; seqs
// never go backwards, and a cursor is answered with every event after it
// or a clear "too old", never silence; a cursor from the future is too
// old too.

import (
	"testing"
)

// The spec tells clients to retry with the same id. A retried create or
// load after the session was deleted, or after a restart, replays its
// outcome, and the connection keeps answering commands.
func TestServeReplayThenMoreCommands(t *testing.T) {
	t.Parallel()
	for _, after := range []string{"delete", "restart", "kill -9"} {
		t.Run("create after "+after, func(t *testing.T) {
			t.Parallel()
			e := e2eNewEnv(t, e2eOpts{})
			s := svStart(t, e)
			a := s.dial("A")
			create := svM{"id": "c1", "type": "create_session", "sessionId": "s1"}
			first := a.ok(create)
			file := svStr(first.m, "data", "sessionInfo", "sessionFile")
			switch after {
			case "delete":
				a.must("delete_session", svM{"sessionId": "s1"})
			case "restart":
				s.sigterm()
				svEq(t, "exit", s.waitExit(), 0)
				s = s.restart()
				a = s.dial("A2")
			case "kill -9":
				s.kill9()
				s = s.restart()
				a = s.dial("A2")
			}
			again := a.call(create)
			svEq(t, "replayed", again.m["replayed"], true)
			svEq(t, "success", again.m["success"], true)
			// The connection still answers, in order.
			svWantOK(t, a.call(svM{"id": "l1", "type": "list_sessions"}))
			svWantOK(t, a.call(svM{"id": "h1", "type": "health_check"}))

			// And a load of the file, retried, does the same.
			if after == "delete" {
				load := svM{"id": "ld", "type": "load_session", "sessionPath": file}
				svWantOK(t, a.call(load))
				a.must("delete_session", svM{"sessionId": "s1"})
				svEq(t, "load replayed", a.call(load).m["replayed"], true)
				svWantOK(t, a.call(svM{"id": "l2", "type": "list_sessions"}))
			}
			// An idempotency-key replay too.
			keyed := svM{"id": "k1", "type": "list_sessions", "idempotencyKey": "key-1"}
			svWantOK(t, a.call(keyed))
			keyed["id"] = "k2"
			svEq(t, "keyed replay", a.call(keyed).m["replayed"], true)
			svWantOK(t, a.call(svM{"id": "l3", "type": "list_sessions"}))
		})
	}
}

// A session a client created is known after a restart, clean or not: its
// id works without load_session, list_sessions shows it, it keeps its
// messages, and its seq goes on from above where it was.
func TestServeKnownSessionAfterRestart(t *testing.T) {
	t.Parallel()
	for _, stop := range []string{"sigterm", "kill -9"} {
		t.Run(stop, func(t *testing.T) {
			t.Parallel()
			e := e2eNewEnv(t, e2eOpts{})
			s := svStart(t, e)
			a := s.dial("A")
			svCreate(a, "keep")
			svPrompt(a, "keep", "remember the number 42")
			before, _ := svNum(a.must("get_state", svM{"sessionId": "keep"}).m, "data", "seq")
			if before < 3 {
				t.Fatalf("seq %v after a prompt", before)
			}
			if stop == "sigterm" {
				s.sigterm()
				svEq(t, "exit", s.waitExit(), 0)
			} else {
				s.kill9()
			}
			s = s.restart()
			b := s.dial("B")

			list := b.must("list_sessions", nil)
			var ids []string
			for _, x := range svArr(list.m, "data", "sessions") {
				ids = append(ids, svStr(x, "sessionId"))
			}
			svEq(t, "sessions listed after the restart", ids, []string{"keep"})

			// No load_session: the id just works.
			st := b.must("get_state", svM{"sessionId": "keep"})
			after, _ := svNum(st.m, "data", "seq")
			if after < before {
				t.Errorf("seq went backwards across the restart: %v, then %v", before, after)
			}
			if stop == "sigterm" {
				svEq(t, "seq after a clean restart", after, before)
			}
			msgs := svTexts(svMessages(b, "keep"))
			svEq(t, "messages kept", msgs, []string{"remember the number 42", svAnswer("remember the number 42")})

			// It runs again, with seqs above any it used.
			b.must("switch_session", svM{"sessionId": "keep"})
			from := b.mark()
			svPrompt(b, "keep", "and again")
			for _, f := range b.snapshot()[from:] {
				if f.isEvent("keep", "") {
					if n, _ := svNum(f.m, "seq"); n <= before {
						t.Fatalf("an event after the restart has seq %v, not above %v: %s", n, before, f)
					}
				}
			}
			// Creating it again is a conflict, not a second session.
			svWantErr(t, b.do("create_session", svM{"sessionId": "keep"}), "Session keep already exists")

			// A deleted session stays deleted after a restart.
			b.must("delete_session", svM{"sessionId": "keep"})
			s.sigterm()
			s.waitExit()
			s = s.restart()
			c := s.dial("C")
			svWantErr(t, c.do("get_state", svM{"sessionId": "keep"}), "Session keep not found")
			svEq(t, "sessions after delete and restart", len(svArr(c.must("list_sessions", nil).m, "data", "sessions")), 0)
		})
	}
}

// A client resuming after a restart with a cursor from before it gets
// every event after it (a clean restart loses none), or a clear
// cursorTooOld with the whole context (after a crash, the events in
// memory are gone) — then the next prompt's events, live.
func TestServeResumeAcrossRestart(t *testing.T) {
	t.Parallel()
	for _, stop := range []string{"sigterm", "kill -9"} {
		t.Run(stop, func(t *testing.T) {
			t.Parallel()
			e := e2eNewEnv(t, e2eOpts{})
			s := svStart(t, e)
			a := s.dial("A")
			svCreate(a, "r")
			svPrompt(a, "r", "first")
			head, _ := svNum(a.must("get_state", svM{"sessionId": "r"}).m, "data", "seq")
			mid := head - 3
			if stop == "sigterm" {
				s.sigterm()
				s.waitExit()
			} else {
				s.kill9()
			}
			s = s.restart()
			b := s.dial("B")

			// The cursor at the head: nothing missed, after a clean stop.
			r := b.ok(svM{"id": "sw-head", "type": "switch_session", "sessionId": "r", "afterSeq": head})
			if stop == "sigterm" {
				svEq(t, "resumed at the head", svAt(r.m, "data", "resumed"), true)
				svEq(t, "seq", svAt(r.m, "data", "seq"), head)
			} else {
				svEq(t, "cursorTooOld at the head after a crash", svAt(r.m, "data", "cursorTooOld"), true)
				if n, _ := svNum(r.m, "data", "seq"); n < head {
					t.Errorf("seq after a crash %v is below the head %v before it", n, head)
				}
			}
			// A cursor from before the restart that the log no longer
			// holds: too old, with the whole context.
			c := s.dial("C")
			r = c.ok(svM{"id": "sw-mid", "type": "switch_session", "sessionId": "r", "afterSeq": mid})
			svEq(t, "cursorTooOld", svAt(r.m, "data", "cursorTooOld"), true)
			svEq(t, "resumed", svAt(r.m, "data", "resumed"), false)
			svEq(t, "messages", svTexts(svArr(r.m, "data", "messages")), []string{"first", svAnswer("first")})
			seq, _ := svNum(r.m, "data", "seq")

			// Then the next prompt's events reach both, every one, all
			// above what each was told.
			fromB, fromC := b.mark(), c.mark()
			svPrompt(b, "r", "second")
			last, _ := svNum(b.must("get_state", svM{"sessionId": "r"}).m, "data", "seq")
			for _, w := range []struct {
				conn *svConn
				from int
			}{{b, fromB}, {c, fromC}} {
				w.conn.waitFor(w.from, "the second run's last event", func(f svFrame) bool {
					n, _ := svNum(f.m, "seq")
					return f.isEvent("r", "") && n == last
				})
				var prev float64
				for _, f := range w.conn.snapshot()[w.from:] {
					if !f.isEvent("r", "") {
						continue
					}
					n, _ := svNum(f.m, "seq")
					if n <= seq || (prev != 0 && n != prev+1) {
						t.Errorf("%s: event seq %v after %v (told %v): gap, repeat or old", w.conn.name, n, prev, seq)
					}
					prev = n
				}
				if prev != last {
					t.Errorf("%s: last event seq %v, want %v", w.conn.name, prev, last)
				}
			}
		})
	}
}

// A cursor beyond the session's last event (a client confused about which
// server or session it talks to) is answered as too old, never with
// silence.
func TestServeFutureCursor(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStart(t, e)
	a := s.dial("A")
	svCreate(a, "f")
	svPrompt(a, "f", "hello")
	head, _ := svNum(a.must("get_state", svM{"sessionId": "f"}).m, "data", "seq")
	b := s.dial("B")
	r := b.ok(svM{"id": "sw", "type": "switch_session", "sessionId": "f", "afterSeq": head + 58})
	svEq(t, "cursorTooOld", svAt(r.m, "data", "cursorTooOld"), true)
	svEq(t, "seq", svAt(r.m, "data", "seq"), head)
	svEq(t, "messages", len(svArr(r.m, "data", "messages")), 2)
	from := b.mark()
	svPrompt(a, "f", "more")
	last, _ := svNum(a.must("get_state", svM{"sessionId": "f"}).m, "data", "seq")
	b.waitFor(from, "the new run's last event", func(f svFrame) bool {
		n, _ := svNum(f.m, "seq")
		return f.isEvent("f", "") && n == last
	})
}
