package convapi

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm/faux"
)

// ids are the id and type of every event but pings and the snapshot.
func ids(evs []event) []string {
	var out []string
	for _, e := range evs {
		if e.typ() != "ping" && e.typ() != "connected" && e.typ() != "resync" {
			out = append(out, e.id+":"+e.typ())
		}
	}
	return out
}

// A client whose connection drops mid-stream reconnects with the last id
// it saw and gets every event it missed, in order, once.
func TestResumeByLastEventID(t *testing.T) {
	for _, how := range []string{"Last-Event-ID", "after"} {
		t.Run(how, func(t *testing.T) {
			fx := newFixture(t, fixtureOptions{chunkDelay: 2 * time.Millisecond})
			sid := fx.create("res", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "go"}}})
			whole := fx.open("/api/v2/conversations/res/events")
			whole.next("connected")
			a := fx.open("/api/v2/conversations/res/events?session_id=" + sid)
			a.next("connected")
			fx.faux.Push(faux.Response{Text: strings.Repeat("tok ", 60)})
			fx.ok("POST", "/api/v2/conversations/res/step", map[string]any{"session_id": sid})
			for range 10 {
				a.next("generation_progress")
			}
			a.close()
			got := a.snapshot()
			last := got[len(got)-1].id
			var b *stream
			if how == "after" {
				b = fx.open("/api/v2/conversations/res/events?session_id=" + sid + "&after=" + last)
			} else {
				b = fx.open("/api/v2/conversations/res/events?session_id="+sid, "Last-Event-ID", last)
			}
			conn := b.next("connected")
			if conn.m["resumed"] != true {
				t.Errorf("connected after a cursor = %s, want resumed", conn.raw)
			}
			// Both read to the run's last event, so neither snapshot is
			// ahead of the other.
			b.next("run_ended")
			whole.next("run_ended")
			want := ids(whole.snapshot())
			joined := append(ids(got), ids(b.snapshot())...)
			if strings.Join(joined, " ") != strings.Join(want, " ") {
				t.Errorf("resumed stream:\n  got  %v\n  want %v", joined, want)
			}
		})
	}
}

// A cursor the conversation's log no longer holds gets the snapshot and a
// resync event, never silence.
func TestResumeCursorTooOld(t *testing.T) {
	fx := newFixture(t, fixtureOptions{logSize: 16})
	sid := fx.create("old", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "go"}}})
	fx.faux.Push(faux.Response{Text: strings.Repeat("tok ", 60)})
	w := fx.open("/api/v2/conversations/old/events?session_id=" + sid)
	fx.ok("POST", "/api/v2/conversations/old/step", map[string]any{"session_id": sid})
	w.next("generation_complete")
	for _, cursor := range []string{"1", "999999"} {
		b := fx.open("/api/v2/conversations/old/events?session_id="+sid, "Last-Event-ID", cursor)
		conn := b.next("connected")
		rs := b.next("resync")
		if conn.m["resumed"] == true || rs.m["after"] != mustFloat(cursor) || rs.m["seq"] != conn.m["seq"] || rs.id != conn.id {
			t.Errorf("cursor %s: connected %s, resync %s", cursor, conn.raw, rs.raw)
		}
	}
	wantErr(t, fx.do("GET", "/api/v2/conversations/old/events", nil, "Last-Event-ID", "x1"), http.StatusBadRequest,
		"Last-Event-ID must be the id of the last event received: a non-negative integer (its seq), or a seq and a part from 1 to 9 (\"7.1\")")
	wantErr(t, fx.do("GET", "/api/v2/conversations/old/events?after=-1", nil), http.StatusBadRequest,
		"after must be the id of the last event received: a non-negative integer (its seq), or a seq and a part from 1 to 9 (\"7.1\")")
}

func mustFloat(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

// After a restart a client resumes from the last seq it saw, and a tool
// call that was waiting for a person waits again and runs once confirmed.
func TestRestartKeepsCursorAndPendingConfirmation(t *testing.T) {
	root := t.TempDir()
	fx := newFixture(t, fixtureOptions{root: root})
	sid := fx.create("rs", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "write it"}}})
	st := fx.open("/api/v2/conversations/rs/events?session_id=" + sid)
	fx.faux.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "k1", Name: "write", Args: `{"path":"after-restart.txt","content":"kept"}`}}})
	fx.ok("POST", "/api/v2/conversations/rs/step", map[string]any{"session_id": sid})
	pend := st.next("tool_pending")
	fx.stop()
	st.waitEnded()
	lastID := st.snapshot()[len(st.snapshot())-1].id

	fx2 := newFixture(t, fixtureOptions{root: root})
	fx2.faux.Push(faux.Response{Text: "Written."})
	b := fx2.open("/api/v2/conversations/rs/events", "Last-Event-ID", lastID)
	conn := b.next("connected")
	pts, _ := conn.m["pending_tools"].([]any)
	if len(pts) != 1 || pts[0].(map[string]any)["tool_id"] != pend.str("tool_id") {
		t.Fatalf("after the restart: %s", conn.raw)
	}
	if seq := conn.seq(); seq < pend.seq() {
		t.Errorf("the seq went back: %d after %d", seq, pend.seq())
	}
	fx2.ok("POST", "/api/v2/conversations/rs/tool/confirm", map[string]any{"tool_id": pend.str("tool_id"), "action": "confirm"})
	b.next("tool_complete")
	b.next("generation_complete")
	for _, e := range b.snapshot() {
		if e.typ() != "connected" && e.typ() != "ping" && e.seq() <= pend.seq() {
			t.Errorf("an event at or before the cursor came again: %s %s", e.id, e.raw)
		}
	}
	if got := fx2.ok("GET", "/api/v2/conversations/rs", nil); !strings.Contains(string(got.body), "Written.") {
		t.Errorf("the run did not continue: %s", got)
	}
}

// An EventSource trusts every id: a stream that resumes from an old
// cursor stands at that cursor until the replayed events move it, so a
// client cut right after the snapshot or a heartbeat comes back asking
// for the same events, never for ones past what it was shown.
func TestResumeIDsNeverGoBack(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	sid := fx.create("back", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "go"}}})
	w := fx.open("/api/v2/conversations/back/events?session_id=" + sid)
	fx.faux.Push(faux.Response{Text: strings.Repeat("tok ", 20)})
	fx.ok("POST", "/api/v2/conversations/back/step", map[string]any{"session_id": sid})
	w.next("run_ended")
	var cursor string
	for _, e := range w.snapshot() {
		if e.typ() != "connected" && e.typ() != "ping" && e.id != "" {
			cursor = e.id // the first event of the run
			break
		}
	}
	b := fx.open("/api/v2/conversations/back/events?session_id="+sid, "Last-Event-ID", cursor)
	conn := b.next("connected")
	ping := b.next("ping")
	b.next("run_ended")
	if conn.m["resumed"] != true || conn.id != cursor || ping.id != cursor {
		t.Errorf("cursor %s: connected id %s (%s), ping id %s; want both at the cursor", cursor, conn.id, conn.raw, ping.id)
	}
	var prev eventID
	for _, e := range b.snapshot() {
		if e.id == "" {
			continue
		}
		n, ok := parseEventID(e.id)
		if !ok || n.before(prev) {
			t.Fatalf("the stream's ids run backwards: id %s after %s\n%s", e.id, prev, b.dump())
		}
		prev = n
	}
	if want := ids(w.snapshot()); len(ids(b.snapshot())) == 0 || !strings.HasSuffix(strings.Join(want, " "), strings.Join(ids(b.snapshot()), " ")) {
		t.Errorf("replay after %s:\n  got  %v\n  want the tail of %v", cursor, ids(b.snapshot()), want)
	}
}
