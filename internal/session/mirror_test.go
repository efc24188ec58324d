package session_test

import (
	"bytes"
	"os"
	"sync"
	"testing"

	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// TestTranscriptOptionsFollowTheFile: a mirror given in TranscriptOptions
// (a cluster's) holds the session's current file through appends,
// new_session, switch and fork.
func TestTranscriptOptionsFollowTheFile(t *testing.T) {
	var mu sync.Mutex
	var mirrored []byte
	mirror := func(b []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if bytes.HasPrefix(b, []byte(`{"type":"session"`)) {
			mirrored = mirrored[:0]
		}
		mirrored = append(mirrored, b...)
		return nil
	}
	h := newHarness(t, func(c *session.Config) {
		c.TranscriptOptions = []transcript.Option{transcript.WithMirror(mirror)}
	})
	check := func(step string) {
		t.Helper()
		got, err := os.ReadFile(h.s.File())
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if !bytes.Equal(got, mirrored) {
			t.Fatalf("%s: the mirror does not hold the session's file:\n%s\nfile:\n%s", step, mirrored, got)
		}
	}
	if err := h.s.Append(session.UserMessage("first", nil)); err != nil {
		t.Fatal(err)
	}
	check("append")
	first := h.s.File()

	if err := h.s.NewSession(""); err != nil {
		t.Fatal(err)
	}
	if err := h.s.Append(session.UserMessage("in a new session", nil)); err != nil {
		t.Fatal(err)
	}
	check("new_session")

	if err := h.s.Switch(first); err != nil {
		t.Fatal(err)
	}
	if err := h.s.Append(session.UserMessage("back in the first", nil)); err != nil {
		t.Fatal(err)
	}
	check("switch")

	if err := h.s.Clone(); err != nil {
		t.Fatal(err)
	}
	check("clone")
	if err := h.s.Append(session.UserMessage("in the clone", nil)); err != nil {
		t.Fatal(err)
	}
	check("append to the clone")
}
