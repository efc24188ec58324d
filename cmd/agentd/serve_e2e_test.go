package main

// Conformance tests of `agentd serve` against the pi-server protocol
// 1.0.0 (/work/shared/specs/pi-server-protocol.md), the wire details
// (docs/pi-server-wire.md) and agentd's serve contract: the built binary
// is driven over WebSocket and stdio (serve_harness_test.go) against the
// wire-level model mock of rpc_e2e_test.go. Every test starts its own
// server(s) and runs in parallel; assertions are on exact frames and
// strings, synchronisation on frames (and, for the model stream, on the
// e2eProxy holding it), never on elapsed time.

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// ---------------------------------------------------------------------------
// Small helpers shared by the tests.

// svCreate creates the session sid on c (which subscribes c to it).
func svCreate(c *svConn, sid string) svFrame {
	c.t.Helper()
	return c.must("create_session", svM{"sessionId": sid})
}

// svPrompt runs a prompt to its end and returns the response.
func svPrompt(c *svConn, sid, text string) svFrame {
	c.t.Helper()
	return c.must("prompt", svM{"sessionId": sid, "message": text})
}

// svAnswer is the mock's answer to a plain prompt.
func svAnswer(text string) string { return "Hello from mock! You said: " + e2ePrefix(text, 60) }

// svMessages is the session's messages.
func svMessages(c *svConn, sid string) []any {
	c.t.Helper()
	return svArr(c.must("get_messages", svM{"sessionId": sid}).m, "data", "messages")
}

// svNoVersionOnFailure checks that a failed response carries no
// sessionVersion (the wire doc: versions go on successful responses only).
func svNoVersionOnFailure(t *testing.T, r svFrame) {
	t.Helper()
	if r.m["success"] != false {
		t.Errorf("want a failure, got %s", r)
	} else if svHas(r.m, "sessionVersion") {
		t.Errorf("a failed response carries sessionVersion: %s", r)
	}
}

// svTail is the last n elements of s (all of s when shorter).
func svTail(s []string, n int) []string { return s[max(0, len(s)-n):] }

// svIndex is the index in fs of the first frame pred accepts, or -1.
func svIndex(fs []svFrame, pred func(svFrame) bool) int {
	return slices.IndexFunc(fs, pred)
}

// svCheckLifecycle checks that c received command_accepted,
// command_started and command_finished exactly once each for the
// command id, in that order, with the command's metadata, and (when
// respIdx >= 0) that command_finished came before the response at
// respIdx. It returns the command_finished frame.
func svCheckLifecycle(t *testing.T, c *svConn, id, typ, sid string, respIdx int) svFrame {
	t.Helper()
	fs := c.snapshot()
	idx := map[string][]int{}
	for i, f := range fs {
		if f.isLifecycle() && svStr(f.m, "data", "commandId") == id {
			idx[f.typ()] = append(idx[f.typ()], i)
		}
	}
	for _, ph := range []string{"command_accepted", "command_started", "command_finished"} {
		if len(idx[ph]) != 1 {
			t.Errorf("%s: %d %s frames for %s on %s, want exactly 1\n%s", id, len(idx[ph]), ph, id, c.name, c.tail(30))
			return svFrame{}
		}
	}
	a, s, f := idx["command_accepted"][0], idx["command_started"][0], idx["command_finished"][0]
	if !(a < s && s < f) {
		t.Errorf("%s on %s: accepted at %d, started at %d, finished at %d: not in that order", id, c.name, a, s, f)
	}
	if respIdx >= 0 && f > respIdx {
		t.Errorf("%s on %s: command_finished (frame %d) after the response (frame %d)", id, c.name, f, respIdx)
	}
	for _, i := range []int{a, s, f} {
		fr := fs[i]
		svEq(t, fr.typ()+" commandType", svAt(fr.m, "data", "commandType"), typ)
		if sid != "" {
			svEq(t, fr.typ()+" sessionId", svAt(fr.m, "data", "sessionId"), sid)
		}
		if _, ok := svAt(fr.m, "data", "dependsOn").([]any); !ok {
			t.Errorf("%s has no dependsOn array: %s", fr.typ(), fr)
		}
	}
	if _, ok := svAt(fs[f].m, "data", "success").(bool); !ok {
		t.Errorf("command_finished without success: %s", fs[f])
	}
	return fs[f]
}

// svNoLifecycle checks that c received no lifecycle frame between from
// and the command_accepted of the sentinel command, which it sends.
func svNoLifecycle(t *testing.T, c *svConn, from int, what string) {
	t.Helper()
	sentinel := c.newID("sentinel")
	c.ok(svM{"id": sentinel, "type": "list_sessions"})
	end, _ := c.waitLifecycle(from, "command_accepted", sentinel)
	for _, f := range c.snapshot()[from:end] {
		if f.isLifecycle() {
			t.Errorf("%s: a command rejected before admission emitted %s", what, f)
		}
	}
}

// svLines is the lines of a file (nil when it does not exist).
func svLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

var svSessionIDRe = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,256}$`)

// ---------------------------------------------------------------------------
// 1. server_ready

func TestServeReady(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, f svFrame) {
		t.Helper()
		svEq(t, "first frame type", f.typ(), "server_ready")
		svEq(t, "protocolVersion", svAt(f.m, "data", "protocolVersion"), "1.0.0")
		svEq(t, "transports", svAt(f.m, "data", "transports"), []string{"websocket", "stdio"})
		if svStr(f.m, "data", "serverVersion") == "" {
			t.Errorf("server_ready without serverVersion: %s", f)
		}
	}
	first := func(svFrame) bool { return true }

	t.Run("websocket", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{})
		s := svStart(t, e)
		a := s.dialRaw(t, svDialOpts{name: "A"})
		_, f := a.waitFor(0, "the first frame", first)
		check(t, f)
		// A busy first connection makes global broadcasts (lifecycle,
		// session_created) while the second connects: server_ready still
		// comes first on it.
		a.send(svM{"id": "c1", "type": "create_session", "sessionId": "busy"})
		a.send(svM{"id": "c2", "type": "list_sessions"})
		b := s.dialRaw(t, svDialOpts{name: "B"})
		_, f = b.waitFor(0, "the first frame", first)
		check(t, f)
		a.response("c2")
		// and exactly one server_ready per connection
		b.ok(svM{"id": "b1", "type": "list_sessions"})
		n := 0
		for _, f := range b.snapshot() {
			if f.typ() == "server_ready" {
				n++
			}
		}
		svEq(t, "server_ready frames on B", n, 1)
	})

	t.Run("stdio", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{})
		s, c := svStartStdio(t, e)
		_, f := c.waitFor(0, "the first stdout line", first)
		check(t, f)
		s.closeStdin()
		svEq(t, "exit code after EOF", s.waitExit(), 0)
	})
}

// ---------------------------------------------------------------------------
// 2a. Server commands (section 17.1)

func TestServeServerCommands(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	allowed := filepath.Join(e.root, "allowed")
	outside := filepath.Join(e.root, "outside")
	elsewhere := filepath.Join(e.root, "elsewhere")
	for _, d := range []string{allowed, outside, elsewhere} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := svStartInProc(t, e, "--allow-session-dir", allowed)
	A := s.dial("A")
	B := s.dial("B")
	var genID, sessionFile string

	t.Run("list_sessions empty", func(t *testing.T) {
		r := A.on(t).must("list_sessions", nil)
		svEq(t, "sessions", svAt(r.m, "data", "sessions"), []any{})
	})

	t.Run("create_session with sessionId and cwd", func(t *testing.T) {
		a, b := A.on(t), B.on(t)
		from := a.mark()
		r := a.ok(svM{"id": "create-s1", "type": "create_session", "sessionId": "s1", "cwd": e.cwd})
		respIdx := svIndex(a.snapshot(), func(f svFrame) bool { return f.isResponse("create-s1") })
		svEq(t, "command", r.m["command"], "create_session")
		svEq(t, "data.sessionId", svAt(r.m, "data", "sessionId"), "s1")
		svEq(t, "data.sessionInfo.sessionId", svAt(r.m, "data", "sessionInfo", "sessionId"), "s1")
		svEq(t, "sessionVersion", svVersion(r), 0)
		for _, k := range []string{"thinkingLevel", "isStreaming", "messageCount", "createdAt"} {
			if !svHas(r.m, "data", "sessionInfo", k) {
				t.Errorf("sessionInfo has no %s: %s", k, r)
			}
		}
		// session_created goes to every connection, after the response on
		// the requester's.
		i, sc := a.waitFor(from, "session_created s1", func(f svFrame) bool {
			return f.typ() == "session_created" && svStr(f.m, "data", "sessionId") == "s1"
		})
		if i < respIdx {
			t.Errorf("session_created (frame %d) before the create_session response (frame %d)", i, respIdx)
		}
		svEq(t, "session_created sessionInfo.sessionId", svAt(sc.m, "data", "sessionInfo", "sessionId"), "s1")
		_, scb := b.waitFor(0, "session_created s1 on B", func(f svFrame) bool {
			return f.typ() == "session_created" && svStr(f.m, "data", "sessionId") == "s1"
		})
		svEq(t, "session_created on B", svAt(scb.m, "data", "sessionInfo", "sessionId"), "s1")
		svCheckLifecycle(t, b, "create-s1", "create_session", "s1", -1)
	})

	t.Run("create_session without sessionId", func(t *testing.T) {
		a := A.on(t)
		r := a.ok(svM{"id": "create-gen", "type": "create_session"})
		genID = svStr(r.m, "data", "sessionId")
		if !svSessionIDRe.MatchString(genID) || genID == "s1" {
			t.Errorf("generated sessionId %q", genID)
		}
		svEq(t, "sessionInfo.sessionId", svAt(r.m, "data", "sessionInfo", "sessionId"), genID)
		svEq(t, "sessionVersion", svVersion(r), 0)
		r2 := a.ok(svM{"id": "create-gen2", "type": "create_session"})
		if svStr(r2.m, "data", "sessionId") == genID {
			t.Errorf("two generated sessions share the id %q", genID)
		}
		a.must("delete_session", svM{"sessionId": svStr(r2.m, "data", "sessionId")})
	})

	t.Run("create_session cwd is the session's working directory", func(t *testing.T) {
		a := A.on(t)
		a.must("create_session", svM{"sessionId": "incwd", "cwd": elsewhere})
		r := a.must("bash", svM{"sessionId": "incwd", "command": "pwd"})
		want, _ := filepath.EvalSymlinks(elsewhere)
		got, _ := filepath.EvalSymlinks(strings.TrimSpace(svStr(r.m, "data", "output")))
		svEq(t, "pwd in the session", got, want)
		r = a.must("bash", svM{"sessionId": "s1", "command": "pwd"})
		want, _ = filepath.EvalSymlinks(e.cwd)
		got, _ = filepath.EvalSymlinks(strings.TrimSpace(svStr(r.m, "data", "output")))
		svEq(t, "pwd in s1", got, want)
	})

	t.Run("create_session duplicate", func(t *testing.T) {
		svWantErr(t, A.on(t).do("create_session", svM{"sessionId": "s1"}), "Session s1 already exists")
	})

	t.Run("create_session bad sessionId", func(t *testing.T) {
		a := A.on(t)
		for _, id := range []string{"bad id!", "slash/id", strings.Repeat("a", 257), ""} {
			from := a.mark()
			r := a.do("create_session", svM{"sessionId": id})
			svWantErrPrefix(t, r, "Validation failed: ")
			svNoLifecycle(t, a, from, fmt.Sprintf("create_session sessionId %q", e2eClip(id, 20)))
		}
	})

	t.Run("create_session bad cwd", func(t *testing.T) {
		a := A.on(t)
		for i, cwd := range []string{"relative/dir", filepath.Join(e.root, "does-not-exist"), e.cwd + "/../work"} {
			sid := fmt.Sprintf("badcwd-%d", i)
			r := a.do("create_session", svM{"sessionId": sid, "cwd": cwd})
			if b, _ := r.m["success"].(bool); b {
				t.Errorf("create_session with cwd %q succeeded: %s", cwd, r)
			}
		}
		r := a.must("list_sessions", nil)
		for _, si := range svArr(r.m, "data", "sessions") {
			if strings.HasPrefix(svStr(si, "sessionId"), "badcwd-") {
				t.Errorf("a refused create_session left a session: %s", svJSON(si))
			}
		}
	})

	t.Run("list_sessions", func(t *testing.T) {
		r := A.on(t).must("list_sessions", nil)
		var ids []string
		for _, si := range svArr(r.m, "data", "sessions") {
			ids = append(ids, svStr(si, "sessionId"))
			for _, k := range []string{"thinkingLevel", "isStreaming", "messageCount", "createdAt"} {
				if !svHas(si, k) {
					t.Errorf("SessionInfo without %s: %s", k, svJSON(si))
				}
			}
		}
		slices.Sort(ids)
		want := []string{genID, "incwd", "s1"}
		slices.Sort(want)
		svEq(t, "session ids", ids, want)
	})

	t.Run("get_metrics", func(t *testing.T) {
		r := A.on(t).must("get_metrics", nil)
		svEq(t, "sessionCount", svAt(r.m, "data", "sessionCount"), 3)
		svEq(t, "connectionCount", svAt(r.m, "data", "connectionCount"), 2)
		if n, ok := svNum(r.m, "data", "totalCommandsExecuted"); !ok || n < 1 {
			t.Errorf("totalCommandsExecuted: %s", r)
		}
		if _, ok := svAt(r.m, "data", "commandsRejected").(map[string]any); !ok {
			t.Errorf("commandsRejected is not an object: %s", r)
		}
		if !svHas(r.m, "data", "circuitBreakers") {
			t.Errorf("no circuitBreakers: %s", r)
		}
		if _, ok := svAt(r.m, "data", "bashCircuitBreaker").(map[string]any); !ok {
			t.Errorf("bashCircuitBreaker is not an object: %s", r)
		}
	})

	t.Run("health_check", func(t *testing.T) {
		r := A.on(t).must("health_check", nil)
		svEq(t, "data", r.m["data"], svM{"healthy": true, "issues": []any{}, "hasOpenCircuit": false, "hasOpenBashCircuit": false})
	})

	t.Run("switch_session subscribes; events only to subscribers", func(t *testing.T) {
		a, b := A.on(t), B.on(t)
		r := b.ok(svM{"id": "sw-b", "type": "switch_session", "sessionId": "s1"})
		svEq(t, "sessionInfo.sessionId", svAt(r.m, "data", "sessionInfo", "sessionId"), "s1")
		if _, ok := svNum(r.m, "data", "seq"); !ok {
			t.Errorf("switch_session data has no seq: %s", r)
		}
		svWantErr(t, b.do("switch_session", svM{"sessionId": "nope"}), "Session nope not found")

		// A prompt on the generated session (A subscribed by creating
		// it, B not): B sees the lifecycle but no event of it.
		pr := svPrompt(a, genID, "only for A")
		a.cursor = 0
		a.waitEvent(genID, "agent_end")
		b.waitLifecycle(0, "command_finished", svStr(pr.m, "id"))
		if ev := b.events(genID); len(ev) > 0 {
			t.Errorf("B, not subscribed to %s, got its events, first: %s", genID, ev[0])
		}
		// A prompt on s1: B (switched) gets its events.
		svPrompt(a, "s1", "hello s1")
		b.cursor = 0
		b.waitEvent("s1", "agent_start")
		b.waitEvent("s1", "agent_end")
		if ev := b.events("incwd"); len(ev) > 0 {
			t.Errorf("B got events of incwd: %s", ev[0])
		}
	})

	t.Run("list_stored_sessions", func(t *testing.T) {
		a := A.on(t)
		st := a.must("get_state", svM{"sessionId": "s1"})
		sessionFile = svStr(st.m, "data", "sessionFile")
		if !filepath.IsAbs(sessionFile) {
			t.Fatalf("get_state sessionFile %q is not an absolute path: %s", sessionFile, st)
		}
		r := a.must("list_stored_sessions", nil)
		var found any
		for _, si := range svArr(r.m, "data", "sessions") {
			if svStr(si, "sessionPath") == sessionFile {
				found = si
			}
		}
		if found == nil {
			t.Fatalf("list_stored_sessions has no entry with sessionPath %s: %s", sessionFile, r)
		}
		svEq(t, "sessionFile", svAt(found, "sessionFile"), sessionFile)
		svEq(t, "fileExists", svAt(found, "fileExists"), true)
		for _, k := range []string{"sessionId", "cwd", "createdAt"} {
			if !svHas(found, k) {
				t.Errorf("StoredSessionInfo without %s: %s", k, svJSON(found))
			}
		}
	})

	t.Run("delete_session", func(t *testing.T) {
		a, b := A.on(t), B.on(t)
		if sessionFile == "" {
			t.Skip("no session file (list_stored_sessions failed)")
		}
		from, fromB := a.mark(), b.mark()
		r := a.ok(svM{"id": "del-s1", "type": "delete_session", "sessionId": "s1"})
		respIdx := svIndex(a.snapshot(), func(f svFrame) bool { return f.isResponse("del-s1") })
		svEq(t, "data", r.m["data"], svM{"deleted": true})
		want := svM{"type": "session_deleted", "data": svM{"sessionId": "s1"}}
		i, f := a.waitFor(from, "session_deleted on A", func(f svFrame) bool { return f.typ() == "session_deleted" })
		svEq(t, "session_deleted on A", f.m, want)
		if i < respIdx {
			t.Errorf("session_deleted (frame %d) before the response (frame %d)", i, respIdx)
		}
		_, f = b.waitFor(fromB, "session_deleted on B", func(f svFrame) bool { return f.typ() == "session_deleted" })
		svEq(t, "session_deleted on B", f.m, want)
		if _, err := os.Stat(sessionFile); err != nil {
			t.Errorf("delete_session removed the session file: %v", err)
		}
		svWantErr(t, a.do("get_state", svM{"sessionId": "s1"}), "Session s1 not found")
		svWantErr(t, a.do("prompt", svM{"sessionId": "s1", "message": "x"}), "Session s1 not found")
		svWantErr(t, a.do("delete_session", svM{"sessionId": "s1"}), "Session s1 not found")
		svWantErr(t, a.do("switch_session", svM{"sessionId": "s1"}), "Session s1 not found")
		ls := a.must("list_sessions", nil)
		for _, si := range svArr(ls.m, "data", "sessions") {
			if svStr(si, "sessionId") == "s1" {
				t.Errorf("list_sessions still lists s1")
			}
		}
		st := a.must("list_stored_sessions", nil)
		if !strings.Contains(st.raw, svJSON(sessionFile)) {
			t.Errorf("list_stored_sessions lost the deleted session's file: %s", st)
		}
	})

	t.Run("load_session", func(t *testing.T) {
		a := A.on(t)
		if sessionFile == "" {
			t.Skip("no session file")
		}
		r := a.ok(svM{"id": "load-1", "type": "load_session", "sessionPath": sessionFile})
		lid := svStr(r.m, "data", "sessionId")
		if !svSessionIDRe.MatchString(lid) {
			t.Fatalf("load_session sessionId %q: %s", lid, r)
		}
		svEq(t, "sessionInfo.sessionId", svAt(r.m, "data", "sessionInfo", "sessionId"), lid)
		// s1 ran `bash pwd` (a bashExecution message) and one prompt.
		svEq(t, "sessionInfo.messageCount", svAt(r.m, "data", "sessionInfo", "messageCount"), 3)
		svEq(t, "messages", svTexts(svMessages(a, lid)), []string{"<bashExecution>", "hello s1", svAnswer("hello s1")})
		// load_session subscribes the requester.
		from := a.mark()
		svPrompt(a, lid, "after reload")
		a.cursor = from
		a.waitEvent(lid, "agent_end")
		a.must("delete_session", svM{"sessionId": lid})

		r = a.ok(svM{"id": "load-2", "type": "load_session", "sessionPath": sessionFile, "sessionId": "reloaded"})
		svEq(t, "explicit sessionId", svAt(r.m, "data", "sessionId"), "reloaded")
		svEq(t, "messages", svTexts(svMessages(a, "reloaded")),
			[]string{"<bashExecution>", "hello s1", svAnswer("hello s1"), "after reload", svAnswer("after reload")})
		// another file under an id in use
		data, err := os.ReadFile(sessionFile)
		if err != nil {
			t.Fatal(err)
		}
		other := filepath.Join(allowed, "other.jsonl")
		if err := os.WriteFile(other, data, 0o600); err != nil {
			t.Fatal(err)
		}
		svWantErr(t, a.do("load_session", svM{"sessionPath": other, "sessionId": "reloaded"}), "Session reloaded already exists")
	})

	t.Run("load_session path checks", func(t *testing.T) {
		a := A.on(t)
		if sessionFile == "" {
			t.Skip("no session file")
		}
		data, err := os.ReadFile(sessionFile)
		if err != nil {
			t.Fatal(err)
		}
		outsideCopy := filepath.Join(outside, "copy.jsonl")
		allowedCopy := filepath.Join(allowed, "copy.jsonl")
		for _, p := range []string{outsideCopy, allowedCopy} {
			if err := os.WriteFile(p, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		link := filepath.Join(filepath.Dir(sessionFile), "link-outside.jsonl")
		if err := os.Symlink(outsideCopy, link); err != nil {
			t.Fatal(err)
		}
		sessionsDir := filepath.Join(e.data, "sessions")
		rel, err := filepath.Rel(sessionsDir, sessionFile)
		if err != nil {
			t.Fatal(err)
		}
		const notAllowed = "sessionPath must be under an allowed session directory"
		const dangerous = "Validation failed: sessionPath: sessionPath contains potentially dangerous path components"
		cases := []struct {
			name, path string
			want       []string // error prefixes, any of them
		}{
			{"relative", rel, []string{"sessionPath must be an absolute path"}},
			{"dot-dot to outside", sessionsDir + "/../../outside/copy.jsonl", []string{dangerous, notAllowed}},
			{"dot-dot staying inside", sessionsDir + "/x/../" + rel, []string{dangerous, notAllowed}},
			{"symlink to outside", link, []string{notAllowed}},
			{"outside the allowed dirs", outsideCopy, []string{notAllowed}},
		}
		for i, tc := range cases {
			r := a.do("load_session", svM{"sessionPath": tc.path, "sessionId": fmt.Sprintf("refused-%d", i)})
			b, ok := r.m["success"].(bool)
			msg := svStr(r.m, "error")
			if !ok || b || !slices.ContainsFunc(tc.want, func(p string) bool { return strings.HasPrefix(msg, p) }) {
				t.Errorf("load_session %s (%s): want an error starting with one of %q, got %s", tc.name, tc.path, tc.want, r)
			}
		}
		r := a.do("load_session", svM{"sessionPath": allowedCopy, "sessionId": "from-allowed"})
		if svWantOK(t, r) {
			svEq(t, "loaded from --allow-session-dir", svAt(r.m, "data", "sessionId"), "from-allowed")
		}
	})
}

// ---------------------------------------------------------------------------
// 2b. Session commands (section 17.2), in order on one session.

func TestServeSessionCommands(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{proxy: true, settings: map[string]any{"compaction": map[string]any{"keepRecentTokens": 1}}})
	s := svStartInProc(t, e)
	C := s.dial("A")
	const sid = "s"
	svCreate(C, sid)
	var sessionFile, firstEntryID string

	steps := []struct {
		name string
		run  func(t *testing.T, c *svConn)
	}{
		{"prompt", func(t *testing.T, c *svConn) {
			r := c.call(svM{"id": "p1", "type": "prompt", "sessionId": sid, "message": "first prompt"})
			svWantOK(t, r)
			svEq(t, "command", r.m["command"], "prompt")
			svPrompt(c, sid, "second prompt")
		}},
		{"get_state", func(t *testing.T, c *svConn) {
			r := c.must("get_state", svM{"sessionId": sid})
			d := r.m["data"]
			svEq(t, "sessionId", svAt(d, "sessionId"), sid)
			svEq(t, "messageCount", svAt(d, "messageCount"), 4)
			svEq(t, "isStreaming", svAt(d, "isStreaming"), false)
			svEq(t, "model", svStr(d, "model", "provider")+"/"+svStr(d, "model", "id"), "mock/mock-model")
			if svStr(d, "thinkingLevel") == "" || svStr(d, "createdAt") == "" {
				t.Errorf("get_state without thinkingLevel or createdAt: %s", r)
			}
			sessionFile = svStr(d, "sessionFile")
			if !filepath.IsAbs(sessionFile) {
				t.Errorf("sessionFile %q", sessionFile)
			}
		}},
		{"get_messages", func(t *testing.T, c *svConn) {
			svEq(t, "texts", svTexts(svMessages(c, sid)),
				[]string{"first prompt", svAnswer("first prompt"), "second prompt", svAnswer("second prompt")})
		}},
		{"get_last_assistant_text", func(t *testing.T, c *svConn) {
			r := c.must("get_last_assistant_text", svM{"sessionId": sid})
			svEq(t, "data", r.m["data"], svM{"text": svAnswer("second prompt")})
		}},
		{"get_session_stats", func(t *testing.T, c *svConn) {
			r := c.must("get_session_stats", svM{"sessionId": sid})
			svEq(t, "userMessages", svAt(r.m, "data", "userMessages"), 2)
			svEq(t, "assistantMessages", svAt(r.m, "data", "assistantMessages"), 2)
			svEq(t, "tokens.input", svAt(r.m, "data", "tokens", "input"), 84)
			svEq(t, "tokens.output", svAt(r.m, "data", "tokens", "output"), 14)
		}},
		{"get_context_usage", func(t *testing.T, c *svConn) {
			r := c.must("get_context_usage", svM{"sessionId": sid})
			svEq(t, "contextWindow", svAt(r.m, "data", "contextWindow"), 128000)
			if !svHas(r.m, "data", "tokens") || !svHas(r.m, "data", "percent") {
				t.Errorf("get_context_usage without tokens/percent: %s", r)
			}
		}},
		{"get_available_models", func(t *testing.T, c *svConn) {
			r := c.must("get_available_models", svM{"sessionId": sid})
			if !slices.ContainsFunc(svArr(r.m, "data", "models"), func(m any) bool {
				return svStr(m, "provider") == "mock" && svStr(m, "id") == "mock-model"
			}) {
				t.Errorf("mock/mock-model not available: %s", r)
			}
		}},
		{"get_commands", func(t *testing.T, c *svConn) {
			r := c.must("get_commands", svM{"sessionId": sid})
			if _, ok := svAt(r.m, "data", "commands").([]any); !ok {
				t.Errorf("data.commands is not an array: %s", r)
			}
		}},
		{"get_skills", func(t *testing.T, c *svConn) {
			r := c.must("get_skills", svM{"sessionId": sid})
			if _, ok := svAt(r.m, "data", "skills").([]any); !ok {
				t.Errorf("data.skills is not an array: %s", r)
			}
		}},
		{"get_tools", func(t *testing.T, c *svConn) {
			r := c.must("get_tools", svM{"sessionId": sid})
			var names []string
			for _, tl := range svArr(r.m, "data", "tools") {
				names = append(names, svStr(tl, "name"))
				if !svHas(tl, "description") {
					t.Errorf("tool without description: %s", svJSON(tl))
				}
			}
			if !slices.Contains(names, "bash") || !slices.Contains(names, "read") {
				t.Errorf("tools %v lack bash or read", names)
			}
		}},
		{"list_session_files", func(t *testing.T, c *svConn) {
			r := c.must("list_session_files", svM{"sessionId": sid})
			files := svArr(r.m, "data", "files")
			if !slices.ContainsFunc(files, func(f any) bool {
				return svStr(f, "path") == sessionFile && svStr(f, "name") == filepath.Base(sessionFile) && svStr(f, "modifiedAt") != ""
			}) {
				t.Errorf("list_session_files has no {path:%q,name,modifiedAt}: %s", sessionFile, r)
			}
		}},
		{"set_model", func(t *testing.T, c *svConn) {
			r := c.must("set_model", svM{"sessionId": sid, "provider": "mock", "modelId": "mock-model"})
			svEq(t, "data.model", svStr(r.m, "data", "model", "provider")+"/"+svStr(r.m, "data", "model", "id"), "mock/mock-model")
			svWantErr(t, c.do("set_model", svM{"sessionId": sid, "provider": "p", "modelId": "id"}), "Model not found: p/id")
		}},
		{"cycle_model", func(t *testing.T, c *svConn) {
			r := c.must("cycle_model", svM{"sessionId": sid})
			if d := r.m["data"]; d != nil && svStr(d, "model", "id") == "" {
				t.Errorf("cycle_model data is neither null nor {model,...}: %s", r)
			}
			c.must("set_model", svM{"sessionId": sid, "provider": "mock", "modelId": "mock-model"})
		}},
		{"set_thinking_level", func(t *testing.T, c *svConn) {
			c.must("set_thinking_level", svM{"sessionId": sid, "level": "high"})
			svWantErrPrefix(t, c.do("set_thinking_level", svM{"sessionId": sid, "level": "huge"}), "")
		}},
		{"cycle_thinking_level", func(t *testing.T, c *svConn) {
			r := c.must("cycle_thinking_level", svM{"sessionId": sid})
			if d := r.m["data"]; d != nil && svStr(d, "level") == "" {
				t.Errorf("cycle_thinking_level data is neither null nor {level}: %s", r)
			}
		}},
		{"set_session_name", func(t *testing.T, c *svConn) {
			c.must("set_session_name", svM{"sessionId": sid, "name": "my named session"})
			st := c.must("get_state", svM{"sessionId": sid})
			svEq(t, "sessionName", svAt(st.m, "data", "sessionName"), "my named session")
		}},
		{"set_auto_compaction", func(t *testing.T, c *svConn) {
			c.must("set_auto_compaction", svM{"sessionId": sid, "enabled": false})
			c.must("set_auto_compaction", svM{"sessionId": sid, "enabled": true})
			svWantErrPrefix(t, c.do("set_auto_compaction", svM{"sessionId": sid, "enabled": "yes"}), "Validation failed: ")
		}},
		{"set_auto_retry", func(t *testing.T, c *svConn) {
			c.must("set_auto_retry", svM{"sessionId": sid, "enabled": true})
		}},
		{"abort_retry (idle)", func(t *testing.T, c *svConn) {
			c.must("abort_retry", svM{"sessionId": sid})
		}},
		{"abort (idle)", func(t *testing.T, c *svConn) {
			c.must("abort", svM{"sessionId": sid})
		}},
		{"abort_compaction (idle)", func(t *testing.T, c *svConn) {
			c.must("abort_compaction", svM{"sessionId": sid})
		}},
		{"bash", func(t *testing.T, c *svConn) {
			r := c.must("bash", svM{"sessionId": sid, "command": "echo hi"})
			svEq(t, "data", r.m["data"], svM{"exitCode": 0, "output": "hi\n", "cancelled": false})
			r = c.must("bash", svM{"sessionId": sid, "command": "echo out; exit 3"})
			svEq(t, "exitCode", svAt(r.m, "data", "exitCode"), 3)
			svEq(t, "output", svAt(r.m, "data", "output"), "out\n")
			svEq(t, "cancelled", svAt(r.m, "data", "cancelled"), false)
		}},
		{"abort_bash during sleep 30", func(t *testing.T, c *svConn) {
			fifo, started := e.fifo("bash-started")
			from := c.mark()
			c.send(svM{"id": "long-bash", "type": "bash", "sessionId": sid, "command": "echo go > " + fifo + "; sleep 30"})
			started()
			c.must("abort_bash", svM{"sessionId": sid})
			_, r := c.responseFrom(from, "long-bash")
			svWantOK(t, r)
			svEq(t, "cancelled", svAt(r.m, "data", "cancelled"), true)
		}},
		{"export_html", func(t *testing.T, c *svConn) {
			out := filepath.Join(e.cwd, "export.html")
			r := c.must("export_html", svM{"sessionId": sid, "outputPath": out})
			svEq(t, "data", r.m["data"], svM{"path": out})
			b, err := os.ReadFile(out)
			if err != nil || !strings.Contains(string(b), "first prompt") {
				t.Errorf("exported file: %v, %d bytes without the conversation", err, len(b))
			}
		}},
		{"get_fork_messages", func(t *testing.T, c *svConn) {
			r := c.must("get_fork_messages", svM{"sessionId": sid})
			ms := svArr(r.m, "data", "messages")
			var texts []string
			for _, m := range ms {
				texts = append(texts, svStr(m, "text"))
				if svStr(m, "entryId") == "" {
					t.Errorf("fork message without entryId: %s", svJSON(m))
				}
			}
			svEq(t, "fork message texts", texts, []string{"first prompt", "second prompt"})
			firstEntryID = svStr(ms, "0", "entryId")
		}},
		{"compact", func(t *testing.T, c *svConn) {
			r := c.must("compact", svM{"sessionId": sid})
			if !strings.HasPrefix(svStr(r.m, "data", "summary"), "Hello from mock! You said: ") {
				t.Errorf("compaction summary is not the mock's answer: %s", r)
			}
		}},
		{"abort_compaction during compact", func(t *testing.T, c *svConn) {
			release := e.proxy.holdAfter("COMPACT-HOLD-MARK", 2)
			defer close(release)
			svPrompt(c, sid, "third prompt")
			from := c.mark()
			c.send(svM{"id": "held-compact", "type": "compact", "sessionId": sid, "customInstructions": "COMPACT-HOLD-MARK"})
			svWaitUntil(t, "the compaction request reached the model", func() bool { return svMockSaw(e, "COMPACT-HOLD-MARK") })
			// The stream stays held: compact can only end through the abort.
			c.must("abort_compaction", svM{"sessionId": sid})
			_, r := c.responseFrom(from, "held-compact")
			if b, _ := r.m["success"].(bool); b {
				t.Errorf("an aborted compact succeeded: %s", r)
			}
		}},
		{"new_session", func(t *testing.T, c *svConn) {
			r := c.must("new_session", svM{"sessionId": sid})
			svEq(t, "data", r.m["data"], svM{"cancelled": false})
			st := c.must("get_state", svM{"sessionId": sid})
			svEq(t, "sessionId kept", svAt(st.m, "data", "sessionId"), sid)
			svEq(t, "messageCount", svAt(st.m, "data", "messageCount"), 0)
			if f := svStr(st.m, "data", "sessionFile"); f == sessionFile {
				t.Errorf("new_session kept the session file %s", f)
			}
		}},
		{"switch_session_file", func(t *testing.T, c *svConn) {
			r := c.must("switch_session_file", svM{"sessionId": sid, "sessionPath": sessionFile})
			svEq(t, "data", r.m["data"], svM{"cancelled": false})
			st := c.must("get_state", svM{"sessionId": sid})
			svEq(t, "sessionFile", svAt(st.m, "data", "sessionFile"), sessionFile)
			if !slices.Contains(svTexts(svMessages(c, sid)), "third prompt") {
				t.Errorf("switch_session_file did not bring the old conversation back")
			}
		}},
		{"fork", func(t *testing.T, c *svConn) {
			if firstEntryID == "" {
				t.Skip("no entry id from get_fork_messages")
			}
			r := c.must("fork", svM{"sessionId": sid, "entryId": firstEntryID})
			svEq(t, "data", r.m["data"], svM{"text": "first prompt", "cancelled": false})
			st := c.must("get_state", svM{"sessionId": sid})
			svEq(t, "messageCount after fork", svAt(st.m, "data", "messageCount"), 0)
			if svStr(st.m, "data", "sessionFile") == sessionFile {
				t.Errorf("fork kept the session file")
			}
		}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) { st.run(t, C.on(t)) })
	}
}

// ---------------------------------------------------------------------------
// 2c. prompt, its events, the lane, steer / follow_up / abort while a
// prompt runs.

func TestServeInteraction(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{proxy: true})
	s := svStartInProc(t, e)
	A := s.dial("A")
	B := s.dial("B")
	const sid = "s"
	svCreate(A, sid)

	t.Run("prompt events and response", func(t *testing.T) {
		a, b := A.on(t), B.on(t)
		from := a.mark()
		r := a.call(svM{"id": "p1", "type": "prompt", "sessionId": sid, "message": "hello events"})
		svWantOK(t, r)
		svEq(t, "command", r.m["command"], "prompt")
		if svHas(r.m, "error") {
			t.Errorf("a successful response with an error: %s", r)
		}
		fs := a.snapshot()
		respIdx := svIndex(fs, func(f svFrame) bool { return f.isResponse("p1") })
		var types []string
		last := -1.0
		endIdx := -1
		for i := from; i < len(fs); i++ {
			f := fs[i]
			if f.typ() != "event" {
				continue
			}
			keys := slices.Sorted(maps.Keys(f.m))
			svEq(t, "event frame keys", keys, []string{"event", "seq", "sessionId", "type"})
			svEq(t, "event sessionId", f.m["sessionId"], sid)
			seq, ok := svNum(f.m, "seq")
			if !ok || (last >= 0 && seq != last+1) {
				t.Errorf("event seq %v after %v: not consecutive: %s", f.m["seq"], last, f)
			}
			last = seq
			et := svStr(f.m, "event", "type")
			types = append(types, et)
			if et == "agent_end" {
				endIdx = i
			}
		}
		// The order of first appearance of pi's AgentSession events.
		var order []string
		for _, et := range types {
			if !slices.Contains(order, et) {
				order = append(order, et)
			}
		}
		want := []string{"agent_start", "turn_start", "message_start", "message_end", "message_update", "turn_end", "agent_end"}
		var got []string
		for _, et := range order {
			if slices.Contains(want, et) {
				got = append(got, et)
			}
		}
		svEq(t, "event types in order of first appearance", got, []string{"agent_start", "turn_start", "message_start", "message_end", "message_update", "turn_end", "agent_end"})
		if endIdx < 0 || endIdx > respIdx {
			t.Errorf("agent_end (frame %d) is not before the prompt response (frame %d)", endIdx, respIdx)
		}
		svCheckLifecycle(t, a, "p1", "prompt", sid, respIdx)
		if i := svIndex(fs, func(f svFrame) bool {
			return f.typ() == "command_finished" && svStr(f.m, "data", "commandId") == "p1"
		}); i < endIdx {
			t.Errorf("command_finished of the prompt (frame %d) before agent_end (frame %d)", i, endIdx)
		}
		// The assistant's text arrived through message_update events.
		var sawText bool
		for _, f := range fs[from:] {
			if f.isEvent(sid, "message_update") && strings.Contains(f.raw, "Hello") {
				sawText = true
			}
		}
		if !sawText {
			t.Errorf("no message_update carried the answer")
		}
		// B, not subscribed: lifecycle yes, events no.
		b.waitLifecycle(0, "command_finished", "p1")
		svCheckLifecycle(t, b, "p1", "prompt", sid, -1)
		if ev := b.events(sid); len(ev) > 0 {
			t.Errorf("unsubscribed B got an event: %s", ev[0])
		}
	})

	t.Run("lane: a second prompt waits, get_state and steer-prompt bypass", func(t *testing.T) {
		a := A.on(t)
		release := e.proxy.holdAfter("held one", 2)
		a.cursor = a.mark()
		a.send(svM{"id": "held", "type": "prompt", "sessionId": sid, "message": "held one"})
		a.waitEvent(sid, "message_update")
		a.send(svM{"id": "queued", "type": "prompt", "sessionId": sid, "message": "queued after"})
		st := a.must("get_state", svM{"sessionId": sid})
		svEq(t, "isStreaming while the prompt runs", svAt(st.m, "data", "isStreaming"), true)
		a.must("prompt", svM{"sessionId": sid, "message": "steered via prompt", "streamingBehavior": "steer"})
		for _, id := range []string{"held", "queued"} {
			if slices.ContainsFunc(a.snapshot(), func(f svFrame) bool { return f.isResponse(id) }) {
				t.Errorf("prompt %s answered while the first prompt's stream is held", id)
			}
		}
		close(release)
		i1, r1 := a.responseFrom(0, "held")
		i2, r2 := a.responseFrom(0, "queued")
		svWantOK(t, r1)
		svWantOK(t, r2)
		if i2 < i1 {
			t.Errorf("the queued prompt finished before the running one")
		}
		fin, _ := a.waitLifecycle(0, "command_finished", "held")
		start, _ := a.waitLifecycle(0, "command_started", "queued")
		if start < fin {
			t.Errorf("the queued prompt started (frame %d) before the running prompt finished (frame %d)", start, fin)
		}
		svEq(t, "messages", svTail(svTexts(svMessages(a, sid)), 6), []string{"held one", svAnswer("held one"),
			"steered via prompt", svAnswer("steered via prompt"), "queued after", svAnswer("queued after")})
	})

	t.Run("steer and follow_up during a prompt", func(t *testing.T) {
		a := A.on(t)
		release := e.proxy.holdAfter("steer base", 2)
		a.cursor = a.mark()
		a.send(svM{"id": "ps", "type": "prompt", "sessionId": sid, "message": "steer base"})
		a.waitEvent(sid, "message_update")
		a.must("steer", svM{"sessionId": sid, "message": "steer message"})
		a.must("follow_up", svM{"sessionId": sid, "message": "follow-up message"})
		if slices.ContainsFunc(a.snapshot(), func(f svFrame) bool { return f.isResponse("ps") }) {
			t.Errorf("the prompt answered while its stream is held")
		}
		close(release)
		svWantOK(t, a.response("ps"))
		svEq(t, "messages", svTail(svTexts(svMessages(a, sid)), 6), []string{"steer base", svAnswer("steer base"),
			"steer message", svAnswer("steer message"), "follow-up message", svAnswer("follow-up message")})
	})

	t.Run("abort during a prompt", func(t *testing.T) {
		a := A.on(t)
		release := e.proxy.holdAfter("abort me", 2)
		defer close(release)
		a.cursor = a.mark()
		a.send(svM{"id": "pa", "type": "prompt", "sessionId": sid, "message": "abort me"})
		a.waitEvent(sid, "message_update")
		// The stream stays held: the prompt can only end through the abort.
		a.must("abort", svM{"sessionId": sid})
		svWantOK(t, a.response("pa"))
		a.waitEvent(sid, "agent_end")
		msgs := svMessages(a, sid)
		svEq(t, "last message stopReason", svAt(msgs[len(msgs)-1], "stopReason"), "aborted")
		st := a.must("get_state", svM{"sessionId": sid})
		svEq(t, "isStreaming after abort", svAt(st.m, "data", "isStreaming"), false)
	})
}

// ---------------------------------------------------------------------------
// 3. Lifecycle events.

func TestServeLifecycle(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e)
	A := s.dial("A")
	B := s.dial("B")
	svCreate(A, "s")

	t.Run("admitted command", func(t *testing.T) {
		a, b := A.on(t), B.on(t)
		r := a.ok(svM{"id": "lc1", "type": "bash", "sessionId": "s", "command": "echo lc"})
		respIdx := svIndex(a.snapshot(), func(f svFrame) bool { return f.isResponse("lc1") })
		fin := svCheckLifecycle(t, a, "lc1", "bash", "s", respIdx)
		svEq(t, "finished success", svAt(fin.m, "data", "success"), true)
		svEq(t, "finished sessionVersion", svAt(fin.m, "data", "sessionVersion"), svVersion(r))
		svEq(t, "finished dependsOn", svAt(fin.m, "data", "dependsOn"), []any{})
		// broadcast: B gets the same three, once each
		b.waitLifecycle(0, "command_finished", "lc1")
		finB := svCheckLifecycle(t, b, "lc1", "bash", "s", -1)
		svEq(t, "command_finished on B", finB.m, fin.m)

		// a failing admitted command: finished with success false and its error
		r = a.call(svM{"id": "lc2", "type": "set_model", "sessionId": "s", "provider": "p", "modelId": "x"})
		respIdx = svIndex(a.snapshot(), func(f svFrame) bool { return f.isResponse("lc2") })
		fin = svCheckLifecycle(t, a, "lc2", "set_model", "s", respIdx)
		svEq(t, "failed finished success", svAt(fin.m, "data", "success"), false)
		svEq(t, "failed finished error", svAt(fin.m, "data", "error"), svStr(r.m, "error"))

		// metadata is carried on every phase
		a.ok(svM{"id": "lc3", "type": "set_session_name", "sessionId": "s", "name": "n", "idempotencyKey": "k-lc3", "ifSessionVersion": 1, "dependsOn": []string{"lc1"}})
		for _, f := range a.lifecycle("lc3") {
			svEq(t, f.typ()+" dependsOn", svAt(f.m, "data", "dependsOn"), []string{"lc1"})
			svEq(t, f.typ()+" idempotencyKey", svAt(f.m, "data", "idempotencyKey"), "k-lc3")
			svEq(t, f.typ()+" ifSessionVersion", svAt(f.m, "data", "ifSessionVersion"), 1)
		}
	})

	t.Run("command without id", func(t *testing.T) {
		a := A.on(t)
		from := a.mark()
		a.send(svM{"type": "get_metrics"})
		i, r := a.waitFor(from, "the get_metrics response", func(f svFrame) bool {
			return f.typ() == "response" && svStr(f.m, "command") == "get_metrics"
		})
		if svHas(r.m, "id") {
			t.Errorf("a response to a command without id has an id: %s", r)
		}
		var phases []string
		cid := ""
		for _, f := range a.snapshot()[from:i] {
			if f.isLifecycle() && svStr(f.m, "data", "commandType") == "get_metrics" {
				phases = append(phases, f.typ())
				if cid == "" {
					cid = svStr(f.m, "data", "commandId")
				} else if svStr(f.m, "data", "commandId") != cid {
					t.Errorf("phases of one anonymous command carry different commandIds: %q, %s", cid, f)
				}
			}
		}
		svEq(t, "phases of an anonymous command", phases, []string{"command_accepted", "command_started", "command_finished"})
		if cid == "" {
			t.Errorf("an anonymous command's lifecycle has an empty commandId")
		}
	})

	t.Run("rejected before admission: no lifecycle", func(t *testing.T) {
		a, b := A.on(t), B.on(t)
		cases := []struct {
			name, frame, command, id string
		}{
			{"bad JSON", `{"type":`, "unknown", ""},
			{"validation failure", `{"id":"rj-val","type":"prompt","sessionId":"s"}`, "prompt", "rj-val"},
			{"unknown type", `{"id":"rj-unk","type":"frobnicate"}`, "frobnicate", "rj-unk"},
			{"id not a string", `{"id":5,"type":"list_sessions"}`, "list_sessions", ""},
		}
		for i, tc := range cases {
			// B has everything of the previous case before its mark.
			sync := fmt.Sprintf("sync-%d", i)
			a.ok(svM{"id": sync, "type": "list_sessions"})
			b.waitLifecycle(0, "command_finished", sync)
			from, fromB := a.mark(), b.mark()
			a.send(tc.frame)
			_, r := a.waitFor(from, "the response to "+tc.name, func(f svFrame) bool { return f.typ() == "response" })
			if r.m["success"] != false || svStr(r.m, "command") != tc.command {
				t.Errorf("%s: want success:false command %q, got %s", tc.name, tc.command, r)
			}
			svNoLifecycle(t, a, from, tc.name+" (requester)")
			// B saw no lifecycle before the sentinel's (sent after) either.
			p := a.snapshot()
			sentinel := ""
			for _, f := range slices.Backward(p) {
				if f.typ() == "response" && strings.HasPrefix(svStr(f.m, "id"), "sentinel-") {
					sentinel = svStr(f.m, "id")
					break
				}
			}
			end, _ := b.waitLifecycle(fromB, "command_accepted", sentinel)
			for _, f := range b.snapshot()[fromB:end] {
				if f.isLifecycle() {
					t.Errorf("%s: B got %s", tc.name, f)
				}
			}
			if tc.id != "" && len(a.lifecycle(tc.id)) > 0 {
				t.Errorf("%s: lifecycle for %s", tc.name, tc.id)
			}
		}
	})
}

// ---------------------------------------------------------------------------
// 4. Replay and idempotency.

func TestServeReplay(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e)
	A := s.dial("A")
	svCreate(A, "s")
	svCreate(A, "s2")
	fileR := filepath.Join(e.root, "r.txt")
	fileK := filepath.Join(e.root, "k.txt")

	t.Run("same id same payload replays", func(t *testing.T) {
		a := A.on(t)
		cmd := svM{"id": "r1", "type": "bash", "sessionId": "s", "command": "echo run >> " + fileR}
		first := a.ok(cmd)
		from := a.mark()
		again := a.call(cmd)
		svEq(t, "replayed", again.m["replayed"], true)
		svEq(t, "id", again.m["id"], "r1")
		svEq(t, "success", again.m["success"], true)
		svEq(t, "data", again.m["data"], first.m["data"])
		svEq(t, "sessionVersion", again.m["sessionVersion"], first.m["sessionVersion"])
		svEq(t, "lines in the file (run once)", len(svLines(t, fileR)), 1)
		// lifecycle of the replay: accepted, finished(replayed), no started
		var phases []string
		var fin svFrame
		for _, f := range a.snapshot()[from:] {
			if f.isLifecycle() && svStr(f.m, "data", "commandId") == "r1" {
				phases = append(phases, f.typ())
				fin = f
			}
		}
		svEq(t, "replay lifecycle", phases, []string{"command_accepted", "command_finished"})
		svEq(t, "replay command_finished replayed", svAt(fin.m, "data", "replayed"), true)
		// a replay does not bump the version
		st := a.must("get_state", svM{"sessionId": "s"})
		svEq(t, "version after replay", svVersion(st), svVersion(first))
	})

	t.Run("same id different payload conflicts", func(t *testing.T) {
		a := A.on(t)
		r := a.call(svM{"id": "r1", "type": "bash", "sessionId": "s", "command": "echo other >> " + fileR})
		svWantErrPrefix(t, r, "Conflicting id 'r1'")
		if svHas(r.m, "replayed") {
			t.Errorf("a conflict is marked replayed: %s", r)
		}
		r = a.call(svM{"id": "r1", "type": "get_state", "sessionId": "s"})
		svWantErrPrefix(t, r, "Conflicting id 'r1'")
		svEq(t, "lines in the file", len(svLines(t, fileR)), 1)
	})

	t.Run("idempotencyKey replays and conflicts", func(t *testing.T) {
		a := A.on(t)
		base := svM{"type": "bash", "sessionId": "s", "idempotencyKey": "key-1", "command": "echo k >> " + fileK}
		with := func(id string, extra svM) svM {
			m := svM{"id": id}
			for k, v := range base {
				m[k] = v
			}
			for k, v := range extra {
				m[k] = v
			}
			return m
		}
		first := a.ok(with("k1", nil))
		from := a.mark()
		again := a.call(with("k2", nil))
		svEq(t, "replayed", again.m["replayed"], true)
		svEq(t, "id is the request's", again.m["id"], "k2")
		svEq(t, "data", again.m["data"], first.m["data"])
		svEq(t, "lines (run once)", len(svLines(t, fileK)), 1)
		var phases []string
		for _, f := range a.snapshot()[from:] {
			if f.isLifecycle() && svStr(f.m, "data", "commandId") == "k2" {
				phases = append(phases, f.typ())
			}
		}
		svEq(t, "replay lifecycle", phases, []string{"command_accepted", "command_finished"})

		r := a.call(with("k3", svM{"command": "echo different >> " + fileK}))
		svWantErrPrefix(t, r, "Conflicting idempotencyKey 'key-1'")
		svEq(t, "lines after the conflict", len(svLines(t, fileK)), 1)

		// the key's scope is the session: the same key on s2 runs.
		r = a.call(with("k4", svM{"sessionId": "s2"}))
		svWantOK(t, r)
		if svHas(r.m, "replayed") {
			t.Errorf("the same key in another session replayed: %s", r)
		}
		svEq(t, "lines after s2", len(svLines(t, fileK)), 2)
	})

	t.Run("an expired idempotencyKey executes again", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{})
		s := svStartInProc(t, e, "--idempotency-ttl", "1s")
		a := s.dial("A")
		svCreate(a, "s")
		file := filepath.Join(e.root, "ttl.txt")
		cmd := func(id string) svM {
			return svM{"id": id, "type": "bash", "sessionId": "s", "idempotencyKey": "ttl-key", "command": "echo x >> " + file}
		}
		a.ok(cmd("t1"))
		svEq(t, "replay inside the TTL", a.call(cmd("t2")).m["replayed"], true)
		time.Sleep(1500 * time.Millisecond) // let the 1 s TTL pass (not a timing assertion)
		r := a.call(cmd("t3"))
		svWantOK(t, r)
		if svHas(r.m, "replayed") {
			t.Errorf("replayed after the TTL: %s", r)
		}
		svEq(t, "lines (ran twice)", len(svLines(t, file)), 2)
	})

	t.Run("replay without id does not leak the stored id", func(t *testing.T) {
		a := A.on(t)
		a.ok(svM{"id": "n1", "type": "set_session_name", "sessionId": "s", "idempotencyKey": "key-n", "name": "named"})
		from := a.mark()
		a.send(svM{"type": "set_session_name", "sessionId": "s", "idempotencyKey": "key-n", "name": "named"})
		_, r := a.waitFor(from, "the replayed set_session_name", func(f svFrame) bool {
			return f.typ() == "response" && svStr(f.m, "command") == "set_session_name"
		})
		svEq(t, "replayed", r.m["replayed"], true)
		if svHas(r.m, "id") {
			t.Errorf("the replay without id carries id %v: %s", r.m["id"], r)
		}
	})
}

// ---------------------------------------------------------------------------
// 5. dependsOn.

func TestServeDependsOn(t *testing.T) {
	t.Parallel()

	t.Run("unknown, failed, self, waits, completed", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{proxy: true})
		s := svStartInProc(t, e)
		a := s.dial("A")
		svCreate(a, "sa")
		svCreate(a, "sb")

		r := a.call(svM{"id": "d-unknown", "type": "set_session_name", "sessionId": "sa", "name": "x", "dependsOn": []string{"nope"}})
		svWantErr(t, r, "Dependency 'nope' is unknown")

		svWantErr(t, a.call(svM{"id": "f1", "type": "set_model", "sessionId": "sa", "provider": "mock", "modelId": "nope"}), "Model not found: mock/nope")
		r = a.call(svM{"id": "d-failed", "type": "set_session_name", "sessionId": "sa", "name": "x", "dependsOn": []string{"f1"}})
		svWantErr(t, r, "Dependency 'f1' failed: Model not found: mock/nope")

		r = a.call(svM{"id": "d-self", "type": "set_session_name", "sessionId": "sa", "name": "x", "dependsOn": []string{"d-self"}})
		svWantErr(t, r, "Command 'd-self' cannot depend on itself")

		r = a.call(svM{"type": "list_sessions", "id": "d-noid-ok"})
		svWantOK(t, r)
		from := a.mark()
		a.send(svM{"type": "list_sessions", "dependsOn": []string{"d-noid-ok"}})
		_, r = a.waitFor(from, "response to dependsOn without id", func(f svFrame) bool { return f.typ() == "response" })
		svWantErrPrefix(t, r, "Validation failed: ")

		// success path: a command in another lane waits for a running prompt
		release := e.proxy.holdAfter("dependency prompt", 2)
		a.cursor = a.mark()
		a.send(svM{"id": "slow", "type": "prompt", "sessionId": "sa", "message": "dependency prompt"})
		a.waitEvent("sa", "message_update")
		a.send(svM{"id": "d-wait", "type": "set_session_name", "sessionId": "sb", "name": "after slow", "dependsOn": []string{"slow"}})
		a.must("get_metrics", nil) // a round trip on another lane
		a.waitLifecycle(0, "command_accepted", "d-wait")
		if slices.ContainsFunc(a.snapshot(), func(f svFrame) bool { return f.isResponse("d-wait") }) {
			t.Errorf("d-wait answered while its dependency still runs")
		}
		close(release)
		svWantOK(t, a.response("slow"))
		di, dr := a.responseFrom(0, "d-wait")
		svWantOK(t, dr)
		fin, _ := a.waitLifecycle(0, "command_finished", "slow")
		if di < fin {
			t.Errorf("d-wait answered (frame %d) before slow finished (frame %d)", di, fin)
		}
		st := a.must("get_state", svM{"sessionId": "sb"})
		svEq(t, "sb renamed after the dependency", svAt(st.m, "data", "sessionName"), "after slow")

		// a completed, successful dependency lets the command run at once
		svWantOK(t, a.call(svM{"id": "d-done", "type": "set_session_name", "sessionId": "sa", "name": "y", "dependsOn": []string{"slow", "d-wait"}}))

		// Spec 9.2: X waits in sa's lane behind a running prompt; its
		// dependency Z is queued behind X in the same lane. When X's turn
		// comes, the server must fail X at once, not deadlock the lane.
		release = e.proxy.holdAfter("lane blocker", 2)
		a.cursor = a.mark()
		a.send(svM{"id": "blocker", "type": "prompt", "sessionId": "sa", "message": "lane blocker"})
		a.waitEvent("sa", "message_update")
		a.send(svM{"id": "inv-x", "type": "set_session_name", "sessionId": "sa", "name": "x", "dependsOn": []string{"inv-z"}})
		a.waitLifecycle(0, "command_accepted", "inv-x")
		a.send(svM{"id": "inv-z", "type": "set_session_name", "sessionId": "sa", "name": "z"})
		a.waitLifecycle(0, "command_accepted", "inv-z")
		close(release)
		svWantOK(t, a.response("blocker"))
		x := a.response("inv-x")
		if msg := svStr(x.m, "error"); x.m["success"] != false ||
			(msg != "Dependency 'inv-z' is queued in the same lane and cannot be awaited from this command" && msg != "Dependency 'inv-z' is unknown") {
			t.Errorf("a same-lane inverted dependency: %s", x)
		}
		svWantOK(t, a.response("inv-z"))
	})

	t.Run("dependency timeout", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{proxy: true})
		s := svStartInProc(t, e, "--dependency-timeout", "1s")
		a := s.dial("A")
		svCreate(a, "sa")
		svCreate(a, "sb")
		release := e.proxy.holdAfter("never ends in time", 2)
		defer close(release)
		a.cursor = a.mark()
		a.send(svM{"id": "slow2", "type": "prompt", "sessionId": "sa", "message": "never ends in time"})
		a.waitEvent("sa", "message_update")
		r := a.call(svM{"id": "d-to", "type": "set_session_name", "sessionId": "sb", "name": "x", "dependsOn": []string{"slow2"}})
		svWantErr(t, r, "Command 'dependsOn:slow2' timed out after 1000ms")
	})
}

// ---------------------------------------------------------------------------
// 6. sessionVersion.

func TestServeSessionVersion(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e)
	a := s.dial("A")
	const sid = "v"
	r := svCreate(a, sid)
	svEq(t, "version after create_session", svVersion(r), 0)

	version := 0
	mutations := []struct {
		typ    string
		fields svM
	}{
		{"set_session_name", svM{"name": "one"}},
		{"set_auto_retry", svM{"enabled": false}},
		{"prompt", svM{"message": "bump me"}},
		{"set_thinking_level", svM{"level": "low"}},
		{"bash", svM{"command": "true"}},
		{"set_auto_compaction", svM{"enabled": true}},
	}
	reads := []string{"get_state", "get_messages", "get_session_stats", "get_last_assistant_text", "get_context_usage",
		"get_fork_messages", "get_available_models", "get_commands", "get_skills", "get_tools", "list_session_files", "switch_session"}
	checkReads := func(t *testing.T, want int) {
		t.Helper()
		for _, typ := range reads {
			r := a.do(typ, svM{"sessionId": sid})
			if svWantOK(t, r) {
				svEq(t, typ+" sessionVersion", svVersion(r), want)
			}
		}
	}
	t.Run("reads do not bump", func(t *testing.T) { checkReads(t, 0) })
	for _, m := range mutations {
		t.Run(m.typ+" bumps by one", func(t *testing.T) {
			f := svM{"sessionId": sid}
			for k, v := range m.fields {
				f[k] = v
			}
			r := a.on(t).must(m.typ, f)
			version++
			svEq(t, m.typ+" sessionVersion", svVersion(r), version)
		})
	}
	t.Run("reads after mutations", func(t *testing.T) { checkReads(t, version) })
	t.Run("a failed command does not bump", func(t *testing.T) {
		a.on(t).do("set_model", svM{"sessionId": sid, "provider": "mock", "modelId": "nope"})
		svEq(t, "version", svVersion(a.on(t).must("get_state", svM{"sessionId": sid})), version)
	})
	t.Run("failures carry no sessionVersion", func(t *testing.T) {
		c := a.on(t)
		svNoVersionOnFailure(t, c.do("set_model", svM{"sessionId": sid, "provider": "mock", "modelId": "nope"}))
		svNoVersionOnFailure(t, c.do("load_session", svM{"sessionPath": "relative.jsonl"}))
		svNoVersionOnFailure(t, c.do("create_session", svM{"sessionId": sid}))
	})
	t.Run("ifSessionVersion", func(t *testing.T) {
		c := a.on(t)
		r := c.call(svM{"id": "ifv-ok", "type": "set_session_name", "sessionId": sid, "name": "two", "ifSessionVersion": version})
		if svWantOK(t, r) {
			version++
			svEq(t, "version after a matching write", svVersion(r), version)
		}
		r = c.call(svM{"id": "ifv-bad", "type": "set_session_name", "sessionId": sid, "name": "three", "ifSessionVersion": 3})
		svWantErr(t, r, fmt.Sprintf("Session version mismatch: expected 3, got %d", version))
		svNoVersionOnFailure(t, r)
		st := c.must("get_state", svM{"sessionId": sid})
		svEq(t, "name unchanged after the mismatch", svAt(st.m, "data", "sessionName"), "two")
		svEq(t, "version unchanged after the mismatch", svVersion(st), version)

		r = c.call(svM{"id": "ifv-ghost", "type": "set_session_name", "sessionId": "ghost", "name": "x", "ifSessionVersion": 0})
		if b, _ := r.m["success"].(bool); b || !strings.Contains(svStr(r.m, "error"), "Session ghost not found") {
			t.Errorf("ifSessionVersion on a missing session: %s", r)
		}
		svWantErrPrefix(t, c.call(svM{"id": "ifv-server", "type": "list_sessions", "ifSessionVersion": 0}), "Validation failed: ")
	})
	t.Run("delete_session removes the version", func(t *testing.T) {
		c := a.on(t)
		c.must("delete_session", svM{"sessionId": sid})
		svEq(t, "version of a re-created session", svVersion(svCreate(c, sid)), 0)
	})
}

// ---------------------------------------------------------------------------
// 7. Limits and bad input.

// svPadded is a command frame of exactly n bytes.
func svPadded(id string, n int) string {
	head := fmt.Sprintf(`{"id":%q,"type":"list_sessions","pad":"`, id)
	return head + strings.Repeat("x", n-len(head)-2) + `"}`
}

// svUntilFailure sends cmd (fresh ids) up to n times and returns how many
// succeeded before the first failure, and that failure.
func svUntilFailure(c *svConn, n int, typ string, fields svM) (int, svFrame) {
	c.t.Helper()
	for i := range n {
		r := c.do(typ, fields)
		if b, _ := r.m["success"].(bool); !b {
			return i, r
		}
	}
	return n, svFrame{}
}

func TestServeLimits(t *testing.T) {
	t.Parallel()

	t.Run("max-frame-bytes", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{})
		s := svStartInProc(t, e, "--max-frame-bytes", "4096")
		a := s.dial("A")
		from := a.mark()
		a.send(svPadded("big", 5000))
		_, r := a.waitFor(from, "the oversize response", func(f svFrame) bool { return f.typ() == "response" })
		svEq(t, "oversize response", r.m, svM{"type": "response", "command": "unknown", "success": false, "error": "Message size 5000 exceeds limit 4096"})
		svNoLifecycle(t, a, from, "oversize frame")
		// the connection stays usable, and a frame of exactly the limit passes
		r = a.call(svM{"id": "after", "type": "list_sessions"})
		svWantOK(t, r)
		from = a.mark()
		a.send(svPadded("edge", 4096))
		_, r = a.waitFor(from, "the response to a frame of exactly the limit", func(f svFrame) bool { return f.typ() == "response" })
		if strings.Contains(svStr(r.m, "error"), "Message size") {
			t.Errorf("a frame of exactly --max-frame-bytes was refused: %s", r)
		}
		m := a.must("get_metrics", nil)
		svEq(t, "commandsRejected.messageSize", svAt(m.m, "data", "commandsRejected", "messageSize"), 1)
	})

	t.Run("malformed and invalid commands", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{})
		s := svStartInProc(t, e)
		a := s.dial("A")
		svCreate(a, "s")
		for _, frame := range []string{`{"type":`, `not json at all`, `{"type":"list_sessions"} trailing`} {
			from := a.mark()
			a.send(frame)
			_, r := a.waitFor(from, "response to "+frame, func(f svFrame) bool { return f.typ() == "response" })
			svEq(t, "command for "+frame, r.m["command"], "unknown")
			svWantErrPrefix(t, r, "Invalid JSON")
			svNoLifecycle(t, a, from, frame)
		}
		for _, frame := range []string{`[1,2]`, `"a string"`, `null`, `42`} {
			from := a.mark()
			a.send(frame)
			_, r := a.waitFor(from, "response to "+frame, func(f svFrame) bool { return f.typ() == "response" })
			if b, ok := r.m["success"].(bool); !ok || b {
				t.Errorf("frame %s (not an object): %s", frame, r)
			}
			svNoLifecycle(t, a, from, frame)
		}
		cases := []struct {
			name, frame, id, command string
		}{
			{"missing type", `{"id":"v-notype"}`, "v-notype", ""},
			{"type not a string", `{"id":"v-typenum","type":42}`, "v-typenum", ""},
			{"message not a string", `{"id":"v-msg","type":"prompt","sessionId":"s","message":5}`, "v-msg", "prompt"},
			{"prompt without message", `{"id":"v-nomsg","type":"prompt","sessionId":"s"}`, "v-nomsg", "prompt"},
			{"bash without command", `{"id":"v-nocmd","type":"bash","sessionId":"s"}`, "v-nocmd", "bash"},
			{"session command without sessionId", `{"id":"v-nosid","type":"get_state"}`, "v-nosid", "get_state"},
			{"empty id", `{"id":"","type":"list_sessions"}`, "", "list_sessions"},
			{"dependsOn not an array", `{"id":"v-deps","type":"list_sessions","dependsOn":"x"}`, "v-deps", "list_sessions"},
			{"negative ifSessionVersion", `{"id":"v-ifsv","type":"get_state","sessionId":"s","ifSessionVersion":-1}`, "v-ifsv", "get_state"},
			{"enabled not a boolean", `{"id":"v-en","type":"set_auto_retry","sessionId":"s","enabled":"yes"}`, "v-en", "set_auto_retry"},
		}
		for _, tc := range cases {
			from := a.mark()
			a.send(tc.frame)
			_, r := a.waitFor(from, "response to "+tc.name, func(f svFrame) bool { return f.typ() == "response" })
			svWantErrPrefix(t, r, "Validation failed: ")
			if tc.command != "" {
				svEq(t, tc.name+": command", r.m["command"], tc.command)
			}
			svNoLifecycle(t, a, from, tc.name)
		}
		from := a.mark()
		r := a.call(svM{"id": "u1", "type": "frobnicate"})
		svEq(t, "unknown command", r.m, svM{"type": "response", "id": "u1", "command": "frobnicate", "success": false,
			"error": "Validation failed: type: Unknown command type 'frobnicate'"})
		svNoLifecycle(t, a, from, "unknown command")
		svWantOK(t, a.call(svM{"id": "still-fine", "type": "list_sessions"}))
	})

	t.Run("rate-limit", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{})
		s := svStartInProc(t, e, "--rate-limit", "5", "--global-rate-limit", "0")
		a := s.dial("A")
		svCreate(a, "s")
		n, r := svUntilFailure(a, 8, "get_state", svM{"sessionId": "s"})
		svWantErr(t, r, "Rate limit exceeded (5 commands/minute)")
		if n < 1 || n > 5 {
			t.Errorf("%d get_state passed before the limit of 5/minute", n)
		}
		// the limit is per session: another session and server commands go on
		svCreate(a, "other")
		svWantOK(t, a.do("get_state", svM{"sessionId": "other"}))
		svWantOK(t, a.do("list_sessions", nil))
		svWantErr(t, a.do("get_state", svM{"sessionId": "s"}), "Rate limit exceeded (5 commands/minute)")
	})

	t.Run("global-rate-limit", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{})
		s := svStartInProc(t, e, "--global-rate-limit", "5", "--rate-limit", "0")
		a := s.dial("A")
		n, r := svUntilFailure(a, 8, "list_sessions", nil)
		svWantErr(t, r, "Global rate limit exceeded (5 commands/minute)")
		if n < 1 || n > 5 {
			t.Errorf("%d commands passed before the global limit of 5/minute", n)
		}
		b := s.dial("B")
		svWantErr(t, b.do("health_check", nil), "Global rate limit exceeded (5 commands/minute)")
	})

	t.Run("max-sessions", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{})
		s := svStartInProc(t, e, "--max-sessions", "2")
		a := s.dial("A")
		svCreate(a, "one")
		svCreate(a, "two")
		svWantErr(t, a.do("create_session", svM{"sessionId": "three"}), "Session limit reached (2 sessions)")
		svWantErr(t, a.do("create_session", nil), "Session limit reached (2 sessions)")
		a.must("delete_session", svM{"sessionId": "one"})
		svCreate(a, "three")
	})

	t.Run("max-connections", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{})
		s := svStartInProc(t, e, "--max-connections", "2")
		s.dial("A")
		b := s.dial("B")
		c := s.dialRaw(t, svDialOpts{name: "C"})
		code, reason := c.waitClosed()
		svEq(t, "close code", code, websocket.StatusTryAgainLater)
		svEq(t, "close reason", reason, "Connection limit reached (2 connections)")
		if fs := c.snapshot(); len(fs) > 0 {
			t.Errorf("a refused connection got frames, first: %s", fs[0])
		}
		// a freed slot is usable again
		b.close()
		svWaitUntil(t, "a connection after one closed", func() bool {
			d := s.dialRaw(t, svDialOpts{name: "D"})
			_, f, err := d.tryWaitFor(0, svWait, func(svFrame) bool { return true })
			if err == nil && f.typ() == "server_ready" {
				return true
			}
			d.stop()
			return false
		})
	})

	t.Run("max-pending", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{proxy: true})
		s := svStartInProc(t, e, "--max-pending", "2")
		a := s.dial("A")
		b := s.dial("B")
		svCreate(a, "s")
		release := e.proxy.holdAfter("keep pending", 2)
		a.cursor = a.mark()
		a.send(svM{"id": "pend-1", "type": "prompt", "sessionId": "s", "message": "keep pending"})
		a.waitEvent("s", "message_update")
		a.send(svM{"id": "pend-2", "type": "set_session_name", "sessionId": "s", "name": "queued"})
		a.waitLifecycle(0, "command_accepted", "pend-2")
		svWantErr(t, a.call(svM{"id": "pend-3", "type": "set_session_name", "sessionId": "s", "name": "too many"}),
			"Too many pending commands on this connection (max 2)")
		// the limit is per connection
		b.send(svM{"id": "pend-b", "type": "set_session_name", "sessionId": "s", "name": "from b"})
		b.waitLifecycle(0, "command_accepted", "pend-b")
		close(release)
		svWantOK(t, a.response("pend-1"))
		svWantOK(t, a.response("pend-2"))
		svWantOK(t, b.response("pend-b"))
		// once drained, the connection takes commands again
		svWantOK(t, a.call(svM{"id": "pend-4", "type": "get_state", "sessionId": "s"}))
	})
}

// ---------------------------------------------------------------------------
// 8. Authentication.

func TestServeAuth(t *testing.T) {
	t.Parallel()

	t.Run("non-loopback host needs a token", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{})
		code, stderr := svRunExit(t, e, nil, "--host", "0.0.0.0")
		if code != 2 || !strings.Contains(stderr, "--token") {
			t.Errorf("serve --host 0.0.0.0 without a token: exit %d (want 2), stderr:\n%s", code, stderr)
		}
	})

	t.Run("token", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{})
		s := svStart(t, e, "--token", "s3cret-s3cret-s3cret")
		refused := []struct {
			name   string
			o      svDialOpts
			reason string
		}{
			{"no token", svDialOpts{}, "Missing authorization token"},
			{"bad bearer", svDialOpts{header: map[string][]string{"Authorization": {"Bearer wrong"}}}, "Invalid token"},
			{"bad query token", svDialOpts{query: "token=wrong"}, "Invalid token"},
		}
		for _, tc := range refused {
			t.Run(tc.name, func(t *testing.T) {
				c := s.dialRaw(t, tc.o)
				code, reason := c.waitClosed()
				svEq(t, "close code", code, websocket.StatusPolicyViolation)
				svEq(t, "close reason", reason, tc.reason)
				if fs := c.snapshot(); len(fs) > 0 {
					t.Errorf("an unauthenticated connection got frames, first: %s", fs[0])
				}
			})
		}
		accepted := []struct {
			name string
			o    svDialOpts
		}{
			{"bearer header", svDialOpts{header: map[string][]string{"Authorization": {"Bearer s3cret-s3cret-s3cret"}}}},
			{"query token", svDialOpts{query: "token=s3cret-s3cret-s3cret"}},
		}
		for _, tc := range accepted {
			t.Run(tc.name, func(t *testing.T) {
				c := s.dialRaw(t, tc.o)
				c.ready()
				svWantOK(t, c.call(svM{"id": "x", "type": "list_sessions"}))
			})
		}
		t.Run("http endpoints stay open", func(t *testing.T) {
			for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
				code, _, body := svHTTPGet(t, s, p)
				if code != 200 {
					t.Errorf("GET %s without a token: %d %s", p, code, e2eClip(body, 200))
				}
			}
		})
	})

	t.Run("token from AGENTD_TOKEN on a wildcard host", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{})
		s := svLaunch(t, e, svOpts{env: []string{"AGENTD_TOKEN=env-secret-env-secret"}}, "--host", "0.0.0.0")
		c := s.dialRaw(t, svDialOpts{header: map[string][]string{"Authorization": {"Bearer env-secret-env-secret"}}})
		c.ready()
		d := s.dialRaw(t, svDialOpts{})
		code, reason := d.waitClosed()
		svEq(t, "close without a token", fmt.Sprint(code, " ", reason), fmt.Sprint(websocket.StatusPolicyViolation, " Missing authorization token"))
	})
}

// ---------------------------------------------------------------------------
// 9, 10. Port in use; HTTP endpoints.

func TestServePortInUse(t *testing.T) {
	t.Parallel()
	s := svStart(t, e2eNewEnv(t, e2eOpts{}))
	code, stderr := svRunExit(t, e2eNewEnv(t, e2eOpts{}), nil, "--port", s.port())
	if code != 1 || !strings.Contains(stderr, "address already in use") || !strings.Contains(stderr, "127.0.0.1:"+s.port()) {
		t.Errorf("a second serve on port %s: exit %d (want 1), stderr:\n%s", s.port(), code, stderr)
	}
	// the first one is unaffected
	svWantOK(t, s.dial("A").call(svM{"id": "x", "type": "health_check"}))
}

func TestServeHTTPEndpoints(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e)
	a := s.dial("A")
	svCreate(a, "s")
	svPrompt(a, "s", "count me")
	code, h, body := svHTTPGet(t, s, "/metrics")
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
		t.Errorf("/metrics: %d %q", code, h.Get("Content-Type"))
	}
	if !strings.Contains(body, "# TYPE agentd_") {
		t.Errorf("/metrics has no agentd_ metric:\n%s", e2eClip(body, 2000))
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _, body := svHTTPGet(t, s, p); code != 200 {
			t.Errorf("GET %s: %d %s", p, code, e2eClip(body, 200))
		}
	}
}

// ---------------------------------------------------------------------------
// 11. kill -9 and restart: the journal.

func TestServeJournalSurvivesKill9(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStart(t, e)
	a := s.dial("A")
	svCreate(a, "j")
	byID := filepath.Join(e.root, "by-id.txt")
	byKey := filepath.Join(e.root, "by-key.txt")
	cmd := svM{"id": "append-once", "type": "bash", "sessionId": "j", "command": "echo ran >> " + byID}
	first := a.ok(cmd)
	keyed := func(id string) svM {
		return svM{"id": id, "idempotencyKey": "append-key", "type": "bash", "sessionId": "j", "command": "echo ran >> " + byKey}
	}
	firstK := a.ok(keyed("key-first"))
	svEq(t, "lines before the kill", len(svLines(t, byID))+len(svLines(t, byKey)), 2)

	s.kill9()
	s2 := s.restart()
	b := s2.dial("B")

	from := b.mark()
	again := b.call(cmd)
	svEq(t, "replayed after restart", again.m["replayed"], true)
	svEq(t, "success", again.m["success"], true)
	svEq(t, "id", again.m["id"], "append-once")
	svEq(t, "data", again.m["data"], first.m["data"])
	svEq(t, "sessionVersion", again.m["sessionVersion"], first.m["sessionVersion"])
	svEq(t, "lines in the by-id file (executed once)", len(svLines(t, byID)), 1)
	var phases []string
	for _, f := range b.snapshot()[from:] {
		if f.isLifecycle() && svStr(f.m, "data", "commandId") == "append-once" {
			phases = append(phases, f.typ())
		}
	}
	svEq(t, "replay lifecycle after restart", phases, []string{"command_accepted", "command_finished"})

	againK := b.call(keyed("key-second"))
	svEq(t, "idempotencyKey replayed after restart", againK.m["replayed"], true)
	svEq(t, "idempotencyKey replay id", againK.m["id"], "key-second")
	svEq(t, "idempotencyKey replay data", againK.m["data"], firstK.m["data"])
	svEq(t, "lines in the by-key file (executed once)", len(svLines(t, byKey)), 1)

	conflict := svM{}
	for k, v := range cmd {
		conflict[k] = v
	}
	conflict["command"] = "echo other >> " + byID
	svWantErrPrefix(t, b.call(conflict), "Conflicting id 'append-once'")
	svEq(t, "lines after the conflict", len(svLines(t, byID)), 1)
}

// ---------------------------------------------------------------------------
// 12. afterSeq resume.

func TestServeAfterSeqResume(t *testing.T) {
	t.Parallel()

	t.Run("resume from the middle, then live", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{})
		s := svStartInProc(t, e)
		A := s.dial("A") // watches: created the session
		B := s.dial("B") // runs prompts, not subscribed
		const sid = "watched"
		svCreate(A, sid)
		svPrompt(B, sid, "first run")
		// The run is over once B has its response; the session's last seq
		// then is what A must have seen (state_changed follows agent_end).
		latest, _ := svNum(B.must("get_state", svM{"sessionId": sid}).m, "data", "seq")
		A.waitFor(0, "the session's latest event", func(f svFrame) bool {
			n, _ := svNum(f.m, "seq")
			return f.isEvent(sid, "") && n == latest
		})
		evA := A.events(sid)
		if len(evA) < 4 {
			t.Fatalf("only %d events for a prompt", len(evA))
		}
		mid, _ := svNum(evA[len(evA)/2].m, "seq")

		C := s.dial("C")
		r := C.ok(svM{"id": "resume", "type": "switch_session", "sessionId": sid, "afterSeq": mid})
		respIdx := svIndex(C.snapshot(), func(f svFrame) bool { return f.isResponse("resume") })
		svEq(t, "resumed", svAt(r.m, "data", "resumed"), true)
		svEq(t, "seq (latest)", svAt(r.m, "data", "seq"), latest)
		svEq(t, "sessionInfo.sessionId", svAt(r.m, "data", "sessionInfo", "sessionId"), sid)
		if svHas(r.m, "data", "cursorTooOld") && svAt(r.m, "data", "cursorTooOld") != false {
			t.Errorf("cursorTooOld on a retained cursor: %s", r)
		}
		C.waitFor(0, "the replayed event with the latest seq", func(f svFrame) bool {
			n, _ := svNum(f.m, "seq")
			return f.isEvent(sid, "") && n == latest
		})

		// then live events, to A and C alike
		svPrompt(B, sid, "second run")
		last, _ := svNum(B.must("get_state", svM{"sessionId": sid}).m, "data", "seq")
		for _, w := range []*svConn{A, C} {
			w.waitFor(0, "the session's last event", func(f svFrame) bool {
				n, _ := svNum(f.m, "seq")
				return f.isEvent(sid, "") && n == last
			})
		}
		// C's events: exactly A's after mid, in order, no gaps, no duplicates
		evA = A.events(sid)
		var want []string
		for _, f := range evA {
			if n, _ := svNum(f.m, "seq"); n > mid {
				m := f.m
				if n <= latest {
					m = svDeltaForm(m)
				}
				want = append(want, svJSON(m))
			}
		}
		var got []string
		for i, f := range C.snapshot() {
			if f.isEvent(sid, "") {
				got = append(got, svJSON(f.m))
				if i < respIdx {
					t.Errorf("event frame %d before the switch_session response (frame %d)", i, respIdx)
				}
			}
		}
		var differ []int
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				if len(differ) == 0 {
					t.Errorf("first difference at %d:\n got  %s\n want %s", i, e2eClip(got[i], 1500), e2eClip(want[i], 1500))
				}
				differ = append(differ, i)
			}
		}
		if len(differ) > 0 {
			t.Errorf("C's events differ from A's at indexes %v (latest seq at the resume was %v)", differ, latest)
		}
		if !slices.Equal(got, want) {
			t.Errorf("C's events after afterSeq=%v differ from A's:\n got %d events, seqs %v\nwant %d events, seqs %v",
				mid, len(got), svSeqs(C.events(sid)), len(want), svSeqsAfter(evA, mid))
		}
	})

	t.Run("resume while events stream", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{})
		e.tweak("long stream", func(s *wiremock.Script) {
			s.Text = e2eChunks(strings.Repeat("abcdefgh", 150), 4)
			s.Delay = 2 * time.Millisecond
		})
		s := svStartInProc(t, e)
		A := s.dial("A")
		const sid = "live"
		svCreate(A, sid)
		A.send(svM{"id": "long", "type": "prompt", "sessionId": sid, "message": "long stream"})
		// resume from the 10th event while the model is still streaming
		A.cursor = 1
		for range 30 {
			A.waitEvent(sid, "")
		}
		from, _ := svNum(A.events(sid)[9].m, "seq")
		C := s.dial("C")
		r := C.ok(svM{"id": "resume", "type": "switch_session", "sessionId": sid, "afterSeq": from})
		svEq(t, "resumed", svAt(r.m, "data", "resumed"), true)
		svWantOK(t, A.response("long"))
		A.cursor, C.cursor = 0, 0
		// The run's last event is the state_changed to idle after
		// agent_end; both wait for it, or C may be compared one event
		// short of A.
		for _, c := range []*svConn{A, C} {
			c.waitEvent(sid, "agent_end")
			c.waitEvent(sid, "state_changed")
		}
		want, got := svSeqsAfter(A.events(sid), from), svSeqs(C.events(sid))
		if !slices.Equal(got, want) {
			t.Errorf("resumed at seq %v during a stream: C got seqs %v\nwant %v", from, got, want)
		}
		// (the payloads are compared in "resume from the middle, then live")
	})

	t.Run("cursor too old", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{})
		s := svStartInProc(t, e, "--event-log-size", "3")
		A := s.dial("A")
		const sid = "old"
		svCreate(A, sid)
		svPrompt(A, sid, "many events")
		C := s.dial("C")
		r := C.ok(svM{"id": "resume", "type": "switch_session", "sessionId": sid, "afterSeq": 1})
		svEq(t, "resumed", svAt(r.m, "data", "resumed"), false)
		svEq(t, "cursorTooOld", svAt(r.m, "data", "cursorTooOld"), true)
		svEq(t, "messages (the whole context)", svTexts(svArr(r.m, "data", "messages")), []string{"many events", svAnswer("many events")})
		latest, _ := svNum(r.m, "data", "seq")
		svPrompt(A, sid, "live after")
		C.cursor = 0
		C.waitEvent(sid, "agent_end")
		for _, f := range C.events(sid) {
			if n, _ := svNum(f.m, "seq"); n <= latest {
				t.Errorf("an old event after cursorTooOld: %s", f)
			}
		}
	})
}

func svSeqs(fs []svFrame) []float64 {
	var out []float64
	for _, f := range fs {
		n, _ := svNum(f.m, "seq")
		out = append(out, n)
	}
	return out
}

func svSeqsAfter(fs []svFrame, after float64) []float64 {
	var out []float64
	for _, n := range svSeqs(fs) {
		if n > after {
			out = append(out, n)
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// 13. Extension UI: an approval answered from a second connection.

func TestServeApprovalFromSecondConnection(t *testing.T) {
	t.Parallel()

	t.Run("answered by B", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{})
		s := svStartInProc(t, e, "--policy", e.writePolicy(`{"rules":[{"tool":"bash","action":"ask"}]}`))
		A := s.dial("A")
		B := s.dial("B")
		const sid = "ask"
		svCreate(A, sid)
		B.must("switch_session", svM{"sessionId": sid})
		A.send(svM{"id": "p1", "type": "prompt", "sessionId": sid, "message": "USE_TOOL"})
		reqA := A.waitEvent(sid, "extension_ui_request")
		reqB := B.waitEvent(sid, "extension_ui_request")
		rid := svStr(reqA.m, "event", "requestId")
		svEq(t, "same request on both", reqB.m, reqA.m)
		ev := reqA.m["event"]
		svEq(t, "method", svAt(ev, "method"), "select")
		// The gate names the tool in the title and puts the command in the
		// message.
		svEq(t, "message", svAt(ev, "message"), "echo hello-from-tool")
		if !svEq(t, "title", svAt(ev, "title"), "Allow bash?") {
			t.Logf("the request: %s", reqA)
		}
		svEq(t, "options", svAt(ev, "options"), []string{"Allow", "Always allow this tool in this session", "Skip", "Reject"})
		if n, ok := svNum(ev, "timeout"); !ok || n <= 0 {
			t.Errorf("no timeout in ms: %s", reqA)
		}
		if rid == "" {
			t.Fatalf("no requestId: %s", reqA)
		}
		answer := func(id string) svM {
			return svM{"id": id, "type": "extension_ui_response", "sessionId": sid, "requestId": rid,
				"response": svM{"method": "select", "value": "Allow"}}
		}
		svWantOK(t, B.call(answer("ans-b")))
		want := svM{"type": "extension_ui_resolved", "requestId": rid, "outcome": "answered"}
		svEq(t, "resolved on A", A.waitEvent(sid, "extension_ui_resolved").m["event"], want)
		svEq(t, "resolved on B", B.waitEvent(sid, "extension_ui_resolved").m["event"], want)
		te := A.waitEvent(sid, "tool_execution_end")
		svEq(t, "tool isError", svAt(te.m, "event", "isError"), false)
		if !strings.Contains(te.raw, "hello-from-tool") {
			t.Errorf("the approved tool did not run: %s", te)
		}
		svWantErr(t, A.call(answer("ans-a")), "Request "+rid+" already settled")
		svWantOK(t, A.response("p1"))
		unknown := answer("ans-unknown")
		unknown["requestId"] = "nope"
		svWantErr(t, A.call(unknown), "No pending UI request with id nope")
	})

	t.Run("unanswered request times out", func(t *testing.T) {
		t.Parallel()
		e := e2eNewEnv(t, e2eOpts{})
		s := svStartInProc(t, e, "--policy", e.writePolicy(`{"rules":[{"tool":"bash","action":"ask"}]}`), "--ui-timeout", "1s")
		A := s.dial("A")
		const sid = "ask"
		svCreate(A, sid)
		A.send(svM{"id": "p1", "type": "prompt", "sessionId": sid, "message": "CMD:echo never-approved"})
		req := A.waitEvent(sid, "extension_ui_request")
		if n, ok := svNum(req.m, "event", "timeout"); !ok || n <= 0 || n > 1000 {
			t.Errorf("timeout with --ui-timeout 1s: %s", req)
		}
		res := A.waitEvent(sid, "extension_ui_resolved")
		svEq(t, "resolved", res.m["event"], svM{"type": "extension_ui_resolved", "requestId": svStr(req.m, "event", "requestId"), "outcome": "timeout"})
		svWantOK(t, A.response("p1"))
		te := A.waitEvent(sid, "tool_execution_end")
		if strings.Contains(svStr(te.m, "event", "result", "content", "0", "text"), "never-approved\n") {
			t.Errorf("an unanswered approval ran the tool: %s", te)
		}
	})
}

// ---------------------------------------------------------------------------
// 14. SIGTERM drain.

func TestServeSigtermDrain(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{proxy: true})
	s := svStart(t, e, "--shutdown-timeout", "20s")
	A := s.dial("A")
	B := s.dial("B")
	svCreate(A, "s")
	release := e.proxy.holdAfter("drain me", 2)
	A.cursor = A.mark()
	A.send(svM{"id": "running", "type": "prompt", "sessionId": "s", "message": "drain me"})
	A.waitEvent("s", "message_update")

	s.sigterm()
	want := svM{"type": "server_shutdown", "data": svM{"reason": "graceful_shutdown", "timeoutMs": 20000}}
	A.cursor, B.cursor = 0, 0
	svEq(t, "server_shutdown on A", A.waitType("server_shutdown").m, want)
	svEq(t, "server_shutdown on B", B.waitType("server_shutdown").m, want)

	from := B.mark()
	svWantErr(t, B.call(svM{"id": "late", "type": "list_sessions"}), "Server is shutting down")
	svWantErr(t, A.call(svM{"id": "late-a", "type": "get_state", "sessionId": "s"}), "Server is shutting down")
	for _, f := range B.snapshot()[from:] {
		if f.isLifecycle() {
			t.Errorf("a command refused for shutdown emitted %s", f)
		}
	}
	if slices.ContainsFunc(A.snapshot(), func(f svFrame) bool { return f.isResponse("running") }) {
		t.Errorf("the running prompt answered before its stream was released")
	}

	close(release)
	i, r := A.responseFrom(0, "running")
	svWantOK(t, r)
	if j := svIndex(A.snapshot(), func(f svFrame) bool { return f.isEvent("s", "agent_end") }); j < 0 || j > i {
		t.Errorf("the drained prompt has no agent_end before its response")
	}
	for _, c := range []*svConn{A, B} {
		code, reason := c.waitClosed()
		svEq(t, c.name+" close", fmt.Sprint(code, " ", reason), fmt.Sprint(websocket.StatusGoingAway, " Server shutting down"))
	}
	svEq(t, "exit code", s.waitExit(), 0)
}

// ---------------------------------------------------------------------------
// 15. stdio.

func TestServeStdio(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s, c := svStartStdio(t, e, "--max-frame-bytes", "4096")
	c.ready()
	r := svCreate(c, "s")
	svEq(t, "create_session", svAt(r.m, "data", "sessionId"), "s")
	from := c.mark()
	p := c.call(svM{"id": "p1", "type": "prompt", "sessionId": "s", "message": "over stdio"})
	svWantOK(t, p)
	respIdx := svIndex(c.snapshot(), func(f svFrame) bool { return f.isResponse("p1") })
	endIdx := svIndex(c.snapshot()[from:], func(f svFrame) bool { return f.isEvent("s", "agent_end") })
	if endIdx < 0 || from+endIdx > respIdx {
		t.Errorf("no agent_end event before the prompt response on stdio")
	}
	svCheckLifecycle(t, c, "p1", "prompt", "s", respIdx)
	svEq(t, "messages", svTexts(svMessages(c, "s")), []string{"over stdio", svAnswer("over stdio")})

	from = c.mark()
	c.send(svPadded("big", 5000))
	_, big := c.waitFor(from, "the oversize response", func(f svFrame) bool { return f.typ() == "response" })
	svEq(t, "oversize line", big.m, svM{"type": "response", "command": "unknown", "success": false, "error": "Message size 5000 exceeds limit 4096"})
	from = c.mark()
	c.send(`{"type":`)
	_, bad := c.waitFor(from, "the bad JSON response", func(f svFrame) bool { return f.typ() == "response" })
	svWantErrPrefix(t, bad, "Invalid JSON")
	svWantOK(t, c.call(svM{"id": "after", "type": "list_sessions"}))

	s.closeStdin()
	svEq(t, "exit code after EOF", s.waitExit(), 0)
	c.stop()
	if bad := c.badFrames(); len(bad) > 0 {
		t.Errorf("stdout has %d lines that are not one JSON object, first: %s", len(bad), e2eClip(bad[0], 300))
	}
}

// ---------------------------------------------------------------------------
// Spec section 11: a command timeout is a terminal stored outcome.

func TestServeCommandTimeout(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e, "--command-timeout", "1s")
	a := s.dial("A")
	svCreate(a, "s")
	cmd := svM{"id": "slow-bash", "type": "bash", "sessionId": "s", "command": "sleep 30; echo late >> " + filepath.Join(e.root, "late.txt")}
	r := a.call(cmd)
	svNoVersionOnFailure(t, r)
	delete(r.m, "sessionVersion")
	want := svM{"type": "response", "id": "slow-bash", "command": "bash", "success": false, "timedOut": true,
		"error": "Command 'bash' timed out after 1000ms"}
	svEq(t, "timeout response", r.m, want)
	respIdx := svIndex(a.snapshot(), func(f svFrame) bool { return f.isResponse("slow-bash") })
	fin := svCheckLifecycle(t, a, "slow-bash", "bash", "s", respIdx)
	svEq(t, "command_finished timedOut", svAt(fin.m, "data", "timedOut"), true)
	svEq(t, "command_finished success", svAt(fin.m, "data", "success"), false)

	// the lane goes on, and a replay returns the same stored timeout
	svWantOK(t, a.do("bash", svM{"sessionId": "s", "command": "true"}))
	again := a.call(cmd)
	delete(again.m, "sessionVersion")
	want["replayed"] = true
	svEq(t, "replayed timeout", again.m, want)
	if lines := svLines(t, filepath.Join(e.root, "late.txt")); lines != nil {
		t.Errorf("the timed-out bash ran to its end: %v", lines)
	}
}

// svDeltaForm is an event as the session log keeps it: a replayed
// message_update carries its delta but not the partial message (the log
// stays small; message_end carries the whole message).
func svDeltaForm(m map[string]any) map[string]any {
	ev, _ := m["event"].(map[string]any)
	if ev == nil || ev["type"] != "message_update" {
		return m
	}
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	e2 := map[string]any{}
	for k, v := range ev {
		if k != "message" {
			e2[k] = v
		}
	}
	if ame, ok := ev["assistantMessageEvent"].(map[string]any); ok {
		a2 := map[string]any{}
		for k, v := range ame {
			if k != "partial" {
				a2[k] = v
			}
		}
		e2["assistantMessageEvent"] = a2
	}
	out["event"] = e2
	return out
}

// ?lifecycle=own: a client that opts out of the global broadcast gets the
// lifecycle events of its own commands and no one else's; the others still
// get everything.
func TestServeOwnLifecycle(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e)
	own := s.dialRaw(t, svDialOpts{name: "own", query: "lifecycle=own"})
	own.ready()
	all := s.dial("all")
	svWantOK(t, all.call(svM{"id": "theirs", "type": "list_sessions"}))
	svWantOK(t, own.call(svM{"id": "mine", "type": "list_sessions"}))
	// "all" sees both commands' lifecycles; "own" only its own.
	all.waitFor(0, "command_finished of mine", func(f svFrame) bool {
		return f.typ() == "command_finished" && svStr(f.m, "data", "commandId") == "mine"
	})
	for _, f := range own.snapshot() {
		if strings.HasPrefix(f.typ(), "command_") && svStr(f.m, "data", "commandId") != "mine" {
			t.Errorf("lifecycle=own connection got another client's event: %s", f)
		}
	}
	n := 0
	for _, f := range own.snapshot() {
		if strings.HasPrefix(f.typ(), "command_") {
			n++
		}
	}
	svEq(t, "own lifecycle events", n, 3)
}

// delete_session does not wait behind a running prompt: closing the
// session stops the run, the prompt answers, and the session is gone.
func TestServeDeleteDuringPrompt(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	e.tweak("slow answer", func(s *wiremock.Script) {
		s.Text = e2eChunks(strings.Repeat("word ", 400), 5)
		s.Delay = 50 * time.Millisecond
	})
	s := svStartInProc(t, e)
	a := s.dial("A")
	svCreate(a, "d")
	a.send(svM{"id": "slow", "type": "prompt", "sessionId": "d", "message": "slow answer"})
	a.waitEvent("d", "message_update")
	svWantOK(t, a.call(svM{"id": "del", "type": "delete_session", "sessionId": "d"}))
	r := a.response("slow")
	svWantOK(t, r)
	svEq(t, "prompt outcome", svAt(r.m, "data", "outcome"), "cancelled")
	r = a.call(svM{"id": "after", "type": "get_state", "sessionId": "d"})
	svEq(t, "get_state after delete", svAt(r.m, "error"), "Session d not found")
}

// serve runs the collector as configured: its own default, $GOGC, or the
// flags, which win; /metrics shows what the runtime runs with.
func TestServeGCSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"default", nil, nil, []string{"go_gc_gogc_percent 200\n"}},
		{"GOGC", []string{"GOGC=150"}, nil, []string{"go_gc_gogc_percent 150\n"}},
		{"flags", []string{"GOGC=150"}, []string{"--gc-percent", "123", "--memory-limit", "1GiB"},
			[]string{"go_gc_gogc_percent 123\n", "go_gc_gomemlimit_bytes 1.073741824e+09\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := svLaunch(t, e2eNewEnv(t, e2eOpts{}), svOpts{env: tt.env}, tt.args...)
			_, _, body := svHTTPGet(t, s, "/metrics")
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("/metrics lacks %q", w)
				}
			}
		})
	}
}
