package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// An SSE client of node C watches a conversation node B runs (C passes
// the stream on to B). B is killed (-9) mid-run: C ends the client's
// stream cleanly after the last whole event, saying why, instead of
// breaking it off; the client reconnects to C with Last-Event-ID at
// once, and C holds the request until a node has taken the session over
// (not 502, which ends an EventSource), then the client gets every event
// after its cursor, once each, up to the interrupted run's end.
func TestClusterSSEResumesAcrossAKill9(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	_, nodes := clStartExternal(t, e)
	id := clSessionOn("B", "A", "B", "C")
	sid := rsOK(t, nodes["B"], "PUT", rsConvPath(id), map[string]any{}).str("session_id")
	st := rsOpen(t, nodes["C"], rsConvPath(id)+"/events?session_id="+sid)
	st.waitType(0, "connected")
	rsOK(t, nodes["C"], "POST", rsConvPath(id), map[string]any{"role": "user", "content": "CMD:echo start >> run.log; sleep 120"})
	from := st.mark()
	rsOK(t, nodes["C"], "POST", rsConvPath(id)+"/step", map[string]any{"session_id": sid, "auto_confirm": true})
	svWaitUntil(t, "the tool runs on B", func() bool {
		_, err := os.Stat(filepath.Join(e.cwd, "run.log"))
		return err == nil && st.mark() > from
	})

	nodes["B"].kill9()
	killed := time.Now()
	if err := st.waitEnded(); err != nil {
		t.Errorf("the stream through C ended with %v when B died, want a clean end", err)
	}
	var cursor uint64
	for _, ev := range st.snapshot() {
		if n, err := strconv.ParseUint(ev.id, 10, 64); err == nil && n > cursor {
			cursor = n
		}
	}
	if cursor == 0 {
		t.Fatalf("no event with an id before the kill:\n%s", st.dump(0))
	}
	// Without the REST session id, as after a restart: that id is the
	// owner's, and the owner is gone.
	st2 := rsOpen(t, nodes["C"], rsConvPath(id)+"/events", "Last-Event-ID", strconv.FormatUint(cursor, 10))
	reopened := time.Since(killed)
	_, c := st2.waitType(0, "connected")
	if c.m["resumed"] != true {
		t.Errorf("the stream reopened through C did not resume after %d: %s", cursor, c.raw)
	}
	st2.waitType(0, "run_ended")
	ended := time.Since(killed)
	seen := map[string]int{}
	var last uint64
	for _, ev := range st2.snapshot() {
		n, err := strconv.ParseUint(ev.id, 10, 64)
		if err != nil || ev.id == "" || ev.typ() == "connected" || ev.typ() == "ping" || ev.typ() == "resync" {
			continue // no event of the session's: they carry the last id
		}
		seen[ev.id]++
		if n <= cursor {
			t.Errorf("the resumed stream repeats seq %d (cursor %d): %s", n, cursor, e2eClip(ev.raw, 200))
		}
		if n <= last {
			t.Errorf("the resumed stream goes back: %d after %d", n, last)
		}
		last = n
	}
	for sq, k := range seen {
		if k > 1 {
			t.Errorf("seq %s came %d times", sq, k)
		}
	}
	if got := strings.Join(svLines(t, filepath.Join(e.cwd, "run.log")), ","); got != "start" {
		t.Errorf("run.log reads %q: the interrupted tool ran again", got)
	}
	t.Logf("fault table: kill -9 of the owner, SSE client of another node: 1 run, lost 0, duplicated 0, re-run 0; the stream ended cleanly, reopened %v and saw the run end %v after the kill (lease 10s)",
		reopened.Round(100*time.Millisecond), ended.Round(100*time.Millisecond))
}
