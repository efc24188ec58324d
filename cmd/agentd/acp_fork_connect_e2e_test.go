package main

import (
	"strings"
	"testing"
)

// session/fork through the bridge (agentd acp --connect), with the
// official SDK as the editor: agentd serve copies the session with its
// clone command. The fork carries the source's history to the model, the
// source goes on without the fork's turns, and both are sessions of
// serve. Cases: the source hosted by serve, and the source only stored
// (serve restarted after kill -9).
func TestACPConnectForkWithTheOfficialClient(t *testing.T) {
	acpNodeModules(t)
	tests := []struct {
		name   string
		stored bool
	}{
		{name: "hosted"},
		{name: "stored", stored: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := e2eNewEnv(t, e2eOpts{})
			s := svStart(t, e)
			connect := func() []string { return []string{"--connect", "ws://" + s.addr + "/"} }
			first := e.acpClient([]string{"init", "new", "prompt:first words"}, connect()...)
			src, _ := acpFind(t, first, "new").Result["sessionId"].(string)
			if p := acpFind(t, first, "prompt:first words"); src == "" || p.StopReason != "end_turn" {
				t.Fatalf("session/new %v, prompt %q", acpFind(t, first, "new").Result, p.StopReason)
			}
			if tt.stored {
				s.kill9()
				s = s.restart()
			}
			steps := e.acpClient([]string{"init", "use:" + src, "fork", "prompt:in the fork", "use:" + src, "resume", "prompt:in the source"}, connect()...)
			init := acpFind(t, steps, "init")
			if sc, _ := svAt(init.Result, "agentCapabilities", "sessionCapabilities").(map[string]any); sc["fork"] == nil {
				t.Fatalf("the bridge does not offer session/fork: %v", init.Result)
			}
			fork := acpFind(t, steps, "fork")
			id, _ := fork.Result["sessionId"].(string)
			if fork.Code != nil || id == "" || id == src {
				t.Fatalf("session/fork of %s: %v (code %v %s)", src, fork.Result, fork.Code, fork.Message)
			}
			if p := acpFind(t, steps, "prompt:in the fork"); p.StopReason != "end_turn" || !strings.Contains(p.Text, "in the fork") {
				t.Fatalf("prompt in the fork: %q %q", p.StopReason, p.Text)
			}
			if p := acpFind(t, steps, "prompt:in the source"); p.StopReason != "end_turn" || !strings.Contains(p.Text, "in the source") {
				t.Fatalf("prompt in the source after the fork: %q %q", p.StopReason, p.Text)
			}
			// What the model was sent: the fork's turn with the source's
			// history, the source's next turn without the fork's.
			var inFork, inSource string
			for _, r := range e.mock.Requests() {
				b := string(r.Body)
				switch {
				case strings.Contains(b, "in the fork"):
					inFork = b
				case strings.Contains(b, "in the source"):
					inSource = b
				}
			}
			if !strings.Contains(inFork, "first words") {
				t.Errorf("the fork's request lacks the source's history: %.400s", inFork)
			}
			if inSource == "" || !strings.Contains(inSource, "first words") || strings.Contains(inSource, "in the fork") {
				t.Errorf("the source's request after the fork: %.400s", inSource)
			}
			// Both are serve's sessions, each with its own history.
			for sid, want := range map[string][2]string{id: {"in the fork", "in the source"}, src: {"in the source", "in the fork"}} {
				body := string(rsOK(t, s, "GET", rsConvPath(sid), nil).body)
				if !strings.Contains(body, "first words") || !strings.Contains(body, want[0]) || strings.Contains(body, want[1]) {
					t.Errorf("session %s on serve: want %q and not %q:\n%.600s", sid, want[0], want[1], body)
				}
			}
		})
	}
}
