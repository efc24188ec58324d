package main

import (
	"fmt"
	"strings"
	"testing"
)

// The official SDK (2.4.0) as the editor: ask_user's input and form
// questions answered through elicitation/create, and after a restart the
// session resumed (no replay) and forked.
func TestACPResumeForkAndElicitationWithTheOfficialClient(t *testing.T) {
	e := e2eNewEnv(t, e2eOpts{})
	steps := e.acpClient([]string{
		"init-elicit", "new", "prompt:first words",
		`elicit-answer:{"action":"accept","content":{"value":"typed-in-editor"}}`, "prompt:ASK:input",
		`elicit-answer:{"action":"accept","content":{"count":7}}`, "prompt:ASK:form",
		`elicit-answer:{"action":"decline"}`, "prompt:ASK:editor",
		"restart", "init", "resume", "prompt:after resume", "fork", "prompt:in the fork",
	})

	init := acpFind(t, steps, "init-elicit")
	caps, _ := init.Result["agentCapabilities"].(map[string]any)
	sc, _ := caps["sessionCapabilities"].(map[string]any)
	if sc["resume"] == nil || sc["fork"] == nil {
		t.Fatalf("sessionCapabilities %v", sc)
	}

	tests := []struct {
		step, prop, want string
	}{
		{"prompt:ASK:input", "value", "typed-in-editor"},
		{"prompt:ASK:form", "count", "7"},
		{"prompt:ASK:editor", "value", "dismissed"},
	}
	for _, tt := range tests {
		s := acpFind(t, steps, tt.step)
		if s.StopReason != "end_turn" || len(s.Elicited) != 1 {
			t.Fatalf("%s: stop %q, elicited %v", tt.step, s.StopReason, s.Elicited)
		}
		req := s.Elicited[0]
		props, _ := req["requestedSchema"].(map[string]any)["properties"].(map[string]any)
		if req["mode"] != "form" || props[tt.prop] == nil || req["sessionId"] == "" {
			t.Errorf("%s: elicitation/create %v", tt.step, req)
		}
		if end := acpToolEnd(s); end == nil || !strings.Contains(strings.ToLower(fmt.Sprint(end["content"])), tt.want) {
			t.Errorf("%s: the ask_user result %v, want %q in it", tt.step, end, tt.want)
		}
	}

	resume := acpFind(t, steps, "resume")
	if len(resume.Updates) != 0 {
		t.Errorf("session/resume replayed %d updates", len(resume.Updates))
	}
	if s := acpFind(t, steps, "prompt:after resume"); s.StopReason != "end_turn" || !strings.Contains(s.Text, "after resume") {
		t.Errorf("prompt after resume: %q %q", s.StopReason, s.Text)
	}
	fork := acpFind(t, steps, "fork")
	if id, _ := fork.Result["sessionId"].(string); id == "" {
		t.Fatalf("fork: %v", fork.Result)
	}
	if s := acpFind(t, steps, "prompt:in the fork"); s.StopReason != "end_turn" || !strings.Contains(s.Text, "in the fork") {
		t.Errorf("prompt in the fork: %q %q", s.StopReason, s.Text)
	}
}
