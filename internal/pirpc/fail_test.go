package pirpc

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/session"
)

// A failure the client caused or may know about (a fault.Error) reaches
// it with its text; any other failure, here the sessions directory
// turned into a file under a running session, is logged with the
// session and the command, and the client reads only "Internal error".
func TestFailuresReachTheClientOnlyAsFaults(t *testing.T) {
	dir := t.TempDir()
	sessions := filepath.Join(dir, "sessions")
	p := faux.New(faux.Options{})
	s, err := session.New(session.Config{Cwd: dir, SessionsDir: sessions, Model: faux.Model(), Stream: p.Stream})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The failing dependency: new transcripts can no longer be created.
	if err := os.RemoveAll(sessions); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sessions, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	srv := New(Options{Session: s, Models: fixedModels{faux.Model()}, Cwd: dir,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	in := strings.Join([]string{
		`{"id":"n","type":"new_session"}`,
		`{"id":"t","type":"set_thinking_level","level":"enormous"}`,
		`{"id":"f","type":"fork","entryId":"nope"}`,
		`{"id":"m","type":"set_mode","mode":"no-such-mode"}`,
		`{"id":"w","type":"switch_session","sessionPath":"` + filepath.Join(dir, "missing.jsonl") + `"}`,
	}, "\n") + "\n"
	var out bytes.Buffer
	if err := srv.Run(context.Background(), strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	errs := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r struct {
			ID      string `json:"id"`
			Type    string `json:"type"`
			Success bool   `json:"success"`
			Error   string `json:"error"`
		}
		if json.Unmarshal([]byte(line), &r) != nil || r.Type != "response" {
			continue
		}
		if r.Success {
			t.Errorf("%s succeeded: %s", r.ID, line)
		}
		errs[r.ID] = r.Error
	}
	tests := []struct {
		id, want string
	}{
		{"n", "Internal error"},
		{"t", `invalid thinking level "enormous": want one of off, minimal, low, medium, high, xhigh`},
		{"f", `entry "nope" is not a user message of this session`},
		{"w", "opening session " + filepath.Join(dir, "missing.jsonl") + ": "},
	}
	for _, tt := range tests {
		if got := errs[tt.id]; !strings.HasPrefix(got, tt.want) || (tt.want == "Internal error" && got != tt.want) {
			t.Errorf("%s: error %q, want %q", tt.id, got, tt.want)
		}
	}
	if got := errs["m"]; got == "" || got == "Internal error" {
		t.Errorf("set_mode with an unknown mode: error %q, want the session's reason", got)
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
		t.Fatalf("logged %d command failures, want 1 (new_session's): %s", len(logged), logs.String())
	}
	l := logged[0]
	if l["command"] != "new_session" || l["session"] != s.ID() || !strings.Contains(l["err"].(string), "not a directory") {
		t.Errorf("log entry %v: want command new_session, session %s and the cause", l, s.ID())
	}
}
