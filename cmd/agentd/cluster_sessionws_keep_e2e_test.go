package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/agentd-dev/agentd/internal/server"
)

// swApprove answers the next question ws is asked after message from,
// approving it, and returns where the wait ended.
func swApprove(t *testing.T, ws *swClient, from int) int {
	t.Helper()
	i, q := ws.waitType(from, "input_required")
	p, _ := q.m["prompt"].(map[string]any)
	qid, _ := p["question_id"].(string)
	at := ws.mark()
	ws.send(map[string]any{"type": "provide_input", "question_id": qid, "input_data": map[string]any{"decision": "approve"}})
	_, rec := ws.waitFor(at, "input_received", func(m swMsg) bool { return m.typ() == "input_received" || m.typ() == "error" })
	if rec.typ() != "input_received" || rec.str("question_id") != qid {
		t.Fatalf("provide_input for %s answered %s", qid, rec.raw)
	}
	return i
}

// A per-session WebSocket client of node A watches a session node B runs:
// A serves it from the cluster's event stream, the owner answering what
// only it knows (the state the subscription starts from, the questions
// open, the answers to them) to commands routed to it. Every tool call
// asks for approval, answered by this client through A: provide_input
// reaches the owner's pending question. B goes (kill -9 mid-run, or
// SIGTERM with its run finishing first) and the client keeps its
// connection: it sees the run end and the next run on the next owner
// (its question answered there, through A all the same), every state
// change once with seqs only going up, as a pi-server client of C sees
// them.
func TestClusterSessionWSKeepsItsConnectionWhenTheOwnerGoes(t *testing.T) {
	t.Parallel()
	for _, tc := range clOwnerGoes(t) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := e2eNewEnv(t, e2eOpts{})
			_, nodes := clStartExternal(t, e, "--shutdown-timeout", "20s", "--ws-progress-interval", "50ms",
				"--policy", e.writePolicy(`{"rules":[{"tool":"bash","action":"ask"}]}`))
			sid := clSessionOn("B", "A", "B", "C")
			clCreate(nodes, "B", sid)
			c := clFollow(nodes, "C", sid)
			schema := swSchema(t, nodes["A"])
			ws := swConnect(t, nodes["A"], schema, sid, swDial{})
			sub := ws.subscribe(sid, nil)
			if st := clStatus(t, nodes["A"]); st.Followed != 1 || st.Leases != 0 {
				t.Errorf("node A follows %d sessions and holds %d leases, want 1 and 0 (the connection is served on A from the stream)", st.Followed, st.Leases)
			}

			// A question of B's, answered through A.
			c.send(svM{"id": "p1", "type": "prompt", "sessionId": sid, "message": "CMD:echo approved-through-a"})
			from := swApprove(t, ws, 0)
			ws.waitType(from, "completed")

			// The run B is in when it goes.
			from = ws.mark()
			c.send(svM{"id": "p2", "type": "prompt", "sessionId": sid, "message": tc.cmd})
			swApprove(t, ws, from)
			svWaitUntil(t, "the tool runs on B", func() bool {
				_, err := os.Stat(filepath.Join(e.cwd, "run.log"))
				return err == nil
			})
			tc.stop(nodes["B"])
			gone := time.Now()
			endAt, _ := ws.waitType(from, "completed")
			ended := time.Since(gone)

			// The next run, on the next owner, its question answered through A.
			c.send(svM{"id": "p3", "type": "prompt", "sessionId": sid, "message": "CMD:echo on-the-next-owner"})
			from = swApprove(t, ws, endAt)
			_, last := ws.waitType(from, "completed")
			if last.str("final_state") != "completed" {
				t.Errorf("the run on the next owner ended %s", last.raw)
			}
			var truth []uint64
			svWaitUntil(t, "C's client sees the last run end", func() bool {
				truth = truth[:0]
				for _, f := range c.events(sid) {
					if n, _ := svNum(f.m, "seq"); f.isEvent(sid, "state_changed") && uint64(n) > sub.seq() {
						truth = append(truth, uint64(n))
					}
				}
				return len(truth) > 0 && truth[len(truth)-1] >= last.seq()
			})

			ws.mu.Lock()
			closed, code, reason, werr := ws.closed, ws.code, ws.reason, ws.err
			ws.mu.Unlock()
			if closed || werr != nil {
				t.Fatalf("the connection through A ended (%d %q, %v) when B went; it had:\n%s", code, reason, werr, ws.dump(0))
			}
			var got []uint64
			var lastSeq uint64
			for _, m := range ws.all() {
				switch m.typ() {
				case "status_change", "completed", "error", "input_required", "input_received", "progress_update":
					if m.seq() < lastSeq {
						t.Errorf("seq goes back: %d after %d: %s", m.seq(), lastSeq, e2eClip(m.raw, 200))
					}
					lastSeq = m.seq()
					if m.typ() == "status_change" {
						got = append(got, m.seq())
					}
				}
			}
			progress := 0
			for _, m := range ws.all()[endAt:] {
				if m.typ() == "progress_update" {
					progress++
				}
			}
			if progress == 0 {
				t.Errorf("no progress_update through A after the next owner took over:\n%s", ws.dump(endAt))
			}
			lost, dup := clTally(truth, got)
			if lost != 0 || dup != 0 {
				t.Errorf("state changes after %d: %d of %v lost, %d duplicated (got %v)", sub.seq(), lost, truth, dup, got)
			}
			if !strings.Contains(ws.dump(0), "on-the-next-owner") {
				t.Logf("the next run's output is not in a completed message:\n%s", ws.dump(endAt))
			}
			next := "C"
			if clStatus(t, nodes["A"]).Leases > 0 {
				next = "A" // its client moved from A's feed onto the session A hosts now
			}
			// query_state through A: the state A keeps of what it sent, as of
			// the run's end.
			at := ws.mark()
			ws.send(map[string]any{"type": "query_state"})
			_, snap := ws.waitType(at, "state_snapshot")
			if snap.str("state") != "completed" || snap.seq() < last.seq() {
				t.Errorf("query_state through A after the run on the next owner: %s", e2eClip(snap.raw, 400))
			}
			if cps, _ := snap.m["checkpoints"].([]any); len(cps) == 0 {
				t.Errorf("query_state through A has no checkpoints: %s", e2eClip(snap.raw, 400))
			}

			// Deleted through C: the connection A serves from the stream is
			// told and closed, as one on the session's node.
			c.must("delete_session", svM{"id": "del", "sessionId": sid})
			if code, _ := ws.waitClosed(); code != 4004 {
				t.Errorf("the connection through A closed with %d after the session was deleted, want 4004", code)
			}
			if tc.interrupted {
				if got := strings.Join(svLines(t, filepath.Join(e.cwd, "run.log")), ","); got != "start" {
					t.Errorf("run.log reads %q: the interrupted tool ran again", got)
				}
			}
			t.Logf("fault table: %s of the owner, per-session WebSocket client of another node: 3 runs, %d state changes, lost %d, duplicated %d, re-run 0; the connection stayed open and saw the run end %v after (lease 10s); next owner %s",
				tc.name, len(truth), lost, dup, ended.Round(100*time.Millisecond), next)
		})
	}
}

// Who may watch a session on the node that runs it may on any other, and
// nobody else: the owner decides, for the client's principal, and a node
// serving the connection from the stream answers exactly as the owner.
func TestClusterSessionWSAuthorizesAsTheOwner(t *testing.T) {
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
	rsOK(t, nodes["B"], "PUT", rsConvPath(id), map[string]any{}, "Authorization", "Bearer "+alice)
	schema := swSchema(t, nodes["B"])

	for _, tc := range []struct {
		name, token string
		ok          bool
	}{
		{name: "owner's subject", token: alice, ok: true},
		{name: "granted by the sessions claim", token: tok(jwt.MapClaims{"sub": "carol", "sessions": []string{id}}), ok: true},
		{name: "granted every session", token: tok(jwt.MapClaims{"sub": "ops", "sessions": []string{"*"}}), ok: true},
		{name: "another subject", token: tok(jwt.MapClaims{"sub": "bob"})},
		{name: "granted another session", token: tok(jwt.MapClaims{"sub": "carol", "sessions": []string{other}})},
		{name: "an expired token", token: tok(jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(-time.Hour).Unix()})},
		{name: "no token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]string
			for i, via := range []string{"B", "C"} {
				ws := swConnect(t, nodes[via], schema, id, swDial{token: tc.token})
				if tc.ok {
					sub := ws.subscribe(id, nil)
					got[i] = "subscribed " + sub.str("current_state")
					continue
				}
				_, m := ws.waitFor(0, "the refusal", func(m swMsg) bool { return m.typ() == "error" })
				code, _ := ws.waitClosed()
				got[i] = fmt.Sprintf("%d %s", code, m.str("code"))
			}
			if got[0] != got[1] {
				t.Errorf("the owner B answers %q, node C %q", got[0], got[1])
			}
			if tc.ok != strings.HasPrefix(got[1], "subscribed") {
				t.Errorf("node C answered %q", got[1])
			}
		})
	}
	if n := clStatus(t, nodes["C"]).Leases; n != 0 {
		t.Errorf("node C holds %d leases, want 0: it served the connections itself, as an owner", n)
	}
}
