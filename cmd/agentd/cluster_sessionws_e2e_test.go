package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A per-session WebSocket client of node A watches a session node B runs
// (A serves it from the cluster's stream). B is killed (-9) mid-run and
// the client leaves right then (its connection would stay open:
// TestClusterSessionWSKeepsItsConnectionWhenTheOwnerGoes); it reconnects
// to A at once, subscribed with after_seq, and gets every state change
// after its cursor once, across the change of owner and the seq's jump
// there, up to the interrupted run's end, as a pi-server client of C fed
// from the stream sees them. The tool that was running is not run again.
func TestClusterSessionWSResumesAcrossAKill9(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	const ttl = 10 * time.Second
	_, nodes := clStartExternal(t, e)
	sid := clSessionOn("B", "A", "B", "C")

	clCreate(nodes, "B", sid)
	c := clFollow(nodes, "C", sid)
	schema := swSchema(t, nodes["A"])
	ws := swConnect(t, nodes["A"], schema, sid, swDial{})
	ws.subscribe(sid, nil)
	c.send(svM{"id": "p1", "type": "prompt", "sessionId": sid, "message": "CMD:echo start >> run.log; sleep 120"})
	ws.waitFor(0, "the run starting, through A", swIsState("running"))
	svWaitUntil(t, "the tool runs on B", func() bool { return clStarted(e) })

	nodes["B"].kill9()
	killed := time.Now()
	ws.stop()
	var cursor uint64
	for _, m := range ws.all() {
		cursor = max(cursor, m.seq())
	}
	if cursor == 0 {
		t.Fatalf("no message with a seq before the kill:\n%s", ws.dump(0))
	}

	// At once: A serves the connection while the session has no owner.
	ws2 := swConnect(t, nodes["A"], schema, sid, swDial{wait: 3 * ttl})
	reopened := time.Since(killed)
	sub := ws2.subscribe(sid, map[string]any{"after_seq": cursor})
	if sub.m["resumed"] != true {
		t.Errorf("the per-session WebSocket reopened through A did not resume after %d: %s", cursor, sub.raw)
	}
	_, done := ws2.waitFor(0, "the interrupted run's end", func(m swMsg) bool { return m.typ() == "completed" })
	ended := time.Since(killed)

	// What the stream holds of the run's end, as C's client saw it.
	idle := func(f svFrame) bool {
		return f.isEvent(sid, "state_changed") && svStr(f.m, "event", "state") == "idle"
	}
	c.waitFor(0, "the interrupted run's end on C", idle)
	var truth []uint64
	for _, f := range c.events(sid) {
		if n, _ := svNum(f.m, "seq"); f.isEvent(sid, "state_changed") && uint64(n) > cursor {
			truth = append(truth, uint64(n))
		}
	}
	if len(truth) == 0 {
		t.Fatalf("C's client saw no state change after %d:\n%s", cursor, c.tail(10))
	}
	var got []uint64
	seen := map[uint64]int{}
	for _, m := range ws2.all() {
		switch m.typ() {
		case "status_change":
			got = append(got, m.seq())
			seen[m.seq()]++
			fallthrough
		case "completed", "error", "input_required":
			if m.seq() <= cursor {
				t.Errorf("the resumed connection repeats seq %d (cursor %d): %s", m.seq(), cursor, e2eClip(m.raw, 200))
			}
		}
	}
	lost, dup := clTally(truth, got)
	if lost != 0 || dup != 0 {
		t.Errorf("state changes after %d: %d of %v lost, %d duplicated (got %v)", cursor, lost, truth, dup, got)
	}
	if done.seq() != truth[len(truth)-1] {
		t.Errorf("completed came with seq %d, want the run's end %d: %s", done.seq(), truth[len(truth)-1], done.raw)
	}
	if got := strings.Join(svLines(t, filepath.Join(e.cwd, "run.log")), ","); got != "start" {
		t.Errorf("run.log reads %q: the interrupted tool ran again", got)
	}
	t.Logf("fault table: kill -9 of the owner, per-session WebSocket client of another node: 1 run, %d state changes after the cursor, lost %d, duplicated %d, re-run 0; left at the kill, reopened %v and saw the run end %v after the kill (lease %v)",
		len(truth), lost, dup, reopened.Round(100*time.Millisecond), ended.Round(100*time.Millisecond), ttl)
}
