package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// clAttachment is attachment sid as node s lists it (GET
// /api/v2/sessions, served by the node itself), found false when the
// node has none of that id.
func clAttachment(t *testing.T, s *svServer, sid string) (created, last time.Time, found bool) {
	t.Helper()
	r := rsOK(t, s, "GET", "/api/v2/sessions", nil)
	var list []struct {
		ID           string `json:"id"`
		CreatedAt    string `json:"created_at"`
		LastActivity string `json:"last_activity"`
	}
	if err := json.Unmarshal([]byte(r.body), &list); err != nil {
		t.Fatalf("GET /api/v2/sessions: %v: %s", err, r)
	}
	for _, a := range list {
		if a.ID == sid {
			c, err1 := time.Parse(time.RFC3339Nano, a.CreatedAt)
			l, err2 := time.Parse(time.RFC3339Nano, a.LastActivity)
			if err1 != nil || err2 != nil {
				t.Fatalf("attachment %s: times %q, %q", sid, a.CreatedAt, a.LastActivity)
			}
			return c, l, true
		}
	}
	return time.Time{}, time.Time{}, false
}

// clAfterCursor says whether an event of id comes after cursor by the
// rule of a resume cursor: "N" is all of event N, "N.k" its frames up to
// the k-th, and all of N when N went out as one frame (multi: the ids of
// N's frames had parts).
func clAfterCursor(id, cursor string, multi bool) bool {
	seq, part, _ := clEventID(id)
	cs, cp, _ := clEventID(cursor)
	if seq != cs {
		return seq > cs
	}
	return multi && cp > 0 && part > cp
}

// The ends of a conversation's REST event stream served by a node that
// does not run it (A; B runs them), and the resume cursor there:
//
//   - its attachment (gptme's session) is not dropped by idle expiry on
//     B while A serves a stream of it (A keeps it there, as a stream on
//     B would), and a step naming it after more than the idle time works;
//   - the conversation deleted through another face (pi-server's
//     delete_session) closes A's stream and B's own;
//   - Last-Event-ID "N.1" for an event N that went out as one frame
//     (never issued) replays nothing of N, on A and on B; "M.1" inside
//     an event of two frames replays the second. The client is an
//     EventSource's: it trusts every id.
func TestClusterSSEEnds(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	const idle = 3 * time.Second
	// A lease of 10 s (the harness's 1 s may lapse on a busy machine, and
	// the conversation move): this test wants B to keep it.
	nodes := clStartWith(t, e, []string{"A", "B"}, "--cluster-spread", "--cluster-lease-ttl", "10s", "--rest-session-idle", idle.String())
	a, b := nodes["A"], nodes["B"]
	id := clSessionOn("B", "A", "B")
	sid := rsOK(t, b, "PUT", rsConvPath(id), map[string]any{}).str("session_id")
	st := rsOpen(t, a, rsConvPath(id)+"/events?session_id="+sid)
	if _, conn := st.waitType(0, "connected"); conn.str("session_id") != sid {
		t.Fatalf("connected on A names %q, want B's attachment %s: %s", conn.str("session_id"), sid, conn.raw)
	}

	t.Run("idle", func(t *testing.T) {
		// B counts none of A's streams: without A keeping the attachment,
		// B drops it once idle, and the next step naming it is a 404.
		svWaitUntil(t, "B keeps the attachment A streams past twice its idle time", func() bool {
			created, last, ok := clAttachment(t, b, sid)
			if !ok {
				t.Fatalf("B dropped attachment %s while A serves a stream of it\n--- A ---\n%s\n--- B ---\n%s", sid, a.stderrTail(3000), b.stderrTail(3000))
			}
			return last.Sub(created) > 2*idle
		})
		rsOK(t, a, "POST", rsConvPath(id), map[string]any{"role": "user", "content": "CMD:echo kept"})
		from := st.mark()
		rsOK(t, a, "POST", rsConvPath(id)+"/step", map[string]any{"session_id": sid, "auto_confirm": true})
		st.waitType(from, "run_ended")
	})

	t.Run("cursor", func(t *testing.T) {
		evs := st.snapshot()
		var oneFrame, multi, last string
		for _, ev := range evs {
			if ev.id == "" || ev.typ() == "connected" || ev.typ() == "ping" || ev.typ() == "resync" {
				continue
			}
			last = ev.id
			if strings.HasSuffix(ev.id, ".1") && multi == "" {
				multi = ev.id
			}
			if !strings.Contains(ev.id, ".") && multi == "" {
				oneFrame = ev.id
			}
		}
		if oneFrame == "" || multi == "" {
			t.Fatalf("the run had no one-frame event before a two-frame one:\n%s", st.dump(0))
		}
		mseq, _, _ := clEventID(multi)
		for _, tc := range []struct {
			name, cursor string
			multi        bool
		}{
			{"a part of a one-frame event", oneFrame + ".1", false},
			{"inside a two-frame event", multi, true},
			{"past the last part of a two-frame event", strconv.FormatUint(mseq, 10) + ".9", true},
		} {
			// A finished call's tool_output is left out of the comparison:
			// the owner replays updates from its log, which keeps them
			// without output (the call's tool_complete has it all), while
			// the stream another node replays has the output the publisher
			// put into the newest update of a running call. Which of the
			// two a replay shows is not what this test is about.
			kept := func(ev rsEvent) bool {
				t := ev.typ()
				return ev.id != "" && t != "connected" && t != "ping" && t != "resync" && t != "tool_output"
			}
			var want []string
			for _, ev := range evs {
				if kept(ev) && clAfterCursor(ev.id, tc.cursor, tc.multi) {
					want = append(want, ev.id+":"+ev.typ())
				}
			}
			for _, via := range []string{"A", "B"} {
				t.Run(tc.name+" via "+via, func(t *testing.T) {
					r := rsOpen(t, nodes[via], rsConvPath(id)+"/events?session_id="+sid, "Last-Event-ID", tc.cursor)
					_, conn := r.waitType(0, "connected")
					if conn.m["resumed"] != true || conn.id != tc.cursor {
						t.Errorf("connected after %s: id %q %s", tc.cursor, conn.id, conn.raw)
					}
					r.waitFor(0, "the last event "+last, func(ev rsEvent) bool { return ev.id == last })
					var got []string
					for _, ev := range r.snapshot() {
						if kept(ev) {
							got = append(got, ev.id+":"+ev.typ())
						}
					}
					if strings.Join(got, " ") != strings.Join(want, " ") {
						t.Errorf("resumed at %s:\n  got  %v\n  want %v", tc.cursor, got, want)
					}
					r.close()
				})
			}
		}
	})

	// An attachment deleted on the node that made it (B) closes A's
	// stream of it; one deleted on A, which serves its stream, goes on
	// B too. (The streams are the test's own, whose waits fail it, so
	// these are no subtests.)
	for _, tc := range []struct{ name, deleteOn string }{{"deleted on the owner", "B"}, {"deleted on the stream's node", "A"}} {
		s := rsOpen(t, a, rsConvPath(id)+"/events")
		_, conn := s.waitType(0, "connected")
		at := conn.str("session_id")
		if _, _, ok := clAttachment(t, b, at); !ok {
			t.Fatalf("%s: B has no attachment %s, which A's stream opened with", tc.name, at)
		}
		rsOK(t, nodes[tc.deleteOn], "DELETE", "/api/v2/sessions/"+at, nil)
		if err := s.waitEnded(); err != nil {
			t.Errorf("%s: A's stream of the deleted attachment ended with %v, want a clean end", tc.name, err)
		}
		svWaitUntil(t, tc.name+": B drops the attachment", func() bool { _, _, ok := clAttachment(t, b, at); return !ok })
		if r := rsDo(t, a, "POST", rsConvPath(id)+"/interrupt", map[string]any{"session_id": at}); r.status != 404 {
			t.Errorf("%s: interrupt naming the deleted attachment: %d %s, want 404", tc.name, r.status, r)
		}
	}

	// Deleted through pi-server.
	own := rsOpen(t, b, rsConvPath(id)+"/events")
	own.waitType(0, "connected")
	c := a.dial("a")
	c.must("delete_session", svM{"id": "del", "sessionId": id})
	for _, s := range []struct {
		name string
		st   *rsStream
	}{{"A's stream (fed from the cluster's)", st}, {"B's own stream", own}} {
		if err := s.st.waitEnded(); err != nil {
			t.Errorf("%s of the conversation deleted by delete_session ended with %v, want a clean end", s.name, err)
		}
	}
}

// clTryOpen opens GET path on s as an event stream and returns it, or
// nil and the refusal's status and body.
func clTryOpen(t *testing.T, s *svServer, path string, hdr ...string) (*rsStream, int, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+s.loopback()+path, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, resp.StatusCode, string(b)
	}
	st := &rsStream{t: t, resp: resp, cancel: cancel, done: make(chan struct{}), changed: make(chan struct{})}
	go st.read()
	t.Cleanup(st.close)
	return st, http.StatusOK, ""
}

// One JWT subject's event streams are counted on the node that serves
// them, the conversation's owner or not: at the limit the next one there
// is refused with a 429 and gptme's error body, while the subject still
// connects on the other node and another subject on the same one; a
// stream that ends frees its slot.
func TestClusterSSEStreamsPerSubject(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	k := swNewKeys(t, e.root)
	nodes := clStartWith(t, e, []string{"A", "B"}, "--cluster-spread", "--cluster-lease-ttl", "10s",
		"--jwt-secret-file", k.secretPath, "--rest-max-streams-per-subject", "1")
	a, b := nodes["A"], nodes["B"]
	id := clSessionOn("B", "A", "B")
	tok := func(claims jwt.MapClaims) []string {
		return []string{"Authorization", "Bearer " + swToken(t, jwt.SigningMethodHS256, k.secret, claims)}
	}
	alice, carol := tok(jwt.MapClaims{"sub": "alice"}), tok(jwt.MapClaims{"sub": "carol", "sessions": []string{id}})
	rsOK(t, b, "PUT", rsConvPath(id), map[string]any{}, alice...)
	path := rsConvPath(id) + "/events"

	first := rsOpen(t, a, path, alice...)
	first.waitType(0, "connected")
	const refused = `{"error":"Too many event streams for this user (at most 1): close one first"}`
	if st, code, body := clTryOpen(t, a, path, alice...); st != nil || code != http.StatusTooManyRequests || strings.TrimSpace(body) != refused {
		t.Errorf("alice's second stream on A (not the owner): %d %s, want 429 %s", code, body, refused)
	}
	rsOpen(t, b, path, alice...).waitType(0, "connected") // counted where served: B has none of hers
	rsOpen(t, a, path, carol...).waitType(0, "connected") // another subject on A
	if st, code, _ := clTryOpen(t, b, path, alice...); st != nil || code != http.StatusTooManyRequests {
		t.Errorf("alice's second stream on B (the owner): %d, want 429", code)
	}

	first.close()
	var again *rsStream
	svWaitUntil(t, "alice's closed stream on A frees its slot", func() bool {
		st, code, body := clTryOpen(t, a, path, alice...)
		if st == nil && code != http.StatusTooManyRequests {
			t.Fatalf("alice's stream on A after she closed one: %d %s", code, body)
		}
		again = st
		return st != nil
	})
	again.waitType(0, "connected")
}
