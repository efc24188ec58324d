package main

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// rsConvPath is the REST path of conversation id.
func rsConvPath(id string) string { return "/api/v2/conversations/" + id }

// rsSeq is an event's seq, from its id line.
func rsSeq(t *testing.T, e rsEvent) uint64 {
	t.Helper()
	seq, _, _ := strings.Cut(e.id, ".") // "<seq>.<part>" when an event is several frames
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		t.Fatalf("an event without a numeric id line: id=%q %s", e.id, e.raw)
	}
	return n
}

// rsWantInOrder checks that the events from index from are in seq order
// with none twice. Pings and the snapshot repeat the seq they are at, and
// one layer event may be several frames of one seq (message_added and
// generation_complete).
func rsWantInOrder(t *testing.T, st *rsStream, from int) {
	t.Helper()
	var last uint64
	seen := map[string]bool{}
	for _, e := range st.snapshot()[from:] {
		switch e.typ() {
		case "ping", "connected", "resync":
			continue
		}
		n := rsSeq(t, e)
		if n < last || seen[e.id+" "+e.raw] {
			t.Errorf("event %s at seq %d after %d: duplicated or out of order\n%s", e.typ(), n, last, st.dump(from))
			return
		}
		last = n
		seen[e.id+" "+e.raw] = true
	}
}

// TestRESTEndToEnd drives the conversation API of one agentd serve
// process over real HTTP with an SSE reader, against the wire-level model
// mock: a conversation made over REST is a session of every face, a tool
// call is confirmed over REST while a session-WebSocket client sees the
// question asked and the run resume, and after kill -9 and a restart on the
// same data dir the conversation, its event cursor and the confirmation
// that was pending at the kill are all there, and the run goes on.
func TestRESTEndToEnd(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStart(t, e, "--policy", e.writePolicy(`{"rules":[{"tool":"bash","action":"ask"}]}`))
	const id = "rest-e2e"

	// Create, post, step, and read the run on the stream to its end.
	cr := rsOK(t, s, "PUT", rsConvPath(id), map[string]any{})
	sid := cr.str("session_id")
	if cr.str("conversation_id") != id || sid == "" {
		t.Fatalf("PUT: %s", cr)
	}
	st := rsOpen(t, s, rsConvPath(id)+"/events?session_id="+sid)
	if _, c := st.waitType(0, "connected"); c.str("session_id") != sid {
		t.Fatalf("connected = %s", c.raw)
	}
	rsOK(t, s, "POST", rsConvPath(id), map[string]any{"role": "user", "content": "hello rest"})
	from := st.mark()
	rsOK(t, s, "POST", rsConvPath(id)+"/step", map[string]any{"session_id": sid})
	st.waitType(from, "generation_started")
	_, done := st.waitType(from, "generation_complete")
	if msg, _ := done.m["message"].(map[string]any); !strings.Contains(fmt.Sprint(msg["content"]), "You said: hello rest") {
		t.Fatalf("generation_complete = %s", done.raw)
	}
	st.waitType(from, "run_ended")

	// The same session on the other faces.
	if ids := rsPiSessions(t, s, ""); !slices.Contains(ids, id) {
		t.Fatalf("pi-server's list_sessions = %v, want %s in it", ids, id)
	}
	schema := swSchema(t, s)
	ws := swConnect(t, s, schema, id, swDial{})
	ws.subscribe(id, nil)

	// A tool call waits for a person: confirmed over REST, seen asked and
	// answered on the session WebSocket.
	wsFrom, from := ws.mark(), st.mark()
	rsOK(t, s, "POST", rsConvPath(id), map[string]any{"role": "user", "content": "CMD:echo approved-over-rest"})
	rsOK(t, s, "POST", rsConvPath(id)+"/step", map[string]any{"session_id": sid})
	_, pend := st.waitType(from, "tool_pending")
	toolID := pend.str("tool_id")
	if tu, _ := pend.m["tooluse"].(map[string]any); tu["tool"] != "bash" || !strings.Contains(fmt.Sprint(tu["content"]), "approved-over-rest") {
		t.Fatalf("tool_pending = %s", pend.raw)
	}
	qi, q := ws.waitType(wsFrom, "input_required")
	p, _ := q.m["prompt"].(map[string]any)
	if p["kind"] != "approval" {
		t.Fatalf("input_required = %s", q.raw)
	}
	if r := rsOK(t, s, "POST", rsConvPath(id)+"/tool/confirm", map[string]any{"session_id": sid, "tool_id": toolID, "action": "confirm"}); r.str("message") != "Tool confirmed" {
		t.Fatalf("confirm: %s", r)
	}
	// input_received is the answering client's acknowledgment (the
	// spec's provide_input response); a watcher learns of another face's
	// answer from the run resuming.
	if _, res := ws.waitFor(qi, "running again", swIsState("running")); res.str("old_state") != "suspended" {
		t.Fatalf("after the answer: %s", res.raw)
	}
	_, tc := st.waitType(from, "tool_complete")
	if tc.str("tool_id") != toolID || tc.m["success"] != true {
		t.Fatalf("tool_complete = %s", tc.raw)
	}
	_, done = st.waitFor(from, "the answer after the tool", func(e rsEvent) bool {
		msg, _ := e.m["message"].(map[string]any)
		return e.typ() == "generation_complete" && strings.Contains(fmt.Sprint(msg["content"]), "Tool said: approved-over-rest")
	})
	st.waitType(from, "run_ended")
	rsWantInOrder(t, st, 0)

	// A confirmation pending when the server is killed.
	from = st.mark()
	rsOK(t, s, "POST", rsConvPath(id), map[string]any{"role": "user", "content": "CMD:echo after-the-kill"})
	rsOK(t, s, "POST", rsConvPath(id)+"/step", map[string]any{"session_id": sid})
	_, pend = st.waitType(from, "tool_pending")
	pendingID := pend.str("tool_id")
	lastSeq := rsSeq(t, pend)
	evs := st.snapshot()
	for _, e := range evs {
		if e.typ() != "ping" && e.typ() != "connected" {
			lastSeq = max(lastSeq, rsSeq(t, e))
		}
	}
	ws.stop()
	s.kill9()
	st.waitEnded()

	s2 := s.restart()
	list := rsOK(t, s2, "GET", "/api/v2/conversations", nil)
	found := false
	for _, c := range list.list {
		if c.(map[string]any)["id"] == id {
			found = true
		}
	}
	if !found {
		t.Fatalf("the conversation is not listed after the restart: %s", list)
	}
	conv := rsOK(t, s2, "GET", rsConvPath(id), nil)
	var texts []string
	for _, m := range conv.m["log"].([]any) {
		texts = append(texts, fmt.Sprint(m.(map[string]any)["content"]))
	}
	joined := strings.Join(texts, "\n")
	for _, want := range []string{"hello rest", "You said: hello rest", "CMD:echo approved-over-rest", "Tool said: approved-over-rest", "CMD:echo after-the-kill"} {
		if !strings.Contains(joined, want) {
			t.Errorf("after the restart the conversation lacks %q:\n%s", want, joined)
		}
	}

	// The stream resumes after the last event seen, or says it cannot.
	st2 := rsOpen(t, s2, rsConvPath(id)+"/events", "Last-Event-ID", strconv.FormatUint(lastSeq, 10))
	_, c := st2.waitType(0, "connected")
	pts, _ := c.m["pending_tools"].([]any)
	if len(pts) != 1 || pts[0].(map[string]any)["tool_id"] != pendingID {
		t.Fatalf("after the restart connected = %s, want tool %s pending", c.raw, pendingID)
	}
	if c.m["resumed"] == true {
		t.Logf("the stream resumed after seq %d", lastSeq)
	} else {
		_, rs := st2.waitType(0, "resync")
		t.Logf("the stream could not resume after seq %d: %s", lastSeq, rs.raw)
		if n, _ := rs.m["after"].(float64); uint64(n) != lastSeq {
			t.Errorf("resync = %s, want after %d", rs.raw, lastSeq)
		}
	}
	// Whatever the stream replays is after the cursor.
	for _, e := range st2.snapshot() {
		if e.typ() != "ping" && e.typ() != "connected" && e.typ() != "resync" && rsSeq(t, e) <= lastSeq {
			t.Errorf("the resumed stream repeats %s at seq %s (cursor %d)", e.typ(), e.id, lastSeq)
		}
	}

	// The pending confirmation is pending on the session WebSocket too,
	// and confirming it over REST runs the command.
	ws2 := swConnect(t, s2, swSchema(t, s2), id, swDial{})
	ws2.subscribe(id, nil)
	wsFrom, from = ws2.mark(), st2.mark()
	if r := rsOK(t, s2, "POST", rsConvPath(id)+"/tool/confirm", map[string]any{"tool_id": pendingID, "action": "confirm"}); r.str("message") != "Tool confirmed" {
		t.Fatalf("confirm after the restart: %s", r)
	}
	ws2.waitFor(wsFrom, "running again", swIsState("running"))
	st2.waitFor(from, "the tool's result", func(e rsEvent) bool {
		msg, _ := e.m["message"].(map[string]any)
		return e.typ() == "message_added" && strings.Contains(fmt.Sprint(msg["content"]), "after-the-kill")
	})
	st2.waitFor(from, "the answer after the tool", func(e rsEvent) bool {
		msg, _ := e.m["message"].(map[string]any)
		return e.typ() == "generation_complete" && strings.Contains(fmt.Sprint(msg["content"]), "Tool said: after-the-kill")
	})
	rsWantInOrder(t, st2, 0)
	if !svMockSaw(e, "after-the-kill") {
		t.Errorf("the model never saw the command's output")
	}
}

// TestRESTSIGTERM: a server asked to stop ends its event streams
// cleanly (the body ends; no cut connection) and exits 0.
func TestRESTSIGTERM(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStart(t, e)
	const id = "rest-term"
	sid := rsOK(t, s, "PUT", rsConvPath(id), map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi there"}}}).str("session_id")
	st := rsOpen(t, s, rsConvPath(id)+"/events?session_id="+sid)
	st.waitType(0, "connected")
	rsOK(t, s, "POST", rsConvPath(id)+"/step", map[string]any{"session_id": sid})
	_, end := st.waitType(0, "run_ended")
	s.sigterm()
	if err := st.waitEnded(); err != nil {
		t.Errorf("the stream ended with %v, want a clean end", err)
	}
	if code := s.waitExit(); code != 0 {
		t.Errorf("exit code %d after SIGTERM\nstderr:\n%s", code, s.stderrTail(3000))
	}
	// The conversation is there for the next server.
	s2 := s.restart()
	if conv := rsOK(t, s2, "GET", rsConvPath(id), nil); len(conv.m["log"].([]any)) != 2 {
		t.Errorf("after SIGTERM and a restart: %s", conv)
	}
	// A client that saw the run to its end reconnects: nothing is
	// replayed twice; a cursor the new server cannot serve gets resync.
	cursor := rsSeq(t, end)
	st2 := rsOpen(t, s2, rsConvPath(id)+"/events", "Last-Event-ID", strconv.FormatUint(cursor, 10))
	_, c := st2.waitType(0, "connected")
	if c.m["resumed"] != true {
		if _, rs := st2.waitType(0, "resync"); uint64(rs.m["after"].(float64)) != cursor {
			t.Errorf("resync = %s, want after %d", rs.raw, cursor)
		}
	}
	st2.waitType(0, "ping")
	for _, e := range st2.snapshot() {
		if e.typ() != "ping" && e.typ() != "connected" && e.typ() != "resync" && rsSeq(t, e) <= cursor {
			t.Errorf("the stream repeats %s at seq %s (cursor %d)", e.typ(), e.id, cursor)
		}
	}
}

// rsPiSessions lists pi-server's sessions over its WebSocket on "/", for
// a client presenting tok ("" for none).
func rsPiSessions(t *testing.T, s *svServer, tok string) []string {
	t.Helper()
	o := svDialOpts{name: "pi"}
	if tok != "" {
		o.header = http.Header{"Authorization": {"Bearer " + tok}}
	}
	c := s.dialRaw(t, o)
	c.ready()
	defer c.close()
	// Command ids are the server's: a reused one is a replay of the first
	// answer, whoever asked.
	var ids []string
	for _, si := range svArr(c.ok(svM{"id": fmt.Sprintf("rs-list-%d", swIDs.Add(1)), "type": "list_sessions"}).m, "data", "sessions") {
		ids = append(ids, svStr(si, "sessionId"))
	}
	return ids
}

// TestRESTJWT: with JWT keys configured, a conversation a subject creates
// over REST is that subject's on every face, and another subject finds
// it nowhere; a session made over pi-server is its owner's over REST.
func TestRESTJWT(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	k := swNewKeys(t, e.root)
	s := svStart(t, e, "--jwt-secret-file", k.secretPath)
	alice := swToken(t, jwt.SigningMethodHS256, k.secret, jwt.MapClaims{"sub": "alice"})
	bob := swToken(t, jwt.SigningMethodHS256, k.secret, jwt.MapClaims{"sub": "bob"})
	asAlice, asBob := []string{"Authorization", "Bearer " + alice}, []string{"Authorization", "Bearer " + bob}

	if r := rsDo(t, s, "PUT", rsConvPath("mine"), map[string]any{}); r.status != http.StatusUnauthorized {
		t.Fatalf("PUT without a token: %d %s", r.status, r)
	}
	rsOK(t, s, "PUT", rsConvPath("alices"), map[string]any{"messages": []any{map[string]any{"role": "user", "content": "secret"}}}, asAlice...)
	piID, _ := swSession(t, s, svDialOpts{header: http.Header{"Authorization": {"Bearer " + bob}}})

	if r := rsDo(t, s, "GET", rsConvPath("alices"), nil, asBob...); r.status != http.StatusNotFound || r.str("error") != "Conversation not found: alices" {
		t.Errorf("bob GETs alice's: %d %s", r.status, r)
	}
	if r := rsDo(t, s, "GET", rsConvPath(piID), nil, asAlice...); r.status != http.StatusNotFound {
		t.Errorf("alice GETs bob's pi-server session: %d %s", r.status, r)
	}
	rsOK(t, s, "GET", rsConvPath(piID), nil, asBob...)
	for who, want := range map[string][]string{alice: {"alices"}, bob: {piID}} {
		var ids []string
		for _, c := range rsOK(t, s, "GET", "/api/v2/conversations", nil, "Authorization", "Bearer "+who).list {
			ids = append(ids, c.(map[string]any)["id"].(string))
		}
		if !slices.Equal(ids, want) {
			t.Errorf("REST list = %v, want %v", ids, want)
		}
		if ids := rsPiSessions(t, s, who); !slices.Equal(ids, want) {
			t.Errorf("pi-server list_sessions = %v, want %v", ids, want)
		}
	}
	// A command id is its subject's: bob reusing alice's id gets his own
	// answer, not a replay of hers, and under the id he sent.
	listAs := func(tok string) svFrame {
		c := s.dialRaw(t, svDialOpts{name: "pi", header: http.Header{"Authorization": {"Bearer " + tok}}})
		c.ready()
		defer c.close()
		return c.ok(svM{"id": "same-id", "type": "list_sessions"})
	}
	listAs(alice)
	if r := listAs(bob); r.m["replayed"] == true || r.m["id"] != "same-id" || !strings.Contains(r.raw, piID) || strings.Contains(r.raw, "alices") {
		t.Errorf("bob's list_sessions under alice's command id: %s", r.raw)
	}
	schema := swSchema(t, s)
	ws := swConnect(t, s, schema, "alices", swDial{token: alice})
	ws.subscribe("alices", nil)
	other := swConnect(t, s, schema, "alices", swDial{token: bob})
	if _, m := other.waitType(0, "error"); m.str("code") != "session_not_found" {
		t.Errorf("bob on alice's over the session WebSocket: %s", m.raw)
	}
	other.waitClosed()
	// The events stream takes the JWT as ?token= (EventSource).
	st := rsOpen(t, s, rsConvPath("alices")+"/events?token="+alice)
	st.waitType(0, "connected")
	if r := rsDo(t, s, "GET", rsConvPath("alices")+"/events?token="+bob, nil); r.status != http.StatusNotFound {
		t.Errorf("bob's event stream of alice's: %d %s", r.status, r)
	}

	// Ownership outlives the process: after kill -9 the conversations are
	// known from the index, not loaded, and still their owners' alone.
	ws.stop()
	s.kill9()
	st.waitEnded()
	s2 := s.restart()
	if r := rsDo(t, s2, "GET", rsConvPath("alices"), nil, asBob...); r.status != http.StatusNotFound {
		t.Errorf("after a restart bob GETs alice's: %d %s", r.status, r)
	}
	for who, want := range map[string][]string{alice: {"alices"}, bob: {piID}} {
		var ids []string
		for _, c := range rsOK(t, s2, "GET", "/api/v2/conversations", nil, "Authorization", "Bearer "+who).list {
			ids = append(ids, c.(map[string]any)["id"].(string))
		}
		if !slices.Equal(ids, want) {
			t.Errorf("after a restart the REST list = %v, want %v", ids, want)
		}
	}
	if c := rsOK(t, s2, "GET", rsConvPath("alices"), nil, asAlice...); len(c.m["log"].([]any)) != 1 {
		t.Errorf("after a restart alice's conversation: %s", c)
	}
}
