package main

import (
	"strings"
	"testing"
)

// serve says what it does for its clients at info: sessions made and
// deleted, each command (who, what, outcome, duration), each shell
// command, each run's outcome; conversation text only at debug.
func TestServeLogsWhatItDoes(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStart(t, e)
	c := s.dial("A")
	svCreate(c, "logged")
	svPrompt(c, "logged", "a very private prompt text")
	c.must("bash", svM{"sessionId": "logged", "command": "echo from-the-log-test"})
	svWantErr(t, c.do("get_messages", svM{"sessionId": "nope"}), "Session nope not found")
	c.must("delete_session", svM{"sessionId": "logged"})
	svWaitUntil(t, "the delete in the log", func() bool { return strings.Contains(s.stderr.String(), "command=delete_session") })
	log := s.stderr.String()
	for _, want := range []string{
		"session created", "session=logged",
		"command=create_session", "command=prompt", "command=delete_session",
		"success=true", "success=false", `error="Session nope not found"`,
		"shell=\"echo from-the-log-test\"", "ms=", "remote=127.0.0.1",
		"run ended", "outcome=completed", "session deleted",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, e2eClip(log, 4000))
		}
	}
	if strings.Contains(log, "very private prompt") {
		t.Errorf("prompt text logged at info:\n%s", e2eClip(log, 4000))
	}
}
