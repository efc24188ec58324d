package main

import (
	"strings"
	"syscall"
	"testing"
)

// clFreeze stops node s (SIGSTOP) until the returned thaw (SIGCONT),
// which the test's end calls too: a node paused past its lease, as in a
// long stall or a partition, without killing it.
func clFreeze(t *testing.T, s *svServer) (thaw func()) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thaw = func() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }
	t.Cleanup(thaw)
	return thaw
}

// A per-session WebSocket client and an SSE client of node `on` watch a
// session while it moves to node C, `on` being neither its old nor its
// new owner, or its old owner that lost the lease (frozen past it; C,
// whose pi-server client follows the session, takes it over). Each keeps
// working as a client of a node that never ran the session: the next
// run's events arrive once each, in order; the question C asks reaches
// the WebSocket client and its answer reaches C; query_state answers
// where the session is now, not where it stood when it left; the SSE
// stream goes on.
func TestClusterClientsKeepWatchingASessionThatMoves(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		on   string // the node the session-WS and SSE clients are connected to
		// move makes node C take the session over.
		move func(t *testing.T, nodes clNodes)
	}{
		{name: "the owner loses its lease", on: "B", move: func(t *testing.T, nodes clNodes) {
			thaw := clFreeze(t, nodes["B"])
			svWaitUntil(t, "node C takes the session over", func() bool { return clStatus(t, nodes["C"]).Leases == 1 })
			thaw()
			svWaitUntil(t, "the woken node B gives the session up", func() bool {
				return clStatus(t, nodes["B"]).Leases == 0 && strings.Contains(nodes["B"].stderrTail(1<<20), "lost a session's lease")
			})
		}},
		{name: "a third node takes over", on: "A", move: func(t *testing.T, nodes clNodes) {
			// A, frozen, cannot race C for the session; it follows on
			// once it wakes.
			thaw := clFreeze(t, nodes["A"])
			nodes["B"].kill9()
			svWaitUntil(t, "node C takes the session over", func() bool { return clStatus(t, nodes["C"]).Leases == 1 })
			thaw()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := e2eNewEnv(t, e2eOpts{})
			_, nodes := clStartExternal(t, e, "--cluster-lease-ttl", "1s", "--ws-progress-interval", "50ms",
				"--policy", e.writePolicy(`{"rules":[{"tool":"bash","action":"ask"}]}`))
			sid := clSessionOn("B", "A", "B", "C")
			rsOK(t, nodes["B"], "PUT", rsConvPath(sid), map[string]any{})
			c := clFollow(nodes, "C", sid)
			on := nodes[tc.on]
			ws := swConnect(t, on, swSchema(t, on), sid, swDial{})
			ws.subscribe(sid, nil)
			st := rsOpen(t, on, rsConvPath(sid)+"/events")
			_, conn := st.waitType(0, "connected")

			// A run before the move, its question answered through `on`.
			c.send(svM{"id": "p1", "type": "prompt", "sessionId": sid, "message": "CMD:echo before-the-move"})
			from := swApprove(t, ws, 0)
			ws.waitType(from, "completed")
			st.waitType(0, "run_ended")
			svWantOK(t, c.response("p1"))
			var moved uint64 // the last seq the WebSocket client had before the move
			for _, m := range ws.all() {
				moved = max(moved, m.seq())
			}

			tc.move(t, nodes)

			// The next run, on C: its question reaches the client of `on`,
			// whose answer reaches C.
			from, sseFrom := ws.mark(), st.mark()
			c.send(svM{"id": "p2", "type": "prompt", "sessionId": sid, "message": "CMD:echo after-the-move"})
			at := swApprove(t, ws, from)
			_, last := ws.waitType(at, "completed")
			if last.str("final_state") != "completed" {
				t.Errorf("the run on the new owner ended %s", last.raw)
			}
			svWantOK(t, c.response("p2"))
			st.waitFor(sseFrom, "the run's end on the new owner", func(ev rsEvent) bool { return ev.typ() == "run_ended" })
			if !strings.Contains(st.dump(sseFrom), "after-the-move") {
				t.Errorf("the run on the new owner did not reach the SSE stream:\n%s", st.dump(sseFrom))
			}

			// query_state: where the session is now.
			q := ws.mark()
			ws.send(map[string]any{"type": "query_state"})
			_, snap := ws.waitType(q, "state_snapshot")
			if snap.str("state") != "completed" || snap.seq() < last.seq() {
				t.Errorf("query_state through %s after the move: %s, want completed at seq %d or later", tc.on, e2eClip(snap.raw, 400), last.seq())
			}

			// Nothing lost, nothing twice, nothing out of order.
			ws.mu.Lock()
			closed, code, reason := ws.closed, ws.code, ws.reason
			ws.mu.Unlock()
			if closed {
				t.Errorf("the WebSocket through %s closed (%d %q)", tc.on, code, reason)
			}
			var truth, got []uint64
			for _, f := range c.events(sid) {
				if n, _ := svNum(f.m, "seq"); f.isEvent(sid, "state_changed") && uint64(n) > moved && uint64(n) <= last.seq() {
					truth = append(truth, uint64(n))
				}
			}
			var lastSeq uint64
			for _, m := range ws.all() {
				switch m.typ() {
				case "status_change", "completed", "error", "input_required", "input_received", "progress_update":
					if m.seq() < lastSeq {
						t.Errorf("seq goes back: %d after %d: %s", m.seq(), lastSeq, e2eClip(m.raw, 200))
					}
					lastSeq = m.seq()
					if m.typ() == "status_change" && m.seq() > moved {
						got = append(got, m.seq())
					}
				}
			}
			lost, dup := clTally(truth, got)
			if lost != 0 || dup != 0 || len(truth) == 0 {
				t.Errorf("state changes after the move: %d of %v lost, %d duplicated (got %v)", lost, truth, dup, got)
			}
			st.mu.Lock()
			ended, serr := st.ended, st.err
			st.mu.Unlock()
			if ended {
				t.Errorf("the SSE stream through %s ended (%v)", tc.on, serr)
			}
			clSSEEvents(t, "the SSE stream through "+tc.on, st.snapshot(), conn.num("seq"))
			t.Logf("fault table: %s, clients of %s: state changes after the move %d, lost %d, duplicated %d; WebSocket closed %v, SSE ended %v",
				tc.name, tc.on, len(truth), lost, dup, closed, ended)
		})
	}
}
