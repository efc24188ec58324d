package piserver

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
)

// lockedBuffer is a log destination the server's goroutines write to
// while a test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A failure the client caused or may know about (a fault.Error) reaches
// it with its text; any other failure, here the sessions directory
// turned into a file under a live session, is logged with the session
// and the command, and the client reads only "Internal error".
func TestFailuresReachTheClientOnlyAsFaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &lockedBuffer{}
		fx := newFixture(t, fixtureConfig{opts: func(o *testOptions) {
			o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
		}})
		l := &fakeLink{}
		c := fx.connect(t, l)
		c.handle([]byte(`{"type":"create_session","id":"c","sessionId":"s1"}`))
		synctest.Wait()
		_, rc := response(t, l.wires(t), "c")
		wantSuccess(t, rc)
		// The failing dependency: new transcripts can no longer be created.
		if err := os.RemoveAll(fx.sessionsDir); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(fx.sessionsDir, []byte("not a directory"), 0o600); err != nil {
			t.Fatal(err)
		}
		c.handle([]byte(`{"type":"new_session","id":"n","sessionId":"s1"}`))
		c.handle([]byte(`{"type":"set_thinking_level","id":"t","sessionId":"s1","level":"enormous"}`))
		c.handle([]byte(`{"type":"fork","id":"f","sessionId":"s1","entryId":"nope"}`))
		c.handle([]byte(`{"type":"set_mode","id":"m","sessionId":"s1","mode":"no-such-mode"}`))
		synctest.Wait()
		ws := l.wires(t)
		tests := []struct{ id, want string }{
			{"n", "Internal error"},
			{"t", `Validation failed: level: invalid thinking level "enormous": want one of off, minimal, low, medium, high, xhigh`},
			{"f", `entry "nope" is not a user message of this session`},
		}
		for _, tt := range tests {
			_, r := response(t, ws, tt.id)
			wantError(t, r, tt.want)
		}
		if _, r := response(t, ws, "m"); r.m["success"] != false || r.m["error"] == "Internal error" || r.m["error"] == "" {
			t.Errorf("set_mode with an unknown mode = %s, want the session's reason", r.raw)
		}
		// The internal failure is logged once, with what an operator needs.
		var logged []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "command failed" {
				logged = append(logged, m)
			}
		}
		if len(logged) != 1 {
			t.Fatalf("logged %d command failures, want 1 (new_session's):\n%s", len(logged), logs.String())
		}
		if m := logged[0]; m["command"] != "new_session" || m["session"] != "s1" || !strings.Contains(m["err"].(string), "not a directory") {
			t.Errorf("log entry %v: want command new_session, session s1 and the cause", m)
		}
	})
}
