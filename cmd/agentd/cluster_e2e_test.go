package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/cluster/clustertest"
	"github.com/agentd-dev/agentd/internal/server"
)

// The cluster's behaviour seen by its clients; cluster_harness_test.go
// starts the nodes.

// clWantHome checks that node home holds the one lease of the cluster;
// a failure shows every node's state, takeovers included.
func clWantHome(t *testing.T, nodes clNodes, home string) {
	t.Helper()
	if st := clStatus(t, nodes[home]); st.Leases == 1 {
		return
	}
	for _, id := range slices.Sorted(maps.Keys(nodes)) {
		t.Errorf("node %s: %+v", id, clStatus(t, nodes[id]))
	}
	t.Errorf("node %s, the conversation's home, does not hold its lease", home)
}

// clSessionOn is a session id that a cluster of nodes places on node want.
func clSessionOn(want string, nodes ...string) string {
	for i := 0; ; i++ {
		id := fmt.Sprintf("s-%s-%d", strings.ToLower(want), i)
		if server.PlaceSession(id, nodes) == want {
			return id
		}
	}
}

// clSeqs are the seqs of a connection's events of session sid, in order.
func clSeqs(c *svConn, sid string) []uint64 {
	var out []uint64
	for _, f := range c.events(sid) {
		if n, ok := svNum(f.m, "seq"); ok {
			out = append(out, uint64(n))
		}
	}
	return out
}

func clCheckSeqs(t *testing.T, who string, seqs []uint64) {
	t.Helper()
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Errorf("%s: seq %d after %d: a seq went back or came twice (%v)", who, seqs[i], seqs[i-1], seqs)
			return
		}
	}
}

// A client of node A creates a session that node B owns, a client of C
// watches it, and a fourth connection (on C) answers its approval: every
// client sees the same events with the same seqs, as from one server.
func TestClusterCommandsAndEventsAcrossNodes(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	nodes := clStart(t, e, "--policy", e.writePolicy(`{"rules":[{"tool":"bash","action":"ask"}]}`))
	sid := clSessionOn("B", "A", "B", "C")

	// A client of C that watches nothing hears what one server's clients
	// would: the session created through A and the lifecycle of A's
	// client's commands, once each.
	w := nodes["C"].dial("w")
	a := clCreate(nodes, "A", sid)
	if st := clStatus(t, nodes["B"]); st.Leases != 1 {
		t.Fatalf("node B holds %d leases after a create placed on it, want 1: %+v", st.Leases, st)
	}
	if st := clStatus(t, nodes["A"]); st.Leases != 0 || st.Forwarded == 0 {
		t.Fatalf("node A: %+v, want no lease and a forwarded command", st)
	}

	c := clFollow(nodes, "C", sid)
	approver := nodes["C"].dial("approver")

	a.send(svM{"id": "p1", "type": "prompt", "sessionId": sid, "message": "CMD:echo across-nodes"})
	req := c.waitEvent(sid, "extension_ui_request")
	rid := svStr(req.m, "event", "requestId")
	if rid == "" {
		t.Fatalf("no requestId: %s", req)
	}
	svWantOK(t, approver.call(svM{"id": "ans", "type": "extension_ui_response", "sessionId": sid, "requestId": rid,
		"response": svM{"method": "select", "value": "Allow"}}))
	svWantOK(t, a.response("p1"))
	te := c.waitEvent(sid, "tool_execution_end")
	if !strings.Contains(te.raw, "across-nodes") {
		t.Errorf("the approved tool's output did not reach node C's client: %s", te)
	}
	c.waitEvent(sid, "agent_end")
	a.waitEvent(sid, "agent_end")

	// Both clients saw the same events, in the same order, with the same
	// seqs: the one on C from the stream, the one on A likewise.
	last := func(s []uint64) uint64 {
		if len(s) == 0 {
			return 0
		}
		return s[len(s)-1]
	}
	svWaitUntil(t, "both clients have the run's last event", func() bool {
		return last(clSeqs(a, sid)) == last(clSeqs(c, sid)) && last(clSeqs(a, sid)) > 0
	})
	sa, sc := clSeqs(a, sid), clSeqs(c, sid)
	clCheckSeqs(t, "client of A", sa)
	clCheckSeqs(t, "client of C", sc)
	svEq(t, "the seqs of A's client and C's client", sa, sc)
	// A client of A that resumes from a cursor gets exactly what follows.
	cursor := sc[len(sc)/2]
	r := nodes["A"].dial("resume")
	r.must("switch_session", svM{"id": "r-switch", "sessionId": sid, "afterSeq": cursor})
	end := last(sc)
	if _, _, err := r.tryWaitFor(0, svWait, func(f svFrame) bool {
		n, _ := svNum(f.m, "seq")
		return f.isEvent(sid, "") && uint64(n) == end
	}); err != nil {
		t.Fatalf("the client resuming on A after %d did not catch up to %d: %v\n%s", cursor, last(sc), err, r.tail(20))
	}
	// Events may still be arriving (the run's last state change): compare
	// once both clients have the same last one.
	svWaitUntil(t, "the resumed client and C's have the same last event", func() bool {
		return last(clSeqs(r, sid)) == last(clSeqs(c, sid))
	})
	rs := clSeqs(r, sid)
	clCheckSeqs(t, "resumed client", rs)
	if rs[0] <= cursor {
		t.Errorf("resumed after %d, first event %d", cursor, rs[0])
	}
	var want []uint64
	for _, s := range clSeqs(c, sid) {
		if s > cursor {
			want = append(want, s)
		}
	}
	svEq(t, "resumed seqs", rs, want)

	w.waitFor(0, "session_created on another node's client", func(f svFrame) bool {
		return f.typ() == "session_created" && strings.Contains(f.raw, sid)
	})
	svWaitUntil(t, "the prompt's lifecycle on another node's client", func() bool { return len(w.lifecycle("p1")) >= 3 })
	var phases []string
	for _, f := range w.lifecycle("p1") {
		phases = append(phases, f.typ())
	}
	svEq(t, "the lifecycle of A's client's prompt seen by C's client", phases, []string{"command_accepted", "command_started", "command_finished"})

	// Reads from any node answer from the owner.
	st := c.must("get_state", svM{"id": "c-state", "sessionId": sid})
	if svStr(st.m, "data", "sessionId") == "" && !svHas(st.m, "data") {
		t.Errorf("get_state through C: %s", st)
	}
	msgs := a.must("get_messages", svM{"id": "a-msgs", "sessionId": sid})
	if !strings.Contains(msgs.raw, "across-nodes") {
		t.Errorf("get_messages through A lacks the run: %s", msgs)
	}
}

// Node B, which owns a session, is killed mid-run while a tool call waits
// for approval. The session is taken over by another node: the prompt that
// was running answers interrupted (it is not run again), the approval is
// pending again under its id and is answered, a client that watched on B
// resumes on C by seq with nothing duplicated, and a command replayed by
// id returns the outcome stored before the crash.
func TestClusterTakeoverAfterNodeDies(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	nodes := clStart(t, e, "--policy", e.writePolicy(`{"rules":[{"tool":"bash","action":"ask"}]}`))
	sid := clSessionOn("B", "A", "B", "C")

	a := clCreate(nodes, "A", sid)
	named := a.ok(svM{"id": "name-1", "type": "set_session_name", "sessionId": sid, "name": "before the crash"})
	b := clFollow(nodes, "B", sid)
	c := clFollow(nodes, "C", sid)

	a.send(svM{"id": "p1", "type": "prompt", "sessionId": sid, "message": "CMD:echo after-takeover"})
	req := b.waitEvent(sid, "extension_ui_request")
	rid := svStr(req.m, "event", "requestId")
	c.waitEvent(sid, "extension_ui_request")
	bSeqs := clSeqs(b, sid)

	nodes["B"].kill9()
	killed := time.Now()
	// An answer sent at once, while B's lease still stands, waits for the
	// session to be taken over instead of failing.
	approver := nodes["C"].dial("approver")
	approver.send(svM{"id": "ans", "type": "extension_ui_response", "sessionId": sid, "requestId": rid,
		"response": svM{"method": "select", "value": "Allow"}})
	// So does a read sent through A, the node that takes the session over:
	// it goes to B, finds it gone, and runs on A once A holds the lease.
	a.send(svM{"id": "state-after", "type": "get_state", "sessionId": sid})
	// A node following the session (A and C both do, for their clients)
	// takes it over once B's lease has expired, without a command.
	svWaitUntil(t, "another node takes the session over", func() bool {
		return clStatus(t, nodes["A"]).Leases+clStatus(t, nodes["C"]).Leases == 1
	})
	t.Logf("taken over %v after the owner died (lease TTL 1s)", time.Since(killed).Round(time.Millisecond))

	// The prompt that was running on B ends as interrupted, not re-run.
	p1 := a.response("p1")
	if ok, _ := p1.m["success"].(bool); ok || !strings.Contains(svStr(p1.m, "error"), "interrupted") {
		t.Errorf("the prompt running on the dead node: %s, want an interrupted failure", p1)
	}
	// The approval was pending again on the new owner, under the same
	// id, and the answer sent from a fourth connection settled it.
	svWantOK(t, approver.response("ans"))
	svWantOK(t, a.response("state-after"))
	// Both were sent to B, found it gone and were routed again until the
	// takeover, to another node (the answer) or to their own (the read):
	// their clients are still told of each once, as of one command.
	for _, c := range []struct {
		conn *svConn
		id   string
	}{{approver, "ans"}, {a, "state-after"}} {
		var phases []string
		for _, f := range c.conn.lifecycle(c.id) {
			phases = append(phases, f.typ())
		}
		if got, want := strings.Join(phases, " "), "command_accepted command_started command_finished"; got != want {
			t.Errorf("lifecycle of %s, routed again: %s, want %s", c.id, got, want)
		}
	}
	te := c.waitEvent(sid, "tool_execution_end")
	if !strings.Contains(te.raw, "after-takeover") {
		t.Errorf("the approved tool did not run on the new owner: %s", te)
	}
	if owners := clStatus(t, nodes["A"]).Leases + clStatus(t, nodes["C"]).Leases; owners != 1 {
		t.Errorf("after the takeover A and C hold %d leases, want 1", owners)
	}

	// The client of B resumes from the last seq it saw, once the run is
	// over, on the node that took the session over and on the other one:
	// what it missed, from B and from the new owner, comes from the
	// cluster's stream, since the new owner's own log starts at its
	// first seq.
	c.waitEvent(sid, "agent_end")
	cursor := bSeqs[len(bSeqs)-1]
	owner, other := "C", "A"
	if clStatus(t, nodes["A"]).Leases == 1 {
		owner, other = "A", "C"
	}
	for _, on := range []string{owner, other} {
		b2 := nodes[on].dial("b-again-on-" + on)
		b2.must("switch_session", svM{"id": "b2-switch-on-" + on, "sessionId": sid, "afterSeq": cursor})
		end := b2.waitEvent(sid, "tool_execution_end")
		if !strings.Contains(end.raw, "after-takeover") {
			t.Errorf("the client resumed on %s: tool_execution_end %s", on, end)
		}
		rs := clSeqs(b2, sid)
		clCheckSeqs(t, "client resumed on "+on, rs)
		if len(rs) == 0 || rs[0] <= cursor {
			t.Errorf("resumed on %s after %d, got seqs %v", on, cursor, rs)
		}
	}
	clCheckSeqs(t, "client of C", clSeqs(c, sid))

	// A command replayed by id after the takeover returns its outcome.
	again := a.call(svM{"id": "name-1", "type": "set_session_name", "sessionId": sid, "name": "before the crash"})
	if r, _ := again.m["replayed"].(bool); !r {
		t.Errorf("replaying name-1 after the takeover: %s (first answer %s)", again, named)
	}
}

// SIGTERM on the node that owns a session hands it over: the run in
// progress finishes there, the lease is released, and the next command
// from a client of another node runs on the node that takes it over; no
// client of another node sees an error, and the watcher's seqs keep going
// up.
func TestClusterDrainHandsSessionsOver(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	nodes := clStart(t, e, "--shutdown-timeout", "20s")
	sid := clSessionOn("B", "A", "B", "C")

	a := clCreate(nodes, "A", sid)
	c := clFollow(nodes, "C", sid)

	a.send(svM{"id": "p1", "type": "prompt", "sessionId": sid, "message": "CMD:sleep 1; echo drained-run"})
	c.waitEvent(sid, "tool_execution_start")
	nodes["B"].sigterm()
	if code := nodes["B"].waitExit(); code != 0 {
		t.Errorf("node B exited with %d after SIGTERM\n%s", code, nodes["B"].stderrTail(3000))
	}
	svWantOK(t, a.response("p1"))
	te := c.waitEvent(sid, "tool_execution_end")
	if !strings.Contains(te.raw, "drained-run") {
		t.Errorf("the run in progress did not finish on the draining node: %s", te)
	}

	// The next prompt, sent from A right away, runs where the session went.
	p2 := a.must("prompt", svM{"id": "p2", "sessionId": sid, "message": "CMD:echo on-the-new-owner"})
	svWantOK(t, p2)
	te2 := c.waitEvent(sid, "tool_execution_end")
	if !strings.Contains(te2.raw, "on-the-new-owner") {
		t.Errorf("second run: %s", te2)
	}
	if owners := clStatus(t, nodes["A"]).Leases + clStatus(t, nodes["C"]).Leases; owners != 1 {
		t.Errorf("after the drain A and C hold %d leases, want 1", owners)
	}
	clCheckSeqs(t, "client of C", clSeqs(c, sid))
	clCheckSeqs(t, "client of A", clSeqs(a, sid))
	// Only B's clients were told B shuts down: the cluster goes on.
	for _, cl := range []*svConn{a, c} {
		for _, f := range cl.snapshot() {
			if f.typ() == "server_shutdown" {
				t.Errorf("a client of another node was told of B's shutdown: %s", f)
			}
		}
	}
	msgs := c.must("get_messages", svM{"id": "c-msgs", "sessionId": sid})
	for _, want := range []string{"drained-run", "on-the-new-owner"} {
		if !strings.Contains(msgs.raw, want) {
			t.Errorf("the conversation on the new owner lacks %q: %s", want, e2eClip(msgs.raw, 2000))
		}
	}
}

// A node frozen past its lease (SIGSTOP: a long pause, a partition) loses
// its session to another node; when it wakes, nothing it still does for
// the session is accepted: the tool it was running finishes, but its
// result reaches neither the new owner's conversation nor any client.
func TestClusterStaleOwnerIsFenced(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	nodes := clStart(t, e)
	sid := clSessionOn("B", "A", "B", "C")

	a := clCreate(nodes, "A", sid)
	c := clFollow(nodes, "C", sid)
	onB := nodes["B"].dial("on-b")
	onB.must("switch_session", svM{"id": "b-switch", "sessionId": sid})
	a.send(svM{"id": "p1", "type": "prompt", "sessionId": sid, "message": "CMD:sleep 2; echo stale-write"})
	c.waitEvent(sid, "tool_execution_start")

	b := nodes["B"]
	if err := b.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.cmd.Process.Signal(syscall.SIGCONT) }()
	// The prompt B was running is reported interrupted once B's
	// membership expires, and the session is taken over by A or C.
	p1 := a.response("p1")
	if ok, _ := p1.m["success"].(bool); ok {
		t.Errorf("the prompt on the frozen node: %s, want a failure", p1)
	}
	svWaitUntil(t, "another node holds the session", func() bool {
		return clStatus(t, nodes["A"]).Leases+clStatus(t, nodes["C"]).Leases == 1
	})

	if err := b.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	svWaitUntil(t, "the woken node gives the session up", func() bool {
		return clStatus(t, b).Leases == 0 && strings.Contains(b.stderrTail(1<<20), "lost a session's lease")
	})
	// B no longer hosts it (it is known there, not loaded).
	bc := b.dial("b")
	loaded := func() bool {
		list := bc.must("list_sessions", svM{"id": bc.newID("list")})
		for _, s := range svArr(list.m, "data", "sessions") {
			if svStr(s, "sessionId") == sid {
				l, _ := svAt(s, "loaded").(bool)
				return l
			}
		}
		return false
	}
	for i := 0; loaded(); i++ {
		if i == 25 {
			t.Fatalf("node B still hosts session %s after it lost the lease", sid)
		}
		time.Sleep(200 * time.Millisecond) // polled gently: list_sessions counts against the rate limit
	}
	// Long enough for B's shell (sleep 2) to have ended and B to have
	// tried to record its result.
	time.Sleep(2500 * time.Millisecond)
	for _, f := range c.events(sid) {
		if strings.Contains(f.raw, "stale-write\\n") {
			t.Errorf("a client received the stale owner's event: %s", f)
		}
	}
	msgs := c.must("get_messages", svM{"id": "c-msgs", "sessionId": sid})
	if strings.Contains(msgs.raw, "stale-write\\n") {
		t.Errorf("the new owner's conversation holds the stale owner's tool result: %s", e2eClip(msgs.raw, 2000))
	}
	clCheckSeqs(t, "client of C", clSeqs(c, sid))
	// The client of B still watches the session, now from the stream: it
	// sees what the new owner does, and no seq twice.
	a.must("set_session_name", svM{"id": "rename", "sessionId": sid, "name": "renamed on the new owner"})
	onB.waitEvent(sid, "session_info_changed")
	c.waitEvent(sid, "session_info_changed")
	clCheckSeqs(t, "client of B", clSeqs(onB, sid))
	for _, f := range onB.events(sid) {
		if strings.Contains(f.raw, "stale-write\\n") {
			t.Errorf("B's client received the stale owner's event: %s", f)
		}
	}
}

// clRESTConv starts a cluster and creates over REST, through node via, a
// conversation whose home is B, with its event stream open through C.
func clRESTConv(t *testing.T, via string) (nodes clNodes, id, sid string, st *rsStream) {
	t.Helper()
	// These tests check where the conversation lives, and no node dies
	// in them: a lease long enough that a busy machine's stalled renewal
	// cannot hand the conversation to another node halfway through.
	nodes = clStart(t, e2eNewEnv(t, e2eOpts{}), "--cluster-lease-ttl", "10s")
	id = clSessionOn("B", "A", "B", "C")
	sid = rsOK(t, nodes[via], "PUT", rsConvPath(id), map[string]any{}).str("session_id")
	st = rsOpen(t, nodes["C"], rsConvPath(id)+"/events?session_id="+sid)
	st.waitType(0, "connected")
	return nodes, id, sid, st
}

// clRESTStep posts content as the user's through A, steps the
// conversation through C, and waits on st for the step's
// generation_complete; from is where st stood before the step.
func clRESTStep(t *testing.T, nodes clNodes, id, sid string, st *rsStream, content string) (from int, done rsEvent) {
	t.Helper()
	rsOK(t, nodes["A"], "POST", rsConvPath(id), map[string]any{"role": "user", "content": content})
	from = st.mark()
	rsOK(t, nodes["C"], "POST", rsConvPath(id)+"/step", map[string]any{"session_id": sid})
	_, done = st.waitType(from, "generation_complete")
	return from, done
}

// The faces that look a session up directly work on every node: a REST
// client's reads, steps and event stream through nodes A and C, and a
// per-session WebSocket through A, for a conversation node B runs (the
// request is passed on to B).
func TestClusterRESTAndSessionWSOnAnyNode(t *testing.T) {
	t.Parallel()
	nodes, id, sid, st := clRESTConv(t, "B")
	if got := rsOK(t, nodes["A"], "GET", rsConvPath(id), nil); !strings.Contains(got.body, id) {
		t.Fatalf("GET through A: %s", got)
	}
	ws := swConnect(t, nodes["A"], swSchema(t, nodes["A"]), id, swDial{})
	ws.subscribe(id, nil)
	wsFrom := ws.mark()

	from, done := clRESTStep(t, nodes, id, sid, st, "hello cluster")
	if msg, _ := done.m["message"].(map[string]any); !strings.Contains(fmt.Sprint(msg["content"]), "You said: hello cluster") {
		t.Fatalf("generation_complete through C = %s", done.raw)
	}
	st.waitType(from, "run_ended")
	ws.waitFor(wsFrom, "the run's end on the per-session WebSocket through A", swIsState("completed"))
	clWantHome(t, nodes, "B")
}

// By default a session lives on the node that created it: a client of A
// creates and prompts with no hop, and a client of C watches it.
func TestClusterCreatesOnTheNodeAsked(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	nodes := clStartWith(t, e, clABC)
	const sid = "made-on-a"
	a := clCreate(nodes, "A", sid) // with an id: pi-server announces it (Expect) before the create runs
	c := clFollow(nodes, "C", sid)
	svPrompt(a, sid, "hello from A")
	end := c.waitEvent(sid, "agent_end")
	if !strings.Contains(end.raw, "You said: hello from A") {
		t.Errorf("agent_end through C: %s", end)
	}
	if st := clStatus(t, nodes["A"]); st.Leases != 1 || st.Forwarded != 0 {
		t.Errorf("node A: %+v, want the session's lease and nothing forwarded", st)
	}
}

// A conversation created over REST through a node that is not its home
// lives on its home; the session_id handle the create answered with works
// through any node.
func TestClusterRESTCreateThroughAnotherNode(t *testing.T) {
	t.Parallel()
	nodes, id, sid, st := clRESTConv(t, "A")
	if _, done := clRESTStep(t, nodes, id, sid, st, "created off home"); !strings.Contains(done.raw, "You said: created off home") {
		t.Fatalf("generation_complete through C = %s", done.raw)
	}
	clWantHome(t, nodes, "B")
}

// The journal's fingerprint key (KV bucket AGENTD_KEYS) outlives a kill -9
// of the whole cluster, here one node with the NATS server inside it: a
// keyed command repeated after the restart is replayed, and its key with
// another payload is refused as before. (A key made anew at the restart
// would take the repeat for another request under the same key.)
func TestClusterFingerprintKeyAfterKill9(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStart(t, e, clNodeArgs(e, "A", "--cluster", "embedded", "--cluster-listen", clustertest.FreeAddr(t), "--cluster-lease-ttl", "30s")...)
	a := s.dial("a")
	svCreate(a, "keyed")
	named := svM{"id": "n1", "type": "set_session_name", "sessionId": "keyed", "name": "before the crash", "idempotencyKey": "name-key"}
	first := a.ok(named)

	s.kill9()
	s = s.restart()
	b := s.dial("b")
	// The lease the killed process held names this node: the restarted
	// one takes the session back at once, with its journal, rather than
	// refuse its commands until that lease runs out. A lease of 30 s
	// makes a wait for it show.
	svWantOK(t, b.call(svM{"id": "state", "type": "get_state", "sessionId": "keyed"}))
	named["id"] = "n2"
	again := b.call(named)
	if r, _ := again.m["replayed"].(bool); !r {
		t.Errorf("the keyed command repeated after kill -9: %s, want it replayed (first answer %s)", again, first)
	}
	other := b.call(svM{"id": "n3", "type": "set_session_name", "sessionId": "keyed", "name": "another name", "idempotencyKey": "name-key"})
	svWantErrPrefix(t, other, "Conflicting idempotencyKey 'name-key'")
}
