package piserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
)

// Every goroutine of the server (connection writers, pipeline lanes,
// session runs) must be gone once its test has shut the server down.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fixedModels []*llm.Model

func (f fixedModels) Available() []*llm.Model { return f }

// fakeLink is a transport that records what is written to it. With a
// gate, every write waits until the gate is closed: a client that does
// not read.
type fakeLink struct {
	gate chan struct{}

	mu     sync.Mutex
	frames []string
	closes int
	code   int
	reason string
}

func (l *fakeLink) write(ctx context.Context, f []byte) error {
	if l.gate != nil {
		select {
		case <-l.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	l.mu.Lock()
	l.frames = append(l.frames, string(f))
	l.mu.Unlock()
	return nil
}

func (l *fakeLink) close(code int, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closes++
	if l.closes == 1 {
		l.code, l.reason = code, reason
	}
}

func (l *fakeLink) closed() (n, code int, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closes, l.code, l.reason
}

// wire is one frame as a client reads it.
type wire struct {
	raw string
	m   map[string]any
}

func (w wire) typ() string { s, _ := w.m["type"].(string); return s }
func (w wire) id() string  { s, _ := w.m["id"].(string); return s }
func (w wire) data() map[string]any {
	d, _ := w.m["data"].(map[string]any)
	return d
}

// seq is the seq of an event frame.
func (w wire) seq() uint64 { f, _ := w.m["seq"].(float64); return uint64(f) }

// eventType is the type of the session event an event frame carries.
func (w wire) eventType() string {
	ev, _ := w.m["event"].(map[string]any)
	s, _ := ev["type"].(string)
	return s
}

func (l *fakeLink) wires(t *testing.T) []wire {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]wire, len(l.frames))
	for i, f := range l.frames {
		out[i].raw = f
		if err := json.Unmarshal([]byte(f), &out[i].m); err != nil {
			t.Fatalf("frame %d is not a JSON object: %s", i, f)
		}
	}
	return out
}

// response returns the index and frame of the response with id.
func response(t *testing.T, ws []wire, id string) (int, wire) {
	t.Helper()
	for i, w := range ws {
		if w.typ() == "response" && w.id() == id {
			return i, w
		}
	}
	t.Fatalf("no response with id %q in %d frames:\n%s", id, len(ws), dump(ws))
	return -1, wire{}
}

func index(ws []wire, match func(wire) bool) int {
	for i, w := range ws {
		if match(w) {
			return i
		}
	}
	return -1
}

// events returns the event frames of session sid.
func events(ws []wire, sid string) []wire {
	var out []wire
	for _, w := range ws {
		if w.typ() == "event" && w.m["sessionId"] == sid {
			out = append(out, w)
		}
	}
	return out
}

// stream is what a client makes of event frames: each event with its
// seq, except that consecutive deltas of one content block count as one
// (a client that lags gets them merged), with their text joined and the
// last one's seq.
func stream(ws []wire) []string {
	var out []string
	lastKey := ""
	for _, w := range ws {
		ev, _ := w.m["event"].(map[string]any)
		ame, _ := ev["assistantMessageEvent"].(map[string]any)
		typ, _ := ame["type"].(string)
		if w.eventType() == "message_update" && strings.HasSuffix(typ, "_delta") {
			key := fmt.Sprint(typ, ame["contentIndex"])
			delta, _ := ame["delta"].(string)
			if key == lastKey {
				prev := out[len(out)-1]
				text := prev[strings.Index(prev, "|")+1:]
				out[len(out)-1] = fmt.Sprintf("%d:%s|%s", w.seq(), key, text+delta)
			} else {
				out = append(out, fmt.Sprintf("%d:%s|%s", w.seq(), key, delta))
			}
			lastKey = key
			continue
		}
		lastKey = ""
		out = append(out, fmt.Sprintf("%d:%s", w.seq(), w.eventType()))
	}
	return out
}

func dump(ws []wire) string {
	var b strings.Builder
	for i, w := range ws {
		r := w.raw
		if len(r) > 200 {
			r = r[:200] + "..."
		}
		fmt.Fprintf(&b, "  %3d %s\n", i, r)
	}
	return b.String()
}

func wantSuccess(t *testing.T, w wire) {
	t.Helper()
	if w.m["success"] != true {
		t.Fatalf("%s failed: %s", w.m["command"], w.raw)
	}
}

func wantError(t *testing.T, w wire, msg string) {
	t.Helper()
	if w.m["success"] != false || w.m["error"] != msg {
		t.Fatalf("response = %s\nwant error %q", w.raw, msg)
	}
}

// fixture is the face over a layer whose sessions use the offline faux
// model.
type fixture struct {
	srv         *Server
	layer       *server.Server
	faux        *faux.Provider
	sessionsDir string
	root        string
}

// testOptions are the layer's and the face's options a test may change.
type testOptions struct {
	Limits  server.Limits
	Journal pipeline.Journal
	Logger  *slog.Logger
}

type fixtureConfig struct {
	chunkDelay   time.Duration // between the faux model's chunks
	eventLogSize int
	opts         func(*testOptions)
	// register adds another face's commands to the layer.
	register pipeline.Registry
}

func newFixture(t testing.TB, fc fixtureConfig) *fixture {
	t.Helper()
	root := t.TempDir()
	fx := &fixture{faux: faux.New(faux.Options{ChunkDelay: fc.chunkDelay}), sessionsDir: filepath.Join(root, "sessions"), root: root}
	cwd := filepath.Join(root, "cwd")
	if err := os.MkdirAll(cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	var to testOptions
	if fc.opts != nil {
		fc.opts(&to)
	}
	layer, err := server.New(server.Config{
		Builder: server.BuilderFunc(func(spec sessionspec.Spec) (*session.Session, error) {
			return session.New(session.Config{
				Cwd: spec.Cwd, SessionsDir: spec.SessionsDir, Open: spec.Open, Model: faux.Model(),
				Stream: fx.faux.Stream, EventLogSize: fc.eventLogSize, FirstSeq: spec.FirstSeq, ReserveSeq: spec.ReserveSeq,
			})
		}),
		Cwd:         cwd,
		SessionsDir: fx.sessionsDir,
		StateDir:    filepath.Join(root, "state"),
		Journal:     to.Journal,
		Limits:      to.Limits,
		Logger:      to.Logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(layer, Options{Models: fixedModels{faux.Model()}, Version: "test-1"})
	if err != nil {
		t.Fatal(err)
	}
	if fc.register != nil {
		if err := layer.Register(fc.register); err != nil {
			t.Fatal(err)
		}
	}
	if err := layer.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = layer.Close() })
	fx.srv, fx.layer = srv, layer
	return fx
}

func (fx *fixture) connect(t *testing.T, l *fakeLink) *conn {
	t.Helper()
	c := newConn(fx.srv, "test", l)
	if err := c.start(); err != nil {
		t.Fatalf("connection refused: %v", err)
	}
	return c
}

func words(n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("word%03d", i)
	}
	return strings.Join(w, " ")
}

func TestServerReadyIsFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixture(t, fixtureConfig{})
		l := &fakeLink{}
		c := fx.connect(t, l)
		c.handle([]byte(`{"type":"health_check","id":"h"}`))
		synctest.Wait()
		ws := l.wires(t)
		if len(ws) == 0 || ws[0].raw != `{"type":"server_ready","data":{"serverVersion":"test-1","protocolVersion":"1.0.0","transports":["websocket","stdio"]}}` {
			t.Fatalf("first frame is not server_ready:\n%s", dump(ws))
		}
		_, r := response(t, ws, "h")
		wantSuccess(t, r)
		if d := r.data(); d["healthy"] != true {
			t.Errorf("health_check = %s", r.raw)
		}
	})
}

// create_session and a prompt for it sent back to back: both are in lane
// session:<id>, so the prompt runs after the session exists, and the
// requester, subscribed by create_session, sees the whole run.
func TestCreateSessionThenPromptPipelined(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixture(t, fixtureConfig{})
		l := &fakeLink{}
		c := fx.connect(t, l)
		c.handle([]byte(`{"type":"create_session","id":"c1","sessionId":"s1"}`))
		c.handle([]byte(`{"type":"prompt","id":"p1","sessionId":"s1","message":"hello there"}`))
		synctest.Wait()
		ws := l.wires(t)

		ic, rc := response(t, ws, "c1")
		wantSuccess(t, rc)
		if rc.m["sessionVersion"] != float64(0) || rc.data()["sessionId"] != "s1" {
			t.Errorf("create_session response = %s", rc.raw)
		}
		ip, rp := response(t, ws, "p1")
		wantSuccess(t, rp)
		if rp.data()["outcome"] != "completed" {
			t.Errorf("prompt response = %s", rp.raw)
		}
		if ip < ic {
			t.Errorf("prompt answered (frame %d) before create_session (frame %d)", ip, ic)
		}

		// Lifecycle: accepted, started, finished, then the response; every
		// lifecycle frame has a dependsOn array.
		for _, id := range []string{"c1", "p1"} {
			var phases []string
			for _, w := range ws {
				if strings.HasPrefix(w.typ(), "command_") && w.data()["commandId"] == id {
					phases = append(phases, w.typ())
					if deps, ok := w.data()["dependsOn"].([]any); !ok || len(deps) != 0 {
						t.Errorf("lifecycle frame without dependsOn []: %s", w.raw)
					}
				}
			}
			if got := strings.Join(phases, ","); got != "command_accepted,command_started,command_finished" {
				t.Errorf("%s lifecycle = %s", id, got)
			}
			fin := index(ws, func(w wire) bool { return w.typ() == "command_finished" && w.data()["commandId"] == id })
			resp, _ := response(t, ws, id)
			if fin > resp {
				t.Errorf("%s: command_finished (frame %d) after the response (frame %d)", id, fin, resp)
			}
		}
		fin := index(ws, func(w wire) bool { return w.typ() == "command_finished" && w.data()["commandId"] == "c1" })
		if ws[fin].data()["sessionVersion"] != float64(0) {
			t.Errorf("create_session command_finished = %s", ws[fin].raw)
		}

		// session_created follows the response.
		created := index(ws, func(w wire) bool { return w.typ() == "session_created" })
		if created < ic || ws[created].data()["sessionId"] != "s1" {
			t.Errorf("session_created at %d, response at %d: %s", created, ic, dump(ws))
		}

		// The run's events reach the requester before the prompt's
		// response, in seq order, and say what the model answered.
		evs := events(ws, "s1")
		if len(evs) == 0 {
			t.Fatalf("no session events:\n%s", dump(ws))
		}
		for i := 1; i < len(evs); i++ {
			if evs[i].seq() <= evs[i-1].seq() {
				t.Errorf("event seqs out of order: %d after %d", evs[i].seq(), evs[i-1].seq())
			}
		}
		end := index(ws, func(w wire) bool { return w.eventType() == "agent_end" })
		if end < 0 || end > ip {
			t.Errorf("agent_end at %d, prompt response at %d", end, ip)
		}
		if index(ws, func(w wire) bool {
			return w.eventType() == "message_end" && strings.Contains(w.raw, "You said: hello there")
		}) < 0 {
			t.Errorf("no message_end with the echo:\n%s", dump(ws))
		}
	})
}

// A second client resumes with switch_session afterSeq while a prompt is
// streaming: it gets exactly the events after the cursor, in order, with
// no gap and no duplicate where the missed events meet the live ones.
func TestSwitchSessionResumesAfterSeq(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixture(t, fixtureConfig{chunkDelay: 10 * time.Millisecond})
		la := &fakeLink{}
		a := fx.connect(t, la)
		a.handle([]byte(`{"type":"create_session","id":"c1","sessionId":"s1"}`))
		a.handle([]byte(`{"type":"prompt","id":"p1","sessionId":"s1","message":"` + words(30) + `"}`))
		synctest.Wait()
		time.Sleep(105 * time.Millisecond) // ten chunks in
		synctest.Wait()
		seen := events(la.wires(t), "s1")
		if len(seen) < 6 {
			t.Fatalf("only %d events after ten chunks", len(seen))
		}
		after := seen[len(seen)/2].seq()
		if index(la.wires(t), func(w wire) bool { return w.id() == "p1" }) >= 0 {
			t.Fatal("the run ended before the second client resumed; the test needs it mid-run")
		}
		t.Logf("resuming after seq %d of %d", after, seen[len(seen)-1].seq())

		lb := &fakeLink{}
		b := fx.connect(t, lb)
		b.handle([]byte(fmt.Sprintf(`{"type":"switch_session","id":"sw","sessionId":"s1","afterSeq":%d}`, after)))
		synctest.Wait()
		time.Sleep(time.Second) // the run ends
		synctest.Wait()
		// And a second run, seen live.
		a.handle([]byte(`{"type":"prompt","id":"p2","sessionId":"s1","message":"again"}`))
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()

		wa, wb := la.wires(t), lb.wires(t)
		if _, r := response(t, wa, "p2"); r.m["success"] != true {
			t.Fatalf("second prompt: %s", r.raw)
		}
		isw, rsw := response(t, wb, "sw")
		wantSuccess(t, rsw)
		if rsw.data()["resumed"] != true {
			t.Errorf("switch_session response = %s", rsw.raw)
		}
		if s, _ := rsw.data()["seq"].(float64); uint64(s) < after {
			t.Errorf("switch_session seq %v is before the cursor %d", s, after)
		}

		var later []wire
		for _, w := range events(wa, "s1") {
			if w.seq() > after {
				later = append(later, w)
			}
		}
		evb := events(wb, "s1")
		// The live client may have had deltas merged while it lagged; the
		// resumed one sees the same stream either way.
		want, got := stream(later), stream(evb)
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("resumed client got events\n %v\nwant (what the live client saw after %d)\n %v", got, after, want)
		}
		if len(evb) > 0 {
			if first := index(wb, func(w wire) bool { return w.typ() == "event" }); first < isw {
				t.Errorf("an event (frame %d) came before the switch_session response (frame %d)", first, isw)
			}
		}
		if index(evb, func(w wire) bool { return w.eventType() == "agent_end" }) < 0 {
			t.Errorf("resumed client never saw agent_end")
		}
	})
}

// A cursor older than the event log: the client gets the whole context
// instead, and only live events.
func TestSwitchSessionCursorTooOld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixture(t, fixtureConfig{eventLogSize: 8})
		la := &fakeLink{}
		a := fx.connect(t, la)
		a.handle([]byte(`{"type":"create_session","id":"c1","sessionId":"s1"}`))
		a.handle([]byte(`{"type":"prompt","id":"p1","sessionId":"s1","message":"` + words(20) + `"}`))
		synctest.Wait()
		wantSuccess(t, func() wire { _, r := response(t, la.wires(t), "p1"); return r }())

		lb := &fakeLink{}
		b := fx.connect(t, lb)
		b.handle([]byte(`{"type":"switch_session","id":"sw","sessionId":"s1","afterSeq":1}`))
		synctest.Wait()
		wb := lb.wires(t)
		_, r := response(t, wb, "sw")
		wantSuccess(t, r)
		d := r.data()
		if d["resumed"] != false || d["cursorTooOld"] != true {
			t.Fatalf("switch_session = %s", r.raw)
		}
		if msgs, _ := d["messages"].([]any); len(msgs) != 2 {
			t.Errorf("messages = %v, want the user message and the answer", d["messages"])
		}
		if evs := events(wb, "s1"); len(evs) != 0 {
			t.Errorf("old events were sent after cursorTooOld:\n%s", dump(evs))
		}
		// Live events follow.
		a.handle([]byte(`{"type":"prompt","id":"p2","sessionId":"s1","message":"more"}`))
		synctest.Wait()
		evs := events(lb.wires(t), "s1")
		if len(evs) == 0 || uint64(d["seq"].(float64)) >= evs[0].seq() {
			t.Errorf("live events after cursorTooOld:\n%s", dump(evs))
		}
	})
}

// A client that does not read is disconnected with 1011 once more than
// MaxQueuedBytes wait for it; the other clients of the session go on.
func TestSlowClientIsDisconnected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxQueued = 16 << 10
		fx := newFixture(t, fixtureConfig{chunkDelay: time.Millisecond, opts: func(o *testOptions) { o.Limits.MaxQueuedBytes = maxQueued }})
		fast := &fakeLink{}
		a := fx.connect(t, fast)
		a.handle([]byte(`{"type":"create_session","id":"c1","sessionId":"s1"}`))
		synctest.Wait()

		slow := &fakeLink{gate: make(chan struct{})}
		b := fx.connect(t, slow)
		synctest.Wait() // its writer now waits in write(server_ready)
		b.handle([]byte(`{"type":"switch_session","id":"sw","sessionId":"s1"}`))
		synctest.Wait()

		a.handle([]byte(`{"type":"prompt","id":"p1","sessionId":"s1","message":"` + words(150) + `"}`))
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()

		wa := fast.wires(t)
		if _, r := response(t, wa, "p1"); r.m["success"] != true {
			t.Fatalf("prompt: %s", r.raw)
		}
		if index(wa, func(w wire) bool { return w.eventType() == "agent_end" }) < 0 {
			t.Errorf("the fast client missed agent_end")
		}
		if n, _, _ := fast.closed(); n != 0 {
			t.Errorf("the fast client was closed")
		}
		total := 0
		for _, w := range events(wa, "s1") {
			total += len(w.raw)
		}
		if total <= 2*maxQueued {
			t.Fatalf("the run sent only %d bytes of events; the test needs more than %d", total, 2*maxQueued)
		}

		// The slow client is cut off: nothing more is queued for it, and
		// it is closed once its stuck write returns.
		if !b.client.Closing() {
			t.Errorf("slow connection is not being closed")
		}
		close(slow.gate)
		synctest.Wait()
		n, code, reason := slow.closed()
		if n != 1 || code != 1011 || reason != fmt.Sprintf("Client too slow: more than %d bytes waiting to be sent", maxQueued) {
			t.Errorf("slow client closed %d times, last with %d %q", n, code, reason)
		}
		// It had been handed server_ready and the recovery summary (one
		// batch) before it stopped reading; none of the session's events.
		if ws := slow.wires(t); len(events(ws, "s1")) > 0 || len(ws) > 2 {
			t.Errorf("slow client got frames after it fell behind:\n%s", dump(ws))
		}
		registered := false
		for _, c := range fx.layer.Clients("") {
			registered = registered || c == b.client
		}
		h, err := fx.layer.Session(context.Background(), "s1")
		if err != nil {
			t.Fatal(err)
		}
		subscribed := h.Subscribed(b.client)
		if registered || subscribed {
			t.Errorf("closed connection still registered (%v) or subscribed (%v)", registered, subscribed)
		}

		// The fast client goes on.
		a.handle([]byte(`{"type":"get_state","id":"g","sessionId":"s1"}`))
		synctest.Wait()
		_, r := response(t, fast.wires(t), "g")
		wantSuccess(t, r)
	})
}

func TestMaxPendingPerConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixture(t, fixtureConfig{chunkDelay: 10 * time.Millisecond, opts: func(o *testOptions) { o.Limits.MaxPending = 1 }})
		la := &fakeLink{}
		a := fx.connect(t, la)
		a.handle([]byte(`{"type":"create_session","id":"c1","sessionId":"s1"}`))
		synctest.Wait()
		a.handle([]byte(`{"type":"prompt","id":"p1","sessionId":"s1","message":"` + words(10) + `"}`))
		synctest.Wait() // the prompt is running
		a.handle([]byte(`{"type":"get_state","id":"g1","sessionId":"s1"}`))
		synctest.Wait()
		_, r := response(t, la.wires(t), "g1")
		wantError(t, r, "Too many pending commands on this connection (max 1)")
		if r.m["command"] != "get_state" {
			t.Errorf("refusal = %s", r.raw)
		}
		if index(la.wires(t), func(w wire) bool { return w.typ() == "command_accepted" && w.data()["commandId"] == "g1" }) >= 0 {
			t.Errorf("a refused command was admitted")
		}

		// The limit is per connection.
		lb := &fakeLink{}
		b := fx.connect(t, lb)
		b.handle([]byte(`{"type":"get_state","id":"g2","sessionId":"s1"}`))
		synctest.Wait()
		_, r = response(t, lb.wires(t), "g2")
		wantSuccess(t, r)

		time.Sleep(time.Second)
		synctest.Wait()
		a.handle([]byte(`{"type":"get_state","id":"g3","sessionId":"s1"}`))
		synctest.Wait()
		ws := la.wires(t)
		_, r = response(t, ws, "p1")
		wantSuccess(t, r)
		_, r = response(t, ws, "g3")
		wantSuccess(t, r)
	})
}

// Shutdown tells every client, refuses new commands and connections,
// lets the running prompt finish and answer, then closes with 1001.
func TestShutdownDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixture(t, fixtureConfig{chunkDelay: 10 * time.Millisecond, opts: func(o *testOptions) { o.Limits.ShutdownTimeout = 10 * time.Second }})
		la, lb := &fakeLink{}, &fakeLink{}
		a, _ := fx.connect(t, la), fx.connect(t, lb)
		a.handle([]byte(`{"type":"create_session","id":"c1","sessionId":"s1"}`))
		synctest.Wait()
		a.handle([]byte(`{"type":"prompt","id":"p1","sessionId":"s1","message":"` + words(20) + `"}`))
		synctest.Wait()

		done := make(chan error, 1)
		go func() { done <- fx.layer.Shutdown(context.Background()) }()
		synctest.Wait()
		for _, l := range []*fakeLink{la, lb} {
			ws := l.wires(t)
			i := index(ws, func(w wire) bool { return w.typ() == "server_shutdown" })
			if i < 0 || ws[i].raw != `{"type":"server_shutdown","data":{"reason":"graceful_shutdown","timeoutMs":10000}}` {
				t.Fatalf("no server_shutdown:\n%s", dump(ws))
			}
		}
		a.handle([]byte(`{"type":"get_state","id":"late","sessionId":"s1"}`))
		synctest.Wait()
		_, r := response(t, la.wires(t), "late")
		wantError(t, r, "Server is shutting down")
		var rf *refusal
		if err := newConn(fx.srv, "test", &fakeLink{}).start(); !errors.As(err, &rf) || rf.code != 1001 || rf.reason != "Server shutting down" {
			t.Errorf("a new connection during shutdown: %v, want refused with 1001", err)
		}

		time.Sleep(time.Second) // the prompt finishes within the drain
		if err := <-done; err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		ws := la.wires(t)
		_, r = response(t, ws, "p1")
		wantSuccess(t, r)
		for _, l := range []*fakeLink{la, lb} {
			if n, code, reason := l.closed(); n != 1 || code != 1001 || reason != "Server shutting down" {
				t.Errorf("closed %d times, with %d %q; want once with 1001", n, code, reason)
			}
		}
		if n := fx.layer.SessionCount() + fx.layer.ClientCount(); n != 0 {
			t.Errorf("%d sessions and connections left after Shutdown", n)
		}
	})
}

// A prompt that outlasts the drain is cancelled and answered; Shutdown
// still closes everything.
func TestShutdownDrainTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixture(t, fixtureConfig{chunkDelay: time.Second, opts: func(o *testOptions) { o.Limits.ShutdownTimeout = 3 * time.Second }})
		la := &fakeLink{}
		a := fx.connect(t, la)
		a.handle([]byte(`{"type":"create_session","id":"c1","sessionId":"s1"}`))
		synctest.Wait()
		a.handle([]byte(`{"type":"prompt","id":"p1","sessionId":"s1","message":"` + words(20) + `"}`))
		synctest.Wait()
		start := time.Now()
		if err := fx.layer.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if d := time.Since(start); d < 3*time.Second || d > 4*time.Second {
			t.Errorf("Shutdown took %v with a 3s drain", d)
		}
		_, r := response(t, la.wires(t), "p1")
		wantError(t, r, "Server is shutting down")
		if n, code, _ := la.closed(); n != 1 || code != 1001 {
			t.Errorf("closed %d times with %d", n, code)
		}
	})
}

// load_session applies the rule and brings a stored session back under the
// id it had.
func TestLoadSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixture(t, fixtureConfig{})
		l := &fakeLink{}
		c := fx.connect(t, l)
		c.handle([]byte(`{"type":"create_session","id":"c1","sessionId":"s1"}`))
		c.handle([]byte(`{"type":"prompt","id":"p1","sessionId":"s1","message":"remember me"}`))
		synctest.Wait()
		_, r := response(t, l.wires(t), "c1")
		info, _ := r.data()["sessionInfo"].(map[string]any)
		file, _ := info["sessionFile"].(string)
		if file == "" || !strings.HasPrefix(file, fx.sessionsDir) {
			t.Fatalf("session file %q is not under %s", file, fx.sessionsDir)
		}
		c.handle([]byte(`{"type":"delete_session","id":"d1","sessionId":"s1"}`))
		synctest.Wait()
		_, r = response(t, l.wires(t), "d1")
		wantSuccess(t, r)

		c.handle([]byte(`{"type":"load_session","id":"l0","sessionPath":"sessions/x.jsonl"}`))
		outside := filepath.Join(fx.root, "outside.jsonl")
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// Another project's .pi/sessions: not the server's workspace.
		otherProject := filepath.Join(fx.root, "proj", ".pi", "sessions", "x.jsonl")
		for _, p := range []string{outside, otherProject} {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		c.handle([]byte(`{"type":"load_session","id":"l1","sessionPath":"` + outside + `"}`))
		c.handle([]byte(`{"type":"load_session","id":"l3","sessionPath":"` + otherProject + `"}`))
		c.handle([]byte(`{"type":"load_session","id":"l2","sessionPath":"` + file + `"}`))
		synctest.Wait()
		ws := l.wires(t)
		_, r = response(t, ws, "l0")
		wantError(t, r, "sessionPath must be an absolute path")
		_, r = response(t, ws, "l1")
		notAllowed := fmt.Sprintf("sessionPath must be under an allowed session directory (%s, %s)", fx.sessionsDir, filepath.Join(fx.root, "cwd", ".pi", "sessions"))
		wantError(t, r, notAllowed)
		_, r = response(t, ws, "l3")
		wantError(t, r, notAllowed)
		_, r = response(t, ws, "l2")
		wantSuccess(t, r)
		if r.data()["sessionId"] != "s1" {
			t.Errorf("load_session = %s, want the session back as s1", r.raw)
		}

		c.handle([]byte(`{"type":"get_messages","id":"m","sessionId":"s1"}`))
		synctest.Wait()
		_, r = response(t, l.wires(t), "m")
		wantSuccess(t, r)
		if !strings.Contains(r.raw, "remember me") {
			t.Errorf("the loaded session lost its messages: %s", r.raw)
		}
	})
}

// Rejections before admission get a failure response, no lifecycle
// events, and the connection goes on.
func TestBadFramesKeepTheConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixture(t, fixtureConfig{opts: func(o *testOptions) { o.Limits.MaxFrameBytes = 64 }})
		l := &fakeLink{}
		c := fx.connect(t, l)
		c.handle([]byte(`{"type":`))
		c.handle([]byte(`{"type":"x","id":"u"}`))
		c.handle([]byte(`{"type":"list_sessions","id":"big","pad":"` + strings.Repeat("p", 64) + `"}`))
		c.handle([]byte(`{"type":"get_state","id":"nf","sessionId":"nope"}`))
		c.handle([]byte(`{"type":"list_sessions","id":"ok"}`))
		synctest.Wait()
		ws := l.wires(t)[1:] // after server_ready: startup_recovery_summary, then the answers
		if ws[1].raw != `{"type":"response","command":"unknown","success":false,"error":"Invalid JSON: unexpected EOF"}` {
			t.Errorf("bad JSON: %s", ws[1].raw)
		}
		_, r := response(t, ws, "u")
		wantError(t, r, "Validation failed: type: Unknown command type 'x'")
		if ws[3].raw != `{"type":"response","command":"unknown","success":false,"error":"Message size 108 exceeds limit 64"}` {
			t.Errorf("oversize: %s", ws[3].raw)
		}
		_, r = response(t, ws, "nf")
		wantError(t, r, "Session nope not found")
		_, r = response(t, ws, "ok")
		wantSuccess(t, r)
		for _, w := range ws {
			if id, _ := w.data()["commandId"].(string); id == "u" {
				t.Errorf("a refused frame has a lifecycle event: %s", w.raw)
			}
		}
	})
}

func TestConnectionLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixture(t, fixtureConfig{opts: func(o *testOptions) { o.Limits.MaxConnections = 1 }})
		fx.connect(t, &fakeLink{})
		var rf *refusal
		err := newConn(fx.srv, "test", &fakeLink{}).start()
		if !errors.As(err, &rf) || rf.code != 1013 || rf.reason != "Connection limit reached (1 connections)" {
			t.Fatalf("second connection: %v, want refused with 1013", err)
		}
		if n := fx.layer.Rejected(server.RejectConnectionLimit); n != 1 {
			t.Errorf("connectionLimit rejections = %d", n)
		}
	})
}

// Close stops a server that has nothing running: it has nothing to
// report.
func TestCloseReturnsNil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixture(t, fixtureConfig{})
		l := &fakeLink{}
		fx.connect(t, l)
		synctest.Wait()
		if err := fx.layer.Close(); err != nil {
			t.Errorf("Close() = %v on an idle server, want nil", err)
		}
		if n, code, _ := l.closed(); n != 1 || code != 1001 {
			t.Errorf("connection closed %d times with %d", n, code)
		}
	})
}

// A command with a field it does not use (which another command uses with
// another type) is still a valid command: clients may send extra fields.
func TestExtraFieldDoesNotBreakACommand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixture(t, fixtureConfig{})
		l := &fakeLink{}
		c := fx.connect(t, l)
		c.handle([]byte(`{"type":"create_session","id":"c1","sessionId":"s1"}`))
		c.handle([]byte(`{"type":"get_state","id":"g","sessionId":"s1","message":5}`))
		c.handle([]byte(`{"type":"switch_session","id":"sw","sessionId":"s1","afterSeq":0.0}`))
		synctest.Wait()
		ws := l.wires(t)
		for _, id := range []string{"g", "sw"} {
			_, r := response(t, ws, id)
			if r.m["success"] != true {
				t.Errorf("admitted command %s failed in its handler: %s", id, r.raw)
			}
		}
	})
}

// gateJournal holds the outcome of one command at the journal, as a slow
// durable write would.
type gateJournal struct {
	*pipeline.MemJournal
	id      string
	reached chan struct{}
	release chan struct{}
}

func (j *gateJournal) Append(r pipeline.Record) error {
	if r.Op == pipeline.OpFinish && r.ID == j.id {
		close(j.reached)
		<-j.release
	}
	return j.MemJournal.Append(r)
}

// switch_session without afterSeq answers with the session's latest seq;
// the events after that seq follow, even those emitted between the
// handler and the subscription (here: while the outcome is journaled).
func TestSwitchSessionWithoutCursorHasNoGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := &gateJournal{MemJournal: pipeline.NewMemJournal(), id: "sw", reached: make(chan struct{}), release: make(chan struct{})}
		fx := newFixture(t, fixtureConfig{opts: func(o *testOptions) { o.Journal = j }})
		la, lb := &fakeLink{}, &fakeLink{}
		a, b := fx.connect(t, la), fx.connect(t, lb)
		a.handle([]byte(`{"type":"create_session","id":"c1","sessionId":"s1"}`))
		a.handle([]byte(`{"type":"prompt","id":"p1","sessionId":"s1","message":"first"}`))
		synctest.Wait()

		b.handle([]byte(`{"type":"switch_session","id":"sw","sessionId":"s1"}`))
		synctest.Wait()
		<-j.reached // the handler has answered; its outcome is being stored
		a.handle([]byte(`{"type":"prompt","id":"p2","sessionId":"s1","message":"second"}`))
		synctest.Wait()
		close(j.release)
		synctest.Wait()

		wa, wb := la.wires(t), lb.wires(t)
		_, r := response(t, wa, "p2")
		wantSuccess(t, r)
		_, r = response(t, wb, "sw")
		wantSuccess(t, r)
		seq := uint64(r.data()["seq"].(float64))
		var later []wire
		for _, w := range events(wa, "s1") {
			if w.seq() > seq {
				later = append(later, w)
			}
		}
		want, got := stream(later), stream(events(wb, "s1"))
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("switch_session answered seq %d, then the client got events\n %v\nwant every event after %d\n %v", seq, got, seq, want)
		}
	})
}

// Another face's commands share the pipeline (and its lane order), but
// their lifecycle events are that face's business: a pi-server client
// never gets command_* frames for them.
func TestOtherFacesCommandsAreNotBroadcast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixture(t, fixtureConfig{register: pipeline.Registry{
			"other.cmd": {Class: pipeline.ClassRead, Lane: pipeline.LaneServer, ReadOnly: true,
				Run: func(context.Context, pipeline.Command) (json.RawMessage, error) { return nil, nil }},
		}})
		l := &fakeLink{}
		fx.connect(t, l)
		if r := fx.layer.Pipeline().Do(pipeline.Command{Type: "other.cmd", ID: "o1"}); !r.Success {
			t.Fatalf("other.cmd failed: %+v", r)
		}
		c := fx.connect(t, &fakeLink{})
		c.handle([]byte(`{"type":"health_check","id":"h"}`))
		synctest.Wait()
		// Another client's lifecycle frames may wait a while for company.
		time.Sleep(time.Second)
		synctest.Wait()
		for _, w := range l.wires(t) {
			if strings.HasPrefix(w.typ(), "command_") && w.data()["commandType"] != "health_check" {
				t.Errorf("a pi-server client got another face's lifecycle frame: %s", w.raw)
			}
		}
		if index(l.wires(t), func(w wire) bool { return w.typ() == "command_finished" }) < 0 {
			t.Errorf("no lifecycle frame of its own face's health_check: the broadcast is broken")
		}
	})
}
