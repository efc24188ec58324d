package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/sandbox"
)

// rsSandboxOf is config.chat.sandbox of a GET .../config answer.
func rsSandboxOf(r rsReply) string {
	chat, _ := r.m["chat"].(map[string]any)
	s, _ := chat["sandbox"].(string)
	return s
}

// A REST conversation created read-only (config.chat.sandbox) runs its
// tools read-only: the model's write is refused by the sandbox and the
// file never appears, its fork inherits the mode, and after kill -9 and
// a restart it is still read-only. Modes the server may not give, and
// values that are no mode, are refused with a 400 in the words pi-server
// uses for its create_session.
func TestRESTConversationSandbox(t *testing.T) {
	t.Parallel()
	if s := sandbox.Probe(); s.Err != nil {
		t.Skipf("no Landlock on this kernel, the sandbox cannot be tested: %v", s.Err)
	}
	e := e2eNewEnv(t, e2eOpts{})
	s := svStart(t, e) // serve's default: workspace-write

	const allowed = "sandbox must be read-only or workspace-write"
	hostile := []struct {
		name  string
		value any
		want  string
	}{
		{"looser", "full-access", "Sandbox mode full-access is not allowed: this server runs tools in workspace-write, and a session may only choose that or a stricter mode; " + allowed},
		{"unknown", "none", `Unknown sandbox mode "none": ` + allowed},
		{"case", "READ-ONLY", `Unknown sandbox mode "READ-ONLY": ` + allowed},
		{"padded", " read-only", `Unknown sandbox mode " read-only": ` + allowed},
		{"nul", "read-only\x00", `Unknown sandbox mode "read-only\x00": ` + allowed},
		{"number", 1, `Unknown sandbox mode "1": ` + allowed},
		{"list", []string{"read-only"}, `Unknown sandbox mode "[\"read-only\"]": ` + allowed},
		{"object", map[string]any{"mode": "read-only"}, `Unknown sandbox mode "{\"mode\":\"read-only\"}": ` + allowed},
		{"long", strings.Repeat("read-only", 2000), `Unknown sandbox mode "` + strings.Repeat("read-only", 7) + `r…": ` + allowed},
	}
	for _, h := range hostile {
		id := "hostile-" + h.name
		r := rsDo(t, s, "PUT", rsConvPath(id), map[string]any{"config": map[string]any{"chat": map[string]any{"sandbox": h.value}}})
		if r.status != http.StatusBadRequest || r.str("error") != h.want {
			t.Errorf("PUT with sandbox %s: %d %s\nwant 400 %q", h.name, r.status, r, h.want)
		}
		if r := rsDo(t, s, "GET", rsConvPath(id), nil); r.status != http.StatusNotFound {
			t.Errorf("a refused PUT (%s) left a conversation: %d %s", h.name, r.status, r)
		}
	}

	rsOK(t, s, "PUT", rsConvPath("default"), map[string]any{})
	if got := rsSandboxOf(rsOK(t, s, "GET", rsConvPath("default")+"/config", nil)); got != "workspace-write" {
		t.Fatalf("a conversation that chose nothing reports sandbox %q, want the server's workspace-write", got)
	}
	id := "ro"
	rsOK(t, s, "PUT", rsConvPath(id), map[string]any{"config": map[string]any{"chat": map[string]any{"sandbox": "read-only"}}})
	if got := rsSandboxOf(rsOK(t, s, "GET", rsConvPath(id)+"/config", nil)); got != "read-only" {
		t.Fatalf("GET config reports sandbox %q, want read-only", got)
	}
	// PATCH may send the config back as GET gave it, never a new mode.
	rsOK(t, s, "PATCH", rsConvPath(id)+"/config", map[string]any{"chat": map[string]any{"sandbox": "read-only"}})
	if r := rsDo(t, s, "PATCH", rsConvPath(id)+"/config", map[string]any{"chat": map[string]any{"sandbox": "workspace-write"}}); r.status != http.StatusBadRequest ||
		!strings.Contains(r.str("error"), "sandbox cannot change") {
		t.Fatalf("PATCH to a looser sandbox: %d %s", r.status, r)
	}

	// writeRefused has the model of conversation id on server sv write
	// name in the workspace and reports the tool's result.
	writeRefused := func(sv *svServer, id, name string) {
		t.Helper()
		prompt := "write " + name
		callID := "call_write_" + name
		e.tweak(prompt, func(sc *wiremock.Script) {
			a, _ := json.Marshal(map[string]string{"path": name, "content": "should not exist"})
			*sc = wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: callID, Name: "write", Args: []string{string(a)}}}}
		})
		st, from := rsStepTool(t, sv, id, prompt)
		defer st.close()
		st.waitType(from, "run_ended")
		want := "Cannot write " + name + ": the sandbox (read-only: no writes anywhere; no network) does not allow it."
		svWaitUntil(t, "the sandbox's refusal as the write's result", func() bool {
			return strings.Contains(rsOK(t, sv, "GET", rsConvPath(id), nil).body, want)
		})
		if _, err := os.Stat(filepath.Join(e.cwd, name)); !os.IsNotExist(err) {
			t.Fatalf("a read-only conversation wrote %s (stat: %v)", name, err)
		}
	}
	writeRefused(s, id, "before.txt")

	// A fork runs in its source's mode.
	fork := rsOK(t, s, "POST", rsConvPath(id)+"/fork?after_message=0", nil)
	forkID := fork.str("conversation_id")
	if got := rsSandboxOf(rsOK(t, s, "GET", rsConvPath(forkID)+"/config", nil)); got != "read-only" {
		t.Fatalf("the fork of a read-only conversation reports sandbox %q", got)
	}

	s.kill9()
	s2 := s.restart()
	for _, c := range []string{id, forkID} {
		if got := rsSandboxOf(rsOK(t, s2, "GET", rsConvPath(c)+"/config", nil)); got != "read-only" {
			t.Fatalf("after kill -9 and a restart, %s reports sandbox %q", c, got)
		}
	}
	if got := rsSandboxOf(rsOK(t, s2, "GET", rsConvPath("default")+"/config", nil)); got != "workspace-write" {
		t.Fatalf("after the restart the default conversation reports sandbox %q", got)
	}
	writeRefused(s2, id, "after.txt")
	writeRefused(s2, forkID, "fork.txt")
}
