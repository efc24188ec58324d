package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// SIGTERM races, on an external NATS with the default 10 s lease: the
// owner drains while clients of the other nodes keep sending.

// Node B, the owner, gets SIGTERM while a run is in progress (its tool
// waits on a FIFO). Prompts sent then, from clients of A and of C, reach
// B while it drains: B holds them instead of queueing them behind the
// run, and once the run has ended and the session is handed over they
// run on the next owner, each once, in the order sent. Before, a prompt
// that reached B just after the run ended could start a run there that
// the unload cut off ("Command interrupted").
func TestClusterDrainHoldsPromptsForTheNextOwner(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	_, nodes := clStartExternal(t, e, "--shutdown-timeout", "60s")
	sid := clSessionOn("B", "A", "B", "C")
	release := clFIFO(t, e)

	a := clCreate(nodes, "A", sid)
	c := clFollow(nodes, "C", sid)
	a.send(svM{"id": "p1", "type": "prompt", "sessionId": sid,
		"message": "CMD:echo p1 >> run.log; cat release; echo p1-done"})
	c.waitEvent(sid, "tool_execution_start")

	nodes["B"].sigterm()
	term := time.Now()
	svWaitUntil(t, "node B hands its sessions over", func() bool {
		return strings.Contains(nodes["B"].stderr.String(), "cluster: handing sessions over")
	})
	// Two prompts from two nodes, sent while B still owns the session
	// and runs p1: both reach B, which holds them.
	a.send(svM{"id": "p2", "type": "prompt", "sessionId": sid, "message": "CMD:echo p2 >> run.log; echo p2-ran"})
	svWaitUntil(t, "B holds p2", func() bool {
		return strings.Contains(nodes["B"].stderr.String(), "holding a command for the session's next node") &&
			strings.Contains(nodes["B"].stderr.String(), "id=p2")
	})
	c2 := nodes["C"].dial("c2")
	c2.send(svM{"id": "p3", "type": "prompt", "sessionId": sid, "message": "CMD:echo p3 >> run.log; echo p3-ran"})
	svWaitUntil(t, "B holds p3", func() bool { return strings.Contains(nodes["B"].stderr.String(), "id=p3") })

	release()

	svWantOK(t, a.response("p1"))
	for _, r := range []struct {
		conn *svConn
		id   string
	}{{a, "p2"}, {c2, "p3"}} {
		resp := r.conn.response(r.id)
		svWantOK(t, resp)
		if out := svStr(resp.m, "data", "outcome"); out != "completed" {
			t.Errorf("%s: outcome %q, want completed: %s", r.id, out, resp)
		}
		var phases []string
		for _, f := range r.conn.lifecycle(r.id) {
			phases = append(phases, f.typ())
		}
		if got, want := strings.Join(phases, " "), "command_accepted command_started command_finished"; got != want {
			t.Errorf("lifecycle of %s, held and passed on: %s, want %s", r.id, got, want)
		}
	}
	answered := time.Since(term)
	if code := nodes["B"].waitExit(); code != 0 {
		t.Errorf("node B exited with %d after SIGTERM\n%s", code, nodes["B"].stderrTail(3000))
	}
	// Each ran once, p1 on B first; p2 and p3 on the next owner, in the
	// order B got them.
	if got := strings.Join(svLines(t, filepath.Join(e.cwd, "run.log")), ","); got != "p1,p2,p3" {
		t.Errorf("run.log reads %q, want p1,p2,p3: each prompt once, in order", got)
	}
	for _, want := range []string{"p2-ran", "p3-ran"} {
		c.waitFor(0, "the watcher sees "+want, func(f svFrame) bool {
			return f.isEvent(sid, "tool_execution_end") && strings.Contains(f.raw, want)
		})
	}
	clCheckSeqs(t, "client of C", clSeqs(c, sid))
	if owners := clStatus(t, nodes["A"]).Leases + clStatus(t, nodes["C"]).Leases; owners != 1 {
		t.Errorf("after the drain A and C hold %d leases, want 1", owners)
	}
	msgs := c.must("get_messages", svM{"id": "c-msgs", "sessionId": sid})
	for _, want := range []string{"p1-done", "p2-ran", "p3-ran"} {
		if !strings.Contains(msgs.raw, want) {
			t.Errorf("the conversation lacks %q: %s", want, e2eClip(msgs.raw, 2000))
		}
	}
	t.Logf("fault table: SIGTERM of the owner with prompts arriving mid-drain, 3 runs, lost 0, duplicated 0, re-run 0, interrupted 0; held prompts answered %v after SIGTERM", answered.Round(100*time.Millisecond))
}

// Node B gets SIGTERM while its run waits for an approval. The drain
// does not wait for the person: the prompt answers interrupted (as after
// a crash, not with the outcome cancelled that closing the session gives
// the run), the approval is pending again on the next owner under the
// same request id, and an answer sent from another node's client runs
// the tool there, once.
func TestClusterDrainWithAPendingApproval(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	_, nodes := clStartExternal(t, e, "--shutdown-timeout", "60s",
		"--policy", e.writePolicy(`{"rules":[{"tool":"bash","action":"ask"}]}`))
	sid := clSessionOn("B", "A", "B", "C")

	a := clCreate(nodes, "A", sid)
	c := clFollow(nodes, "C", sid)
	a.send(svM{"id": "p1", "type": "prompt", "sessionId": sid, "message": "CMD:echo approved >> run.log; echo ran-after-handover"})
	req := c.waitEvent(sid, "extension_ui_request")
	rid := svStr(req.m, "event", "requestId")

	nodes["B"].sigterm()
	term := time.Now()
	p1 := a.response("p1")
	if ok, _ := p1.m["success"].(bool); ok || !strings.Contains(strings.ToLower(svStr(p1.m, "error")), "interrupted") {
		t.Errorf("the prompt whose run waited for an approval at SIGTERM: %s, want an interrupted failure", p1)
	}
	if code := nodes["B"].waitExit(); code != 0 {
		t.Errorf("node B exited with %d after SIGTERM\n%s", code, nodes["B"].stderrTail(3000))
	}
	handed := time.Since(term)
	// Neither watcher was told the run was cancelled: the run goes on
	// on the next owner once answered.
	for _, f := range c.events(sid) {
		if strings.Contains(f.raw, `"cancelled"`) {
			t.Errorf("the watcher was told of a cancellation: %s", f)
		}
	}
	approver := nodes["A"].dial("approver")
	svWantOK(t, approver.call(svM{"id": "ans", "type": "extension_ui_response", "sessionId": sid, "requestId": rid,
		"response": svM{"method": "select", "value": "Allow"}}))
	te := c.waitEvent(sid, "tool_execution_end")
	if !strings.Contains(te.raw, "ran-after-handover") {
		t.Errorf("the approved tool did not run on the next owner: %s", te)
	}
	c.waitEvent(sid, "agent_end")
	if got := svLines(t, filepath.Join(e.cwd, "run.log")); !slices.Equal(got, []string{"approved"}) {
		t.Errorf("run.log reads %q, want the tool run once", got)
	}
	clCheckSeqs(t, "client of C", clSeqs(c, sid))
	if owners := clStatus(t, nodes["A"]).Leases + clStatus(t, nodes["C"]).Leases; owners != 1 {
		t.Errorf("after the drain A and C hold %d leases, want 1", owners)
	}
	// The outcome is kept: the prompt replayed by id answers interrupted
	// again, and does not run.
	again := a.call(svM{"id": "p1", "type": "prompt", "sessionId": sid, "message": "CMD:echo approved >> run.log; echo ran-after-handover"})
	if ok, _ := again.m["success"].(bool); ok || !strings.Contains(strings.ToLower(svStr(again.m, "error")), "interrupted") {
		t.Errorf("p1 replayed after the handover: %s, want its interrupted outcome", again)
	}
	t.Logf("fault table: SIGTERM of the owner with a run waiting for an approval, 1 run, lost 0, duplicated 0, re-run 0; prompt answered interrupted, node B gone %v after SIGTERM, approval answered on the next owner", handed.Round(100*time.Millisecond))
}
