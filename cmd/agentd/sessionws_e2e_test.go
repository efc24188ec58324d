package main

// The per-session WebSocket face (issue 13), black-box against the
// binary: every message any test receives is checked against the schema
// the server serves (swConnect does it), so the suite as a whole
// validates every message type against the contract.

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// swSession creates a session over pi-server and returns its id and the
// pi-server connection that drives it.
func swSession(t *testing.T, s *svServer, dial ...svDialOpts) (string, *svConn) {
	t.Helper()
	var pi *svConn
	if len(dial) > 0 {
		pi = s.dialRaw(t, dial[0])
		pi.ready()
	} else {
		pi = s.dial("driver")
	}
	// Command ids are the server's (a reused one is a replay): unique
	// across the test's connections.
	r := pi.ok(svM{"id": fmt.Sprintf("sw-create-%d", swIDs.Add(1)), "type": "create_session"})
	id := svStr(r.m, "data", "sessionId")
	if id == "" {
		t.Fatalf("no session id in %s", r)
	}
	return id, pi
}

var swIDs atomic.Int64

// swPrompt starts a run over pi-server; pi-server answers a prompt once
// its run ends, so the answer is not waited for.
func swPrompt(pi *svConn, id, text string) {
	pi.t.Helper()
	pi.send(svM{"id": fmt.Sprintf("sw-prompt-%d", swIDs.Add(1)), "type": "prompt", "sessionId": id, "message": text})
}

func swIsState(state string) func(swMsg) bool {
	return func(m swMsg) bool { return m.typ() == "status_change" && m.str("new_state") == state }
}

// swPlanScript makes the mock answer text with a todo call that writes a
// plan of four steps, the second in progress.
func swPlanScript(e *e2eEnv, text string) {
	plan := `{"todos":[{"content":"read","status":"completed"},{"content":"write","status":"in_progress"},{"content":"test","status":"pending"},{"content":"ship","status":"pending"}]}`
	e.tweak(text, func(s *wiremock.Script) {
		*s = wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "call_plan", Name: "todo", Args: []string{plan}}}, Usage: &wiremock.Usage{Input: 42, Output: 7}}
	})
}

func TestSessionWSFollowsARun(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e, "--ws-progress-interval", "20ms")
	schema := swSchema(t, s)
	id, pi := swSession(t, s)

	// The spec's own path spells it "conversions".
	for _, path := range []string{"/api/v1/ws/sessions/" + id, "/api/v1/ws/conversions/" + id} {
		c := swConnect(t, s, schema, id, swDial{path: path})
		sub := c.subscribe(id, nil)
		if sub.str("current_state") != "idle" || sub.m["resumed"] != false || sub.str("subscribed_at") == "" {
			t.Fatalf("%s: subscribed %s", path, sub.raw)
		}
		c.stop()
	}

	c := swConnect(t, s, schema, id, swDial{})
	c.subscribe(id, nil)
	from := c.mark()
	swPlanScript(e, "make a plan")
	swPrompt(pi, id, "make a plan")
	_, run := c.waitFor(from, "running", swIsState("running"))
	if run.str("old_state") != "idle" || run.str("reason") == "" || run.num("version") != 1 {
		t.Fatalf("first status_change %s", run.raw)
	}
	_, prog := c.waitFor(from, "progress with the plan", func(m swMsg) bool {
		return m.typ() == "progress_update" && m.m["total_steps"] == float64(4)
	})
	pct := 37.5 // two of four done, half of one in progress
	if prog.str("state") == "completed" {
		pct = 100
	}
	if prog.str("current_step") != "step_2" || prog.num("step_index") != 1 || prog.num("progress_percentage") != pct || prog.str("step_title") != "write" {
		t.Fatalf("progress with a plan %s", prog.raw)
	}
	_, done := c.waitType(from, "completed")
	res, _ := done.m["results"].(map[string]any)
	if done.str("final_state") != "completed" || done.num("progress_percentage") != 100 || res["tool_calls"] != float64(1) || res["turns"] != float64(2) ||
		!strings.HasPrefix(res["output"].(string), "Tool said:") || res["entry_id"] == "" {
		t.Fatalf("completed %s", done.raw)
	}
	usage, _ := res["usage"].(map[string]any)
	if usage["input_tokens"] != float64(84) || usage["output_tokens"] != float64(14) {
		t.Fatalf("usage %s", done.raw)
	}
	// completed follows the status_change of the same event.
	msgs := c.all()
	for i, m := range msgs {
		if m.typ() == "completed" && (i == 0 || msgs[i-1].typ() != "status_change" || msgs[i-1].seq() != m.seq() || msgs[i-1].str("new_state") != "completed") {
			t.Fatalf("completed not right after its status_change:\n%s", c.dump(0))
		}
	}

	// Without a plan, the steps are turns; progress is coalesced but the
	// latest reading always arrives.
	from = c.mark()
	swPrompt(pi, id, "CMD:echo two")
	c.waitType(from, "completed")
	_, last := c.waitFor(from, "progress after the run", func(m swMsg) bool {
		return m.typ() == "progress_update" && m.str("state") == "completed"
	})
	det, _ := last.m["details"].(map[string]any)
	if det["turns"] != float64(2) || det["tool_calls"] != float64(1) || last.num("progress_percentage") != 100 {
		t.Fatalf("final progress %s", last.raw)
	}

	// query_state: the history of versions.
	from = c.mark()
	c.send(map[string]any{"type": "query_state", "session_id": id})
	_, snap := c.waitType(from, "state_snapshot")
	cps, _ := snap.m["checkpoints"].([]any)
	if snap.str("state") != "completed" || len(cps) != 4 {
		t.Fatalf("snapshot %s", snap.raw)
	}
	for i, cp := range cps {
		if cp.(map[string]any)["version"] != float64(i+1) {
			t.Fatalf("checkpoint %d %v", i, cp)
		}
	}
	if st := cps[3].(map[string]any)["state"]; st != "completed" || cps[3].(map[string]any)["entry_id"] == "" {
		t.Fatalf("last checkpoint %v", cps[3])
	}

	// ping → pong with the same timestamp.
	from = c.mark()
	c.send(map[string]any{"type": "ping", "timestamp": "2025-10-10T10:15:30Z"})
	_, pong := c.waitType(from, "pong")
	if pong.str("timestamp") != "2025-10-10T10:15:30Z" {
		t.Fatalf("pong %s", pong.raw)
	}
	// A trailing newline, as the spec's client sends, is fine.
	c.send([]byte(`{"type":"query_state"}` + "\n"))
	c.waitType(from, "state_snapshot")

	// unsubscribe → unsubscribed, then close 1000.
	from = c.mark()
	c.send(map[string]any{"type": "unsubscribe", "session_id": id})
	c.waitType(from, "unsubscribed")
	if code, _ := c.waitClosed(); code != websocket.StatusNormalClosure {
		t.Fatalf("close after unsubscribe: %d", code)
	}
}

func TestSessionWSBadInput(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e, "--ws-message-rate", "1000")
	schema := swSchema(t, s)
	id, _ := swSession(t, s)
	other, _ := swSession(t, s)
	c := swConnect(t, s, schema, id, swDial{})

	cases := []struct {
		name, send string
		code       string
		want       string
	}{
		{"malformed JSON", `{type: subscribe, session_id: 123}`, "invalid_message_format", "Message is not valid JSON"},
		{"not an object", `[1,2]`, "invalid_message_format", "must be a JSON object"},
		{"null", `null`, "invalid_message_format", "must be a JSON object"},
		{"no type", `{"session_id":"x"}`, "invalid_message_format", `"type"`},
		{"type not a string", `{"type":7}`, "invalid_message_format", `"type"`},
		{"unknown type", `{"type":"unknown_action","data":"..."}`, "unknown_message_type", "Message type 'unknown_action' is not supported"},
		{"subscribe without session_id", `{"type":"subscribe"}`, "invalid_message_format", "session_id"},
		{"after_seq of the wrong type", `{"type":"subscribe","session_id":"` + id + `","after_seq":"x"}`, "invalid_message_format", "/after_seq"},
		{"negative after_seq", `{"type":"subscribe","session_id":"` + id + `","after_seq":-1}`, "invalid_message_format", "/after_seq"},
		{"unknown field", `{"type":"ping","extra":1}`, "invalid_message_format", "extra"},
		{"provide_input without input_data", `{"type":"provide_input"}`, "invalid_message_format", "input_data"},
		{"input_data not an object", `{"type":"provide_input","input_data":"yes"}`, "invalid_message_format", "/input_data"},
		{"another session", `{"type":"subscribe","session_id":"` + other + `"}`, "session_mismatch", id},
		{"nothing to answer", `{"type":"provide_input","input_data":{"answer":"x"}}`, "no_pending_input", "not waiting for input"},
		{"unknown question", `{"type":"provide_input","question_id":"q-nope","input_data":{"answer":"x"}}`, "question_not_found", "q-nope"},
	}
	for _, tc := range cases {
		from := c.mark()
		c.send([]byte(tc.send))
		_, m := c.waitFor(from, "error ("+tc.name+")", func(m swMsg) bool { return m.typ() == "error" })
		if m.str("code") != tc.code || !strings.Contains(m.raw, tc.want) {
			t.Errorf("%s: got %s, want code %s mentioning %q", tc.name, m.raw, tc.code, tc.want)
		}
		if tc.code == "unknown_message_type" {
			st, _ := m.m["supported_types"].([]any)
			if len(st) < 5 {
				t.Errorf("supported_types %v", m.m["supported_types"])
			}
		}
	}
	// Over 1 MB: refused, and the connection stays.
	from := c.mark()
	c.send([]byte(`{"type":"ping","timestamp":"` + strings.Repeat("x", 1<<20) + `"}`))
	_, big := c.waitType(from, "error")
	if big.str("code") != "message_too_large" {
		t.Fatalf("oversize: %s", big.raw)
	}
	// Still on its own session, still working.
	sub := c.subscribe(id, nil)
	if sub.str("session_id") != id {
		t.Fatalf("subscribed to %s", sub.raw)
	}

	// Non-WebSocket requests and bad paths.
	for path, want := range map[string]int{
		"/api/v1/ws/sessions/" + id: http.StatusBadRequest,
		"/api/v1/ws/sessions/":      http.StatusNotFound,
		"/api/v1/ws/sessions/a/b":   http.StatusNotFound,
	} {
		resp, err := http.Get("http://" + s.loopback() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
}

func TestSessionWSRateLimit(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e)
	id, _ := swSession(t, s)
	// A burst of pings: the first ten of a second are answered, the
	// next gets the error and the close. The server counts by when it
	// reads each one, and a loaded machine may read a burst over more
	// than a second, so more are sent than the limit needs and the test
	// takes at least ten pongs; TestAdmitMessage proves the exact count
	// on the face's clock. The client reads nothing until it has sent
	// them all: the server drains what comes after its close, so every
	// write goes through.
	c := swConnect(t, s, swSchema(t, s), id, swDial{})
	c.pause()
	const pings = 40
	for i := 0; i < pings; i++ {
		c.send(map[string]any{"type": "ping"})
	}
	c.resume()
	_, m := c.waitType(0, "error")
	if m.str("code") != "rate_limit_exceeded" || m.str("message") != "Too many messages: at most 10 per second" {
		t.Fatalf("got %s", m.raw)
	}
	if code, _ := c.waitClosed(); code != 4429 {
		t.Fatalf("close %d, want 4429", code)
	}
	msgs := c.all()
	for i, m := range msgs[:len(msgs)-1] {
		if m.typ() != "pong" {
			t.Fatalf("message %d before the error is not a pong:\n%s", i, c.dump(0))
		}
	}
	if n := len(msgs) - 1; n < 10 || n >= pings {
		t.Fatalf("%d pongs before the error, want 10 (more if the server read the burst over more than a second), under %d:\n%s", n, pings, c.dump(0))
	}

	// A burst far over the limit from a client that is not reading:
	// more than the kernel buffers between them hold. The server reads
	// and drops what comes after it closed, so every write goes through
	// and the close frame waits for the client, which then learns why
	// (4429). A server that stopped reading held the writes until it
	// dropped the connection, with unread input, and the reset that
	// followed lost the close frame: the client saw 1006.
	b := swConnect(t, s, swSchema(t, s), id, swDial{})
	b.pause()
	big := []byte(`{"type":"ping","pad":"` + strings.Repeat("x", 16<<10) + `"}`)
	for i := 0; i < 1536; i++ { // 24 MiB
		if err := b.ws.Write(context.Background(), websocket.MessageText, big); err != nil {
			t.Fatalf("write %d of the burst: %v", i, err)
		}
	}
	b.resume()
	if code, _ := b.waitClosed(); code != 4429 {
		t.Fatalf("burst: close %d, want 4429\n%s", code, b.dump(0))
	}
}

func TestSessionWSNotFound(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e)
	schema := swSchema(t, s)
	c := swConnect(t, s, schema, "session-nope", swDial{})
	_, m := c.waitType(0, "error")
	if m.str("code") != "session_not_found" || m.str("message") != "Session session-nope does not exist" {
		t.Fatalf("got %s", m.raw)
	}
	if code, _ := c.waitClosed(); code != 4004 {
		t.Fatalf("close %d, want 4004", code)
	}

	// A session deleted while watched.
	id, pi := swSession(t, s)
	w := swConnect(t, s, schema, id, swDial{})
	w.subscribe(id, nil)
	from := w.mark()
	pi.must("delete_session", svM{"sessionId": id})
	_, gone := w.waitType(from, "error")
	if gone.str("code") != "session_not_found" || !strings.Contains(gone.str("message"), "was deleted") {
		t.Fatalf("deleted: %s", gone.raw)
	}
	if code, _ := w.waitClosed(); code != 4004 {
		t.Fatalf("close %d, want 4004", code)
	}
}

// jwtFiles writes an HS256 secret and an RSA public key for the server.
type swKeys struct {
	secret     []byte
	secretPath string
	rsa        *rsa.PrivateKey
	pemPath    string
	pemBytes   []byte
}

func swNewKeys(t *testing.T, dir string) *swKeys {
	t.Helper()
	k := &swKeys{secret: []byte(strings.Repeat("k3y", 16))}
	k.secretPath = filepath.Join(dir, "jwt.secret")
	if err := os.WriteFile(k.secretPath, k.secret, 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	if k.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&k.rsa.PublicKey)
	k.pemBytes = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	k.pemPath = filepath.Join(dir, "jwt.pem")
	if err := os.WriteFile(k.pemPath, k.pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	return k
}

func swToken(t *testing.T, m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	if _, ok := claims["exp"]; !ok {
		claims["exp"] = time.Now().Add(time.Hour).Unix()
	}
	s, err := jwt.NewWithClaims(m, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSessionWSAuth(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	k := swNewKeys(t, e.root)
	hs := svStart(t, e, "--jwt-secret-file", k.secretPath, "--ws-max-connections-per-subject", "2")
	schema := swSchema(t, hs)
	alice := swToken(t, jwt.SigningMethodHS256, k.secret, jwt.MapClaims{"sub": "alice"})
	bob := swToken(t, jwt.SigningMethodHS256, k.secret, jwt.MapClaims{"sub": "bob"})

	// A session alice creates over pi-server is hers.
	id, _ := swSession(t, hs, svDialOpts{header: http.Header{"Authorization": {"Bearer " + alice}}})
	granted := swToken(t, jwt.SigningMethodHS256, k.secret, jwt.MapClaims{"sub": "carol", "sessions": []string{id}})
	admin := swToken(t, jwt.SigningMethodHS256, k.secret, jwt.MapClaims{"sub": "ops", "sessions": []string{"*"}})

	refused := func(name string, o swDial, sid string, wantClose websocket.StatusCode, wantCode string) {
		t.Helper()
		c := swConnect(t, hs, schema, sid, o)
		_, m := c.waitType(0, "error")
		if m.str("code") != wantCode {
			t.Errorf("%s: got %s, want %s", name, m.raw, wantCode)
		}
		if code, _ := c.waitClosed(); code != wantClose {
			t.Errorf("%s: close %d, want %d", name, code, wantClose)
		}
	}
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	refused("no token", swDial{}, id, 4001, "unauthorized")
	refused("alg none", swDial{token: none}, id, 4001, "unauthorized")
	refused("wrong key", swDial{token: swToken(t, jwt.SigningMethodHS256, []byte(strings.Repeat("x", 48)), jwt.MapClaims{"sub": "alice"})}, id, 4001, "unauthorized")
	refused("expired", swDial{token: swToken(t, jwt.SigningMethodHS256, k.secret, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(-time.Hour).Unix()})}, id, 4001, "unauthorized")
	refused("not yet valid", swDial{token: swToken(t, jwt.SigningMethodHS256, k.secret, jwt.MapClaims{"sub": "alice", "nbf": time.Now().Add(time.Hour).Unix()})}, id, 4001, "unauthorized")
	refused("opaque token", swDial{token: "0123456789abcdef0123"}, id, 4001, "unauthorized")
	// Another subject's session looks exactly like a missing one.
	refused("other subject", swDial{token: bob}, id, 4004, "session_not_found")
	refused("missing session", swDial{token: bob}, "session-nope", 4004, "session_not_found")

	for name, o := range map[string]swDial{
		"owner":          {token: alice},
		"owner in query": {query: "token=" + alice},
		"granted":        {token: granted},
		"all sessions":   {token: admin},
	} {
		c := swConnect(t, hs, schema, id, o)
		if sub := c.subscribe(id, nil); sub.str("session_id") != id {
			t.Errorf("%s: %s", name, sub.raw)
		}
		c.stop()
	}

	// At most two connections for alice here. The server counts one of
	// hers until its handler returns, a moment after her client saw the
	// close: a connection made right after the ones above may still be
	// refused for them (the error and close 4429 come before anything is
	// read), and is made again until admitted.
	aliceIn := func() *swClient {
		t.Helper()
		deadline := time.Now().Add(svWait)
		for {
			c := swConnect(t, hs, schema, id, swDial{token: alice})
			ctx, cancel := context.WithTimeout(context.Background(), svWait)
			_ = c.ws.Write(ctx, websocket.MessageText, []byte(`{"type":"subscribe","session_id":"`+id+`"}`))
			cancel()
			_, m := c.waitFor(0, "subscribed or refused", func(m swMsg) bool { return m.typ() == "subscribed" || m.typ() == "error" })
			if m.typ() == "subscribed" {
				return c
			}
			if code, _ := c.waitClosed(); m.str("code") != "too_many_connections" || code != 4429 || time.Now().After(deadline) {
				t.Fatalf("alice's connection: %s, close %d", m.raw, code)
			}
		}
	}
	aliceIn()
	aliceIn() // both stay open until the test ends
	a3 := swConnect(t, hs, schema, id, swDial{token: alice})
	_, m := a3.waitType(0, "error")
	if code, _ := a3.waitClosed(); m.str("code") != "too_many_connections" || code != 4429 {
		t.Fatalf("third connection: %s, close %d", m.raw, code)
	}

	// Public keys: a token MACed with the public key itself is refused.
	e2 := e2eNewEnv(t, e2eOpts{})
	rs := svStart(t, e2, "--jwt-keys", k.pemPath, "--jwt-issuer", "agentd-tests")
	rschema := swSchema(t, rs)
	owner := swToken(t, jwt.SigningMethodRS256, k.rsa, jwt.MapClaims{"sub": "alice", "iss": "agentd-tests"})
	rid, _ := swSession(t, rs, svDialOpts{header: http.Header{"Authorization": {"Bearer " + owner}}})
	for name, tok := range map[string]string{
		"HS256 keyed with the public key": swToken(t, jwt.SigningMethodHS256, k.pemBytes, jwt.MapClaims{"sub": "alice", "iss": "agentd-tests"}),
		"wrong issuer":                    swToken(t, jwt.SigningMethodRS256, k.rsa, jwt.MapClaims{"sub": "alice", "iss": "evil"}),
		"signed by another key":           swToken(t, jwt.SigningMethodRS256, mustRSA(t), jwt.MapClaims{"sub": "alice", "iss": "agentd-tests"}),
	} {
		c := swConnect(t, rs, rschema, rid, swDial{token: tok})
		_, m := c.waitType(0, "error")
		if code, _ := c.waitClosed(); m.str("code") != "unauthorized" || code != 4001 {
			t.Errorf("%s: %s close %d", name, m.raw, code)
		}
	}
	c := swConnect(t, rs, rschema, rid, swDial{token: owner})
	c.subscribe(rid, nil)

	// Off loopback without JWT keys the face is off (a shared token would
	// hand every session to its holder), with a warning saying why, and
	// asking for it there is refused at the start.
	e3 := e2eNewEnv(t, e2eOpts{})
	const shared = "0123456789abcdef0123456789"
	open := svStart(t, e3, "--host", "0.0.0.0", "--token", shared)
	if l := open.stderr.String(); !strings.Contains(l, "per-session WebSocket off") || !strings.Contains(l, "--jwt-secret-file or --jwt-keys") {
		t.Fatalf("no warning that the face is off:\n%s", open.stderrTail(2000))
	}
	dctx, dcancel := context.WithTimeout(context.Background(), svWait)
	defer dcancel()
	if ws, resp, err := websocket.Dial(dctx, "ws://"+open.loopback()+"/api/v1/ws/sessions/x",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + shared}}}); err == nil {
		ws.CloseNow()
		t.Fatalf("the face answered off loopback without JWT keys: HTTP %d", resp.StatusCode)
	} else if resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("off loopback without JWT keys: %v %v, want 404", resp, err)
	}
	e4 := e2eNewEnv(t, e2eOpts{})
	bad := svLaunch(t, e4, svOpts{noReady: true}, "--host", "0.0.0.0", "--token", shared, "--session-ws")
	if code := bad.waitExit(); code == 0 || !strings.Contains(bad.stderr.String(), "--jwt-secret-file or --jwt-keys") {
		t.Fatalf("--session-ws off loopback without JWT keys: exit %d\n%s", code, bad.stderrTail(2000))
	}
}

func mustRSA(t *testing.T) *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSessionWSInput(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e, "--policy", e.writePolicy(`{"rules":[{"tool":"bash","action":"ask"}]}`), "--ws-progress-interval", "20ms")
	schema := swSchema(t, s)
	id, pi := swSession(t, s)
	a := swConnect(t, s, schema, id, swDial{})
	a.subscribe(id, nil)
	b := swConnect(t, s, schema, id, swDial{})
	b.subscribe(id, nil)
	fa, fb := a.mark(), b.mark()

	swPrompt(pi, id, "CMD:echo approved")
	_, ra := a.waitType(fa, "input_required")
	_, rb := b.waitType(fb, "input_required")
	if ra.raw != rb.raw {
		t.Fatalf("the two clients got different prompts:\n%s\n%s", ra.raw, rb.raw)
	}
	p, _ := ra.m["prompt"].(map[string]any)
	tool, _ := p["tool"].(map[string]any)
	if p["kind"] != "approval" || p["field_name"] != "decision" || tool["tool_name"] != "bash" || !strings.Contains(fmt.Sprint(tool["args"]), "echo approved") {
		t.Fatalf("approval prompt %s", ra.raw)
	}
	if ts, ok := ra.m["timeout_seconds"].(float64); !ok || ts <= 0 || ts > 600 {
		t.Fatalf("timeout_seconds %v", ra.m["timeout_seconds"])
	}
	a.waitFor(fa, "suspended", swIsState("suspended"))
	qid := p["question_id"].(string)

	// A bad answer leaves the question open.
	from := a.mark()
	a.send(map[string]any{"type": "provide_input", "question_id": qid, "input_data": map[string]any{"decision": "maybe"}})
	_, bad := a.waitType(from, "error")
	if bad.str("code") != "invalid_input" || !strings.Contains(bad.str("message"), "decision") {
		t.Fatalf("bad decision: %s", bad.raw)
	}
	// The first answer wins; the second is told.
	from = a.mark()
	a.send(map[string]any{"type": "provide_input", "session_id": id, "question_id": qid, "input_data": map[string]any{"decision": "approve"}})
	_, rec := a.waitType(from, "input_received")
	if rec.str("question_id") != qid {
		t.Fatalf("input_received %s", rec.raw)
	}
	fromB := b.mark()
	b.send(map[string]any{"type": "provide_input", "question_id": qid, "input_data": map[string]any{"decision": "reject", "feedback": "no"}})
	_, late := b.waitType(fromB, "error")
	if late.str("code") != "question_already_answered" || !strings.Contains(late.str("message"), "already answered") {
		t.Fatalf("late answer: %s", late.raw)
	}
	_, resumed := a.waitFor(from, "running again", swIsState("running"))
	if resumed.str("old_state") != "suspended" {
		t.Fatalf("resumed %s", resumed.raw)
	}
	_, done := a.waitType(from, "completed")
	if out := done.m["results"].(map[string]any)["output"].(string); !strings.Contains(out, "approved") {
		t.Fatalf("the approved command did not run: %s", done.raw)
	}

	// The model's questions: a select, answered without naming it.
	from = a.mark()
	swPrompt(pi, id, "ASK:select")
	_, q := a.waitType(from, "input_required")
	qp := q.m["prompt"].(map[string]any)
	if qp["kind"] != "select" || qp["field_name"] != "answer" || qp["question"] != "Pick a colour" {
		t.Fatalf("select prompt %s", q.raw)
	}
	a.send(map[string]any{"type": "provide_input", "input_data": map[string]any{"answer": "purple"}})
	_, e1 := a.waitType(from, "error")
	if e1.str("code") != "invalid_input" {
		t.Fatalf("not an option: %s", e1.raw)
	}
	a.send(map[string]any{"type": "provide_input", "input_data": map[string]any{"answer": "green"}})
	a.waitType(from, "input_received")
	_, done = a.waitType(from, "completed")
	if out := done.m["results"].(map[string]any)["output"].(string); !strings.Contains(out, "green") {
		t.Fatalf("the answer did not reach the model: %s", done.raw)
	}

	// A form: fields are named, values typed.
	from = a.mark()
	swPrompt(pi, id, "ASK:form")
	_, f := a.waitType(from, "input_required")
	fp := f.m["prompt"].(map[string]any)
	if fp["kind"] != "form" || fp["field_name"] != "count" || fp["field_type"] != "integer" || fp["required"] != true {
		t.Fatalf("form prompt %s", f.raw)
	}
	a.send(map[string]any{"type": "provide_input", "input_data": map[string]any{"count": "three"}})
	_, e2 := a.waitType(from, "error")
	if e2.str("code") != "invalid_input" || !strings.Contains(e2.str("message"), "count") {
		t.Fatalf("bad form value: %s", e2.raw)
	}
	a.send(map[string]any{"type": "provide_input", "input_data": map[string]any{"count": 3}})
	a.waitType(from, "input_received")
	a.waitType(from, "completed")

	// A late subscriber learns what is pending; query_state lists it.
	from = a.mark()
	swPrompt(pi, id, "CMD:echo later")
	a.waitType(from, "input_required")
	late2 := swConnect(t, s, schema, id, swDial{})
	late2.subscribe(id, nil)
	late2.waitType(0, "input_required")
	late2.send(map[string]any{"type": "query_state"})
	_, snap := late2.waitType(0, "state_snapshot")
	if pend, _ := snap.m["pending_inputs"].([]any); snap.str("state") != "suspended" || len(pend) != 1 {
		t.Fatalf("snapshot while suspended %s", snap.raw)
	}
	late2.send(map[string]any{"type": "provide_input", "input_data": map[string]any{"decision": "reject", "feedback": "not now"}})
	late2.waitType(0, "input_received")
	_, done = a.waitType(from, "completed")
	if out := done.m["results"].(map[string]any)["output"].(string); strings.Contains(out, "later\n") {
		t.Fatalf("a rejected command ran: %s", done.raw)
	}
}

func TestSessionWSTwoClientsSeeTheSame(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e, "--ws-progress-interval", "10ms")
	schema := swSchema(t, s)
	id, pi := swSession(t, s)
	a := swConnect(t, s, schema, id, swDial{})
	b := swConnect(t, s, schema, id, swDial{})
	a.subscribe(id, nil)
	b.subscribe(id, nil)
	fa, fb := a.mark(), b.mark()
	for i := 0; i < 3; i++ {
		from := a.mark()
		swPrompt(pi, id, fmt.Sprintf("CMD:echo run %d", i))
		a.waitType(from, "completed")
	}
	// b has had the same messages once it has its third completed.
	b.waitFor(fb, "third completed", func(m swMsg) bool {
		return m.typ() == "completed" && strings.Contains(m.raw, "run 2")
	})
	// Progress readings a client's queue held back are replaced by later
	// ones, so two clients may differ in those; in nothing else.
	critical := func(ms []swMsg) []swMsg {
		var out []swMsg
		for _, m := range ms {
			if m.typ() != "progress_update" {
				out = append(out, m)
			}
		}
		return out
	}
	// lastProgress is c's latest progress reading.
	lastProgress := func(c *swClient) string {
		ms := c.all()
		for i := len(ms) - 1; i >= 0; i-- {
			if ms[i].typ() == "progress_update" {
				return ms[i].raw
			}
		}
		return ""
	}
	// A last coalesced progress_update, or a message after the third
	// completed, may still be on its way to one of them: wait until both
	// have as many messages and the same last reading (what follows
	// checks they are the same), not a fixed 50 ms.
	svWaitUntil(t, "both clients have had the same messages", func() bool {
		pa := lastProgress(a)
		return len(critical(a.all()[fa:])) == len(critical(b.all()[fb:])) && pa != "" && pa == lastProgress(b)
	})
	la, lb := critical(a.all()[fa:]), critical(b.all()[fb:])
	if len(la) != len(lb) {
		t.Fatalf("a got %d messages, b %d:\n%s\n---\n%s", len(la), len(lb), a.dump(fa), b.dump(fb))
	}
	for i := range la {
		if la[i].raw != lb[i].raw {
			t.Fatalf("message %d differs:\n%s\n%s", i, la[i].raw, lb[i].raw)
		}
	}
	// Every message carries a seq, and seqs never go back.
	var last uint64
	for _, m := range la {
		if _, ok := m.m["seq"].(float64); !ok {
			t.Fatalf("no seq: %s", m.raw)
		}
		if m.seq() < last {
			t.Fatalf("seq went back to %d after %d:\n%s", m.seq(), last, a.dump(fa))
		}
		last = m.seq()
	}
	// And both end on the same, latest, progress reading.
	if pa, pb := lastProgress(a), lastProgress(b); pa == "" || pa != pb {
		t.Fatalf("last progress differs:\n%s\n%s", pa, pb)
	}
}

func TestSessionWSHeartbeat(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	// 500 ms: a client is closed after two intervals without a sign of
	// life, and at 150 ms a loaded CI machine (race detector, load 35)
	// held the answering client's reader past 300 ms once.
	s := svStart(t, e, "--ws-heartbeat", "500ms")
	schema := swSchema(t, s)
	id, _ := swSession(t, s)

	// A client that answers the JSON pings (the spec's way) stays.
	live := swConnect(t, s, schema, id, swDial{})
	live.subscribe(id, nil)
	// One that sends its own pings, as the spec's example client does,
	// and never answers the server's: any message is a sign of life.
	chatty := swConnect(t, s, schema, id, swDial{})
	chatty.subscribe(id, nil)
	// One that stops reading: no message, no control pong.
	silent := swConnect(t, s, schema, id, swDial{})
	silent.subscribe(id, nil)
	silent.pause()

	seen := 0
	deadline := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(deadline) {
		for _, m := range live.all()[seen:] {
			if m.typ() == "ping" {
				live.send(map[string]any{"type": "pong", "timestamp": m.str("timestamp")})
			}
		}
		seen = len(live.all())
		chatty.send(map[string]any{"type": "ping", "timestamp": time.Now().UTC().Format(time.RFC3339)})
		time.Sleep(140 * time.Millisecond)
	}
	pings := 0
	for _, m := range live.all() {
		if m.typ() == "ping" {
			pings++
		}
	}
	if pings < 3 {
		t.Fatalf("%d JSON pings in 2.5 s at 500 ms", pings)
	}
	silent.resume()
	if code, reason := silent.waitClosed(); code != websocket.StatusGoingAway || !strings.Contains(reason, "Heartbeat") {
		t.Fatalf("silent client closed with %d %q, want 1001", code, reason)
	}
	for name, c := range map[string]*swClient{"answering": live, "chatty": chatty} {
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if closed {
			t.Fatalf("the %s client was closed", name)
		}
	}
	// Server shutdown: 1001.
	s.sigterm()
	if code, _ := live.waitClosed(); code != websocket.StatusGoingAway {
		t.Fatalf("on shutdown: close %d, want 1001", code)
	}
}

// A client that stops reading gets the latest progress, never loses a
// status_change or completed, and is cut off (1011) once what it owes
// passes its bound; it then resumes with after_seq.
func TestSessionWSSlowReader(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	// Answers of 1 MB, each carried by its completed: a client that does
	// not read soon owes more than the kernel's socket buffers hold.
	big := strings.Repeat("lorem ipsum ", 1<<20/12)
	// The paused client must resume within the server's 30 s write
	// deadline (a client silent longer is dropped), slow as -race is: its
	// answers are smaller.
	mid := big[:64<<10]
	e.tweak("BIG", func(sc *wiremock.Script) {
		*sc = wiremock.Script{Text: []string{mid[:len(mid)/2], mid[len(mid)/2:]}, Usage: &wiremock.Usage{Input: 1, Output: 1}}
	})
	count := func(c *swClient, typ string) int {
		n := 0
		for _, m := range c.all() {
			if m.typ() == typ {
				n++
			}
		}
		return n
	}

	// A client that pauses within its bound loses no critical message,
	// and the latest progress reading is the last thing it gets.
	s := svStartInProc(t, e, "--ws-progress-interval", "10ms", "--ws-max-queued-bytes", "67108864")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server stderr:\n%s", s.stderrTail(4000))
		}
	})
	schema := swSchema(t, s)
	id, pi := swSession(t, s)
	fast := swConnect(t, s, schema, id, swDial{})
	fast.subscribe(id, nil)
	slow := swConnect(t, s, schema, id, swDial{})
	slow.subscribe(id, nil)
	slow.pause()
	const runs = 12
	for i := 0; i < runs; i++ {
		from := fast.mark()
		swPrompt(pi, id, "BIG")
		fast.waitType(from, "completed")
	}
	time.Sleep(100 * time.Millisecond) // the last coalesced progress
	slow.resume()
	for i, at := 0, 0; i < runs; i++ {
		at, _ = slow.waitType(at, "completed")
	}
	slow.waitFor(0, "the final progress", func(m swMsg) bool {
		return m.typ() == "progress_update" && m.str("state") == "completed" && m.num("seq") >= fast.all()[fast.mark()-1].num("seq")
	})
	for _, typ := range []string{"completed", "status_change", "error", "input_required"} {
		if count(slow, typ) != count(fast, typ) {
			t.Fatalf("%s: the slow reader got %d, the fast one %d", typ, count(slow, typ), count(fast, typ))
		}
	}
	t.Logf("progress_updates: fast reader %d, paused reader %d", count(fast, "progress_update"), count(slow, "progress_update"))

	// A client that never reads is cut off at its bound (here 4 MiB; its
	// small socket buffer keeps the kernel from absorbing much first),
	// and resumes from the last message it got.
	e2 := e2eNewEnv(t, e2eOpts{})
	e2.tweak("BIG", func(sc *wiremock.Script) {
		*sc = wiremock.Script{Text: []string{big}, Usage: &wiremock.Usage{Input: 1, Output: 1}}
	})
	s2 := svStartInProc(t, e2, "--ws-max-queued-bytes", "4194304")
	schema2 := swSchema(t, s2)
	id2, pi2 := swSession(t, s2)
	watch := swConnect(t, s2, schema2, id2, swDial{})
	watch.subscribe(id2, nil)
	stuck := swConnect(t, s2, schema2, id2, swDial{smallBuffer: true})
	sub := stuck.subscribe(id2, nil)
	stuck.pause()
	cut := func() bool {
		l := s2.stderr.String()
		return strings.Contains(l, "connection cut off") && strings.Contains(l, "Client too slow: more than 4194304 bytes")
	}
	n := 0
	for ; n < 40 && !cut(); n++ {
		from := watch.mark()
		swPrompt(pi2, id2, "BIG")
		watch.waitType(from, "completed")
	}
	if !cut() {
		t.Fatalf("a client that read nothing of %d MB was not cut off:\n%s", n, s2.stderr.String())
	}
	t.Logf("cut off after %d answers of 1 MB", n)
	stuck.stop()
	again := swConnect(t, s2, schema2, id2, swDial{})
	res := again.subscribe(id2, map[string]any{"after_seq": sub.seq()})
	switch {
	case res.m["resumed"] == true:
		for i, at := 0, 0; i < n; i++ {
			at, _ = again.waitType(at, "completed")
		}
	case res.m["cursor_too_old"] == true:
		// The session's event history holds less than n MB: the state
		// as it is now, with its checkpoints, stands in for what is gone.
		_, snap := again.waitType(0, "state_snapshot")
		if snap.str("state") != "completed" || len(snap.m["checkpoints"].([]any)) < 2*n {
			t.Fatalf("snapshot after the cut: %s", e2eClip(snap.raw, 600))
		}
	default:
		t.Fatalf("resume after the cut: %s", res.raw)
	}
	// The other watcher was never held back.
	if got := count(watch, "completed"); got != n {
		t.Fatalf("the watcher got %d completed of %d", got, n)
	}
}

func TestSessionWSResume(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStart(t, e, "--port", "0", "--ws-progress-interval", "20ms")
	schema := swSchema(t, s)
	id, pi := swSession(t, s)
	c := swConnect(t, s, schema, id, swDial{})
	c.subscribe(id, nil)
	from := c.mark()
	swPrompt(pi, id, "CMD:echo first")
	c.waitType(from, "completed")
	var cursor uint64
	for _, m := range c.all() {
		cursor = max(cursor, m.seq())
	}
	c.stop() // a dropped connection

	swPrompt(pi, id, "CMD:echo missed")
	pi.waitEvent(id, "agent_end")
	time.Sleep(100 * time.Millisecond)

	r := swConnect(t, s, schema, id, swDial{})
	sub := r.subscribe(id, map[string]any{"after_seq": cursor})
	if sub.m["resumed"] != true {
		t.Fatalf("resume: %s", sub.raw)
	}
	_, done := r.waitType(0, "completed")
	if !strings.Contains(done.raw, "missed") {
		t.Fatalf("the missed run's completed: %s", done.raw)
	}
	for _, m := range r.all()[1:] {
		if m.seq() <= cursor {
			t.Fatalf("a message at or before the cursor %d came again: %s", cursor, m.raw)
		}
	}
	states := []string{}
	for _, m := range r.all() {
		if m.typ() == "status_change" {
			states = append(states, m.str("new_state"))
		}
	}
	if strings.Join(states, ",") != "running,completed" {
		t.Fatalf("missed transitions %v:\n%s", states, r.dump(0))
	}
	head := done.seq()

	// After kill -9 the log is gone: the cursor is too old, and the
	// snapshot holds the history rebuilt from the transcript.
	r.stop()
	s.kill9()
	s2 := s.restart()
	schema2 := swSchema(t, s2)
	k := swConnect(t, s2, schema2, id, swDial{})
	sub = k.subscribe(id, map[string]any{"after_seq": head})
	if sub.m["cursor_too_old"] != true || sub.m["resumed"] != false || sub.str("current_state") != "completed" {
		t.Fatalf("after kill -9: %s", sub.raw)
	}
	_, snap := k.waitType(0, "state_snapshot")
	cps, _ := snap.m["checkpoints"].([]any)
	if len(cps) != 4 || cps[3].(map[string]any)["state"] != "completed" {
		t.Fatalf("history after kill -9: %s", snap.raw)
	}
	// The seq goes on past everything sent before.
	from = k.mark()
	pi2 := s2.dial("driver2")
	swPrompt(pi2, id, "CMD:echo after restart")
	_, run := k.waitFor(from, "running", swIsState("running"))
	if run.seq() <= head || run.str("old_state") != "completed" {
		t.Fatalf("after restart: %s (head before %d)", run.raw, head)
	}
	_, done = k.waitType(from, "completed")
	head = done.seq()

	// After a clean stop, the cursor at the head resumes with nothing
	// missed.
	s2.sigterm()
	s2.waitExit()
	s3 := s2.restart()
	q := swConnect(t, s3, swSchema(t, s3), id, swDial{})
	sub = q.subscribe(id, map[string]any{"after_seq": head})
	if sub.m["resumed"] != true || sub.seq() != head {
		t.Fatalf("after a clean restart: %s (head %d)", sub.raw, head)
	}
}

// The engine's typed errors become the spec's error messages.
func TestSessionWSErrors(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{settings: map[string]any{"retry": map[string]any{"enabled": true, "maxRetries": 2, "baseDelayMs": 10}}})
	s := svStartInProc(t, e)
	schema := swSchema(t, s)
	id, pi := swSession(t, s)
	c := swConnect(t, s, schema, id, swDial{})
	c.subscribe(id, nil)

	from := c.mark()
	swPrompt(pi, id, "FLAKY:429")
	_, retry := c.waitType(from, "error")
	if retry.str("error_type") != "provider_rate_limit" || retry.m["recoverable"] != true || retry.str("severity") != "medium" ||
		!strings.Contains(fmt.Sprint(retry.m["recovery_suggestions"]), "retries on its own") {
		t.Fatalf("429: %s", retry.raw)
	}
	c.waitFor(from, "retrying", swIsState("retrying"))
	_, done := c.waitType(from, "completed")
	if done.str("final_state") != "completed" {
		t.Fatalf("after the retry: %s", done.raw)
	}

	from = c.mark()
	piFrom := pi.mark()
	swPrompt(pi, id, "FAIL:401")
	// The pi-server WebSocket client that prompted sees the failed
	// message's errorMessage with the hint naming the key, as on stdio.
	pi.waitFor(piFrom, "agent_end naming MOCK_API_KEY", func(f svFrame) bool {
		return strings.Contains(f.raw, `"type":"agent_end"`) && strings.Contains(f.raw, "mock failure 401 (mock refused the API key: check MOCK_API_KEY)")
	})
	_, auth := c.waitType(from, "error")
	if auth.str("error_type") != "provider_auth" || auth.m["recoverable"] != false || auth.str("severity") != "critical" ||
		!strings.Contains(fmt.Sprint(auth.m["recovery_suggestions"]), "MOCK_API_KEY") {
		t.Fatalf("401: %s", auth.raw)
	}
	_, failed := c.waitFor(from, "failed", swIsState("failed"))
	_, done = c.waitType(from, "completed")
	if done.str("final_state") != "failed" || failed.seq() != done.seq() || !strings.Contains(done.raw, `"error":`) {
		t.Fatalf("failed run: %s / %s", failed.raw, done.raw)
	}
}
