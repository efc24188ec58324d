package main

import (
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentd-dev/agentd/internal/cluster/clustertest"
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

// clLeaveCluster starts nodes A, B and C on one NATS server, B through a
// link the test can cut, with a 1 s lease and every bash call asking for
// approval: the cluster in which a session leaves B.
func clLeaveCluster(t *testing.T) (clNodes, *clustertest.Link) {
	t.Helper()
	e := e2eNewEnv(t, e2eOpts{})
	ns, keyPath := clStartNATS(t, e)
	link := clustertest.NewLink(t, ns.addr)
	policy := e.writePolicy(`{"rules":[{"tool":"bash","action":"ask"}]}`)
	nodes := clLaunch(t, e, false, clABC, func(id string) []string {
		addr := ns.addr
		if id == "B" {
			addr = link.Addr()
		}
		return []string{"--cluster", "nats://" + addr, "--cluster-key", keyPath, "--cluster-spread",
			"--cluster-lease-ttl", "1s", "--ws-progress-interval", "50ms", "--policy", policy}
	})
	return nodes, link
}

// A pi-server client, a per-session WebSocket client and an SSE client
// of node `on` watch a session while it moves to node C, `on` being
// neither its old nor its new owner, or its old owner that lost the
// lease (frozen past it, or its NATS link cut past it and healed; C,
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
		on   string // the node the clients are connected to
		// move makes node C take the session over; link is B's link
		// to NATS.
		move func(t *testing.T, nodes clNodes, link *clustertest.Link)
	}{
		{name: "the owner loses its lease", on: "B", move: func(t *testing.T, nodes clNodes, _ *clustertest.Link) {
			thaw := clFreeze(t, nodes["B"])
			svWaitUntil(t, "node C takes the session over", func() bool { return clStatus(t, nodes["C"]).Leases == 1 })
			thaw()
			svWaitUntil(t, "the woken node B gives the session up", func() bool {
				return clStatus(t, nodes["B"]).Leases == 0 && strings.Contains(nodes["B"].stderrTail(1<<20), "lost a session's lease")
			})
		}},
		{name: "the owner's NATS link breaks past its lease", on: "B", move: func(t *testing.T, nodes clNodes, link *clustertest.Link) {
			link.SetCut(true)
			svWaitUntil(t, "node C takes the session over", func() bool { return clStatus(t, nodes["C"]).Leases == 1 })
			// Until the link heals, B cannot follow the session from the
			// stream for its clients: it tried once (and gave up on
			// them, before).
			svWaitUntil(t, "node B fails to follow the session from the stream", func() bool {
				return strings.Contains(nodes["B"].stderrTail(1<<20), "cluster: following a session")
			})
			link.SetCut(false)
		}},
		{name: "a third node takes over", on: "A", move: func(t *testing.T, nodes clNodes, _ *clustertest.Link) {
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
			nodes, link := clLeaveCluster(t)
			sid := clSessionOn("B", "A", "B", "C")
			rsOK(t, nodes["B"], "PUT", rsConvPath(sid), map[string]any{})
			c := clFollow(nodes, "C", sid)
			pi := clFollow(nodes, tc.on, sid)
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

			tc.move(t, nodes, link)

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
			if err := clReachSeq(pi, sid, last.seq()); err != nil {
				t.Errorf("the pi-server client of %s did not see the run on the new owner end: %v", tc.on, err)
			}
			clCheckSeqs(t, "the pi-server client of "+tc.on, clSeqs(pi, sid))
			var truth, got, piGot []uint64
			for _, f := range pi.events(sid) {
				if n, _ := svNum(f.m, "seq"); f.isEvent(sid, "state_changed") && uint64(n) > moved && uint64(n) <= last.seq() {
					piGot = append(piGot, uint64(n))
				}
			}
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
				t.Errorf("state changes after the move on the WebSocket: %d of %v lost, %d duplicated (got %v)", lost, truth, dup, got)
			}
			if l, d := clTally(truth, piGot); l != 0 || d != 0 {
				t.Errorf("state changes after the move on the pi-server client: %d of %v lost, %d duplicated (got %v)", l, truth, d, piGot)
				lost, dup = lost+l, dup+d
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

// Node B, which runs a session, loses its NATS link past its lease and
// does not get it back: C takes the session over, and B cannot put its
// clients on the cluster's stream. Each is told why, with what it needs
// to resume, within six lease TTLs and 10 s (16 s here): the
// per-session WebSocket closes with 1011 and the after_seq to subscribe
// with, the SSE stream ends (an EventSource reconnects with its
// Last-Event-ID), the pi-server connection closes with the reason.
// Resumed through another node, the WebSocket and the SSE stream miss
// nothing of the next run.
func TestClusterClientsOfACutOffOwnerAreToldWhy(t *testing.T) {
	t.Parallel()
	nodes, link := clLeaveCluster(t)
	sid := clSessionOn("B", "A", "B", "C")
	rsOK(t, nodes["B"], "PUT", rsConvPath(sid), map[string]any{})
	c := clFollow(nodes, "C", sid)
	pi := clFollow(nodes, "B", sid)
	ws := swConnect(t, nodes["B"], swSchema(t, nodes["B"]), sid, swDial{})
	ws.subscribe(sid, nil)
	st := rsOpen(t, nodes["B"], rsConvPath(sid)+"/events")
	st.waitType(0, "connected")

	c.send(svM{"id": "p1", "type": "prompt", "sessionId": sid, "message": "CMD:echo before-the-cut"})
	from := swApprove(t, ws, 0)
	ws.waitType(from, "completed")
	st.waitType(0, "run_ended")
	svWantOK(t, c.response("p1"))

	link.SetCut(true)
	svWaitUntil(t, "node C takes the session over", func() bool { return clStatus(t, nodes["C"]).Leases == 1 })
	code, reason := ws.waitClosed()
	seqText, ok := strings.CutPrefix(reason[strings.LastIndex(reason, "after_seq"):], "after_seq ")
	after, err := strconv.ParseUint(seqText, 10, 64)
	if code != 1011 || !ok || err != nil {
		t.Fatalf("the WebSocket of B closed with %d %q, want 1011 and the after_seq to resume with", code, reason)
	}
	if err := st.waitEnded(); err != nil {
		t.Errorf("the SSE stream of B ended with %v, want a clean end", err)
	}
	var lastID uint64
	for _, ev := range st.snapshot() {
		if seq, _, ok := clEventID(ev.id); ok {
			lastID = max(lastID, seq)
		}
	}
	pcode, preason := pi.waitClosed()
	if !strings.Contains(preason, "moved to another node") {
		t.Errorf("the pi-server connection of B closed with %d %q, want the reason", pcode, preason)
	}

	// Resumed through A, from where each stood.
	ws2 := swConnect(t, nodes["A"], swSchema(t, nodes["A"]), sid, swDial{})
	if sub := ws2.subscribe(sid, map[string]any{"after_seq": after}); sub.m["resumed"] != true {
		t.Errorf("subscribing through A after_seq %d: %s", after, sub.raw)
	}
	st2 := rsOpen(t, nodes["A"], rsConvPath(sid)+"/events", "Last-Event-ID", strconv.FormatUint(lastID, 10))
	if _, c2 := st2.waitType(0, "connected"); c2.m["resumed"] != true {
		t.Errorf("the SSE stream reopened through A did not resume after %d: %s", lastID, c2.raw)
	}
	c.send(svM{"id": "p2", "type": "prompt", "sessionId": sid, "message": "CMD:echo after-the-cut"})
	at := swApprove(t, ws2, 0)
	_, last := ws2.waitType(at, "completed")
	svWantOK(t, c.response("p2"))
	st2.waitType(0, "run_ended")
	if !strings.Contains(st2.dump(0), "after-the-cut") {
		t.Errorf("the run after the cut did not reach the resumed SSE stream:\n%s", st2.dump(0))
	}
	clSSEEvents(t, "the SSE stream resumed through A", st2.snapshot(), lastID)
	var truth, got []uint64
	for _, f := range c.events(sid) {
		if n, _ := svNum(f.m, "seq"); f.isEvent(sid, "state_changed") && uint64(n) > after && uint64(n) <= last.seq() {
			truth = append(truth, uint64(n))
		}
	}
	for _, m := range ws2.all() {
		if m.typ() == "status_change" {
			got = append(got, m.seq())
		}
	}
	lost, dup := clTally(truth, got)
	if lost != 0 || dup != 0 || len(truth) == 0 {
		t.Errorf("state changes after %d through the resumed WebSocket: %d of %v lost, %d duplicated (got %v)", after, lost, truth, dup, got)
	}
	t.Logf("fault table: owner's NATS link cut for good, clients of the owner: WebSocket closed %d %q, pi-server %d %q; resumed through A: %d state changes, lost %d, duplicated %d",
		code, reason, pcode, preason, len(truth), lost, dup)
}
