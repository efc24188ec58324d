package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/agentd-dev/agentd/internal/server"
)

// clEventID orders SSE ids: a seq, or a seq and a part ("7.1").
func clEventID(id string) (seq, part uint64, ok bool) {
	s, p, hasPart := strings.Cut(id, ".")
	seq, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	if hasPart {
		if part, err = strconv.ParseUint(p, 10, 64); err != nil {
			return 0, 0, false
		}
	}
	return seq, part, true
}

// num is a number field of the event.
func (e rsEvent) num(k string) uint64 { f, _ := e.m[k].(float64); return uint64(f) }

// clSSEEvents checks what a stream brought: every event of the
// session's (not connected, ping or resync, which carry the last id)
// once, its ids only going up, each after the cursor. It returns the
// ids.
func clSSEEvents(t *testing.T, who string, evs []rsEvent, cursor uint64) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	var lastSeq, lastPart uint64
	for _, ev := range evs {
		if ev.id == "" || ev.typ() == "connected" || ev.typ() == "ping" || ev.typ() == "resync" {
			continue
		}
		seq, part, ok := clEventID(ev.id)
		if !ok {
			t.Errorf("%s: an id that is no seq: %q", who, ev.id)
			continue
		}
		if seen[ev.id] {
			t.Errorf("%s: id %s came twice: %s", who, ev.id, e2eClip(ev.raw, 200))
		}
		seen[ev.id] = true
		if seq <= cursor {
			t.Errorf("%s: seq %d at or before the cursor %d: %s", who, seq, cursor, e2eClip(ev.raw, 200))
		}
		if seq < lastSeq || (seq == lastSeq && part <= lastPart) {
			t.Errorf("%s: the ids go back: %s after %d.%d", who, ev.id, lastSeq, lastPart)
		}
		lastSeq, lastPart = seq, part
	}
	return seen
}

// An SSE client of node C watches a conversation node B runs: C serves
// the stream itself, fed from the cluster's event stream, the owner
// answering only what it opens with. B goes (kill -9 mid-run, or SIGTERM
// with its run finishing first) and the client keeps its connection: it
// sees the run end and the next run, on the next owner, on the same
// stream, every event once with its id only going up. A client that
// reconnects with a Last-Event-ID from before B went resumes across the
// change of owner (and the seq's jump there) all the same.
func TestClusterSSEKeepsItsStreamWhenTheOwnerGoes(t *testing.T) {
	t.Parallel()
	for _, tc := range clOwnerGoes(t) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := e2eNewEnv(t, e2eOpts{})
			_, nodes := clStartExternal(t, e, "--shutdown-timeout", "20s")
			id := clSessionOn("B", "A", "B", "C")
			sid := rsOK(t, nodes["B"], "PUT", rsConvPath(id), map[string]any{}).str("session_id")
			// The attachment B made is named on C: C asks B.
			st := rsOpen(t, nodes["C"], rsConvPath(id)+"/events?session_id="+sid)
			_, conn := st.waitType(0, "connected")
			if conn.str("session_id") != sid {
				t.Errorf("connected on C names attachment %q, want B's %q: %s", conn.str("session_id"), sid, conn.raw)
			}
			if st := clStatus(t, nodes["C"]); st.Followed != 1 {
				t.Errorf("node C follows %d sessions from the stream, want 1 (the stream is served on C)", st.Followed)
			}
			rsOK(t, nodes["C"], "POST", rsConvPath(id), map[string]any{"role": "user", "content": "to be edited"})
			// An edit: C has no log to send with conversation_edited, and
			// tells its client to reload.
			edited := st.mark()
			rsOK(t, nodes["C"], "PATCH", rsConvPath(id)+"/messages/0", map[string]any{"content": tc.cmd})
			if _, rs := st.waitType(edited, "resync"); !strings.Contains(rs.str("reason"), "edited") {
				t.Errorf("the edit reached the stream on C as %s", rs.raw)
			}
			from := st.mark()
			rsOK(t, nodes["C"], "POST", rsConvPath(id)+"/step", map[string]any{"session_id": sid, "auto_confirm": true})
			svWaitUntil(t, "the tool runs on B", func() bool { return clStarted(e) && st.mark() > from })
			var cursor uint64 // the last event before B went
			for _, ev := range st.snapshot() {
				if seq, _, ok := clEventID(ev.id); ok && seq > cursor {
					cursor = seq
				}
			}

			tc.stop(nodes["B"])
			gone := time.Now()
			endAt, _ := st.waitType(from, "run_ended")
			ended := time.Since(gone)
			// The next run, on the next owner (C, which follows the
			// conversation, took it over and keeps the attachment with its
			// stream), on the same stream. Until C's cache of the owner
			// expires, C may pass a request on to B, gone: 502, nothing
			// done, sent again.
			post := func(path string, body map[string]any) {
				t.Helper()
				var r rsReply
				svWaitUntil(t, "POST "+path+" is served after B went", func() bool {
					r = rsDo(t, nodes["C"], "POST", path, body)
					return r.status != http.StatusBadGateway
				})
				if r.status != http.StatusOK {
					t.Fatalf("POST %s: %d %s", path, r.status, r)
				}
			}
			post(rsConvPath(id), map[string]any{"role": "user", "content": "CMD:echo on-the-next-owner"})
			post(rsConvPath(id)+"/step", map[string]any{"session_id": sid, "auto_confirm": true})
			st.waitFor(endAt+1, "the next run's end", func(ev rsEvent) bool { return ev.typ() == "run_ended" })
			st.mu.Lock()
			cut, cutErr := st.ended, st.err
			st.mu.Unlock()
			if cut {
				t.Fatalf("the stream on C ended (%v) when B went; it had:\n%s", cutErr, st.dump(0))
			}
			evs := st.snapshot()
			connected := 0
			for _, ev := range evs {
				if ev.typ() == "connected" {
					connected++
				}
			}
			if connected != 1 {
				t.Errorf("%d connected events on one stream, want 1", connected)
			}
			live := clSSEEvents(t, "the stream on C", evs, conn.num("seq"))
			if !strings.Contains(st.dump(0), "on-the-next-owner") {
				t.Errorf("the next run's output did not reach the stream:\n%s", st.dump(from))
			}

			// Nothing lost: a stream opened now from the connected seq
			// replays (from the log and the cluster's stream) only ids the
			// live stream had.
			replay := rsOpen(t, nodes["A"], rsConvPath(id)+"/events", "Last-Event-ID", strconv.FormatUint(conn.num("seq"), 10))
			_, rc := replay.waitType(0, "connected")
			if rc.m["resumed"] != true {
				t.Errorf("a stream on A did not resume from %d: %s", conn.num("seq"), rc.raw)
			}
			i, _ := replay.waitType(0, "run_ended")
			replay.waitFor(i+1, "the next run's end in the replay", func(ev rsEvent) bool { return ev.typ() == "run_ended" })
			lost := 0
			for idv := range clSSEEvents(t, "the replay on A", replay.snapshot(), conn.num("seq")) {
				if !live[idv] {
					lost++
					t.Errorf("event %s is in the replay but never reached the live stream", idv)
				}
			}
			// Resuming across the owner's change: from the cursor before B
			// went, through C.
			st2 := rsOpen(t, nodes["C"], rsConvPath(id)+"/events", "Last-Event-ID", strconv.FormatUint(cursor, 10))
			_, c2 := st2.waitType(0, "connected")
			if c2.m["resumed"] != true {
				t.Errorf("the stream reopened through C did not resume after %d: %s", cursor, c2.raw)
			}
			j, _ := st2.waitType(0, "run_ended")
			st2.waitFor(j+1, "the next run's end after a resume", func(ev rsEvent) bool { return ev.typ() == "run_ended" })
			clSSEEvents(t, "the stream resumed on C", st2.snapshot(), cursor)

			// Deleted through C (which runs it now): A's stream, fed from
			// the cluster's, ends too.
			rsOK(t, nodes["C"], "DELETE", rsConvPath(id), nil)
			if err := replay.waitEnded(); err != nil {
				t.Errorf("A's stream of the deleted conversation ended with %v, want a clean end", err)
			}

			if tc.interrupted {
				if got := strings.Join(svLines(t, filepath.Join(e.cwd, "run.log")), ","); got != "start" {
					t.Errorf("run.log reads %q: the interrupted tool ran again", got)
				}
			}
			t.Logf("fault table: %s of the owner, SSE client of another node: 2 runs, lost %d, duplicated 0, re-run 0; the stream stayed open and saw the run end %v after (lease 10s)",
				tc.name, lost, ended.Round(100*time.Millisecond))
		})
	}
}

// Who may watch a conversation on the node that runs it may on any
// other, and nobody else: the owner decides, for the principal of the
// request, and a node serving the stream answers exactly as the owner
// would (the same status, the same body).
func TestClusterSSEAuthorizesAsTheOwner(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	k := swNewKeys(t, e.root)
	nodes := clStart(t, e, "--jwt-secret-file", k.secretPath)
	id := clSessionOn("B", "A", "B", "C")
	other := ""
	for i := 0; other == ""; i++ {
		if o := fmt.Sprintf("s-other-%d", i); server.PlaceSession(o, []string{"A", "B", "C"}) == "B" {
			other = o
		}
	}
	tok := func(claims jwt.MapClaims) string { return swToken(t, jwt.SigningMethodHS256, k.secret, claims) }
	alice := tok(jwt.MapClaims{"sub": "alice"})
	sid := rsOK(t, nodes["B"], "PUT", rsConvPath(id), map[string]any{}, "Authorization", "Bearer "+alice).str("session_id")
	otherSID := rsOK(t, nodes["B"], "PUT", rsConvPath(other), map[string]any{}, "Authorization", "Bearer "+alice).str("session_id")

	for _, tc := range []struct {
		name, token, query string
		want               int
	}{
		{name: "owner's subject", token: alice, want: http.StatusOK},
		{name: "granted by the sessions claim", token: tok(jwt.MapClaims{"sub": "carol", "sessions": []string{id}}), want: http.StatusOK},
		{name: "granted every session", token: tok(jwt.MapClaims{"sub": "ops", "sessions": []string{"*"}}), want: http.StatusOK},
		{name: "another subject", token: tok(jwt.MapClaims{"sub": "bob"}), want: http.StatusNotFound},
		{name: "another subject naming the owner's attachment", token: tok(jwt.MapClaims{"sub": "bob"}), query: "session_id=" + sid, want: http.StatusNotFound},
		{name: "granted another session", token: tok(jwt.MapClaims{"sub": "carol", "sessions": []string{other}}), want: http.StatusNotFound},
		{name: "an expired token", token: tok(jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(-time.Hour).Unix()}), want: http.StatusUnauthorized},
		{name: "no token", want: http.StatusUnauthorized},
		{name: "the attachment of another conversation", token: alice, query: "session_id=" + otherSID, want: http.StatusForbidden},
		{name: "an attachment nobody made", token: alice, query: "session_id=nope", want: http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := rsConvPath(id) + "/events"
			q := []string{}
			if tc.token != "" {
				q = append(q, "token="+tc.token)
			}
			if tc.query != "" {
				q = append(q, tc.query)
			}
			if len(q) > 0 {
				path += "?" + strings.Join(q, "&")
			}
			var got [2]string
			for i, via := range []string{"B", "C"} {
				if tc.want == http.StatusOK {
					st := rsOpen(t, nodes[via], path)
					st.waitType(0, "connected")
					got[i] = "200"
					continue
				}
				r := rsDo(t, nodes[via], "GET", path, nil)
				if r.status != tc.want {
					t.Errorf("on %s: %d %s, want %d", via, r.status, r, tc.want)
				}
				got[i] = strconv.Itoa(r.status) + " " + r.String()
			}
			if got[0] != got[1] {
				t.Errorf("the owner B answers %q, node C %q", got[0], got[1])
			}
		})
	}
	// C answered as B would without taking the conversation over.
	if n := clStatus(t, nodes["C"]).Leases; n != 0 {
		t.Errorf("node C holds %d leases, want 0: it served the streams itself, as an owner", n)
	}
}
