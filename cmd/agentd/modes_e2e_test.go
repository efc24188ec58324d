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

// needLandlock skips a test of plan mode's bash where the kernel cannot
// confine it (plan mode then has no bash at all).
func needLandlock(t *testing.T) {
	t.Helper()
	if s := sandbox.Probe(); s.Err != nil {
		t.Skipf("no Landlock on this kernel, plan mode's bash cannot be tested: %v", s.Err)
	}
}

// toolsOffered names the tools a Chat Completions request offered.
func toolsOffered(t *testing.T, body []byte) []string {
	t.Helper()
	var req struct {
		Tools []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, x := range req.Tools {
		out = append(out, x.Function.Name)
	}
	return out
}

// agentd serve, pi-server face: a session switched to plan mode (and
// only it) is offered no write or edit, a bash command that writes is
// refused by the read-only sandbox, a write the model sends anyway is
// refused, the system prompt says "Mode: plan"; after kill -9 and a
// restart the session is still in plan mode, REST's config shows it, and
// PATCH chat.mode switches it back to build, where the same bash writes.
func TestServePlanModeRefusesWritesAcrossRestart(t *testing.T) {
	t.Parallel()
	needLandlock(t)
	e := e2eNewEnv(t, e2eOpts{})
	e.tweak("WRITE-IT", func(s *wiremock.Script) {
		*s = e2eToolScript("write", map[string]string{"path": "w.txt", "content": "x"})
	})
	s := svStart(t, e)
	c := s.dial("a")
	svCreate(c, "pm")
	svCreate(c, "other")

	st := c.must("get_state", svM{"sessionId": "pm"})
	if svHas(st.m, "data", "mode") {
		t.Fatalf("a build-mode session's get_state has a mode: %s", st)
	}
	svWantErrPrefix(t, c.do("set_mode", svM{"sessionId": "pm", "mode": "yolo"}), `unknown mode "yolo"; this session's modes are build, plan`)
	w := s.dial("watcher")
	w.must("switch_session", svM{"sessionId": "pm"})
	r := c.must("set_mode", svM{"sessionId": "pm", "mode": "plan"})
	if ev := w.waitEvent("pm", "mode_changed"); svStr(ev.m, "event", "mode") != "plan" {
		t.Fatalf("a watcher's mode_changed: %s", ev)
	}
	if svStr(r.m, "data", "mode") != "plan" || len(svArr(r.m, "data", "modes")) < 2 {
		t.Fatalf("set_mode answered %s", r)
	}
	if got := svStr(c.must("get_state", svM{"sessionId": "pm"}).m, "data", "mode"); got != "plan" {
		t.Fatalf("get_state mode %q", got)
	}

	svPrompt(c, "pm", "CMD:echo hi > made.txt")
	body := e.mock.LastRequest(t).Body
	if _, err := os.Stat(filepath.Join(e.cwd, "made.txt")); !os.IsNotExist(err) {
		t.Fatalf("plan mode's bash wrote made.txt: %v", err)
	}
	if !strings.Contains(string(body), "read-only") {
		t.Fatalf("the tool result does not say the read-only sandbox refused:\n%s", body)
	}
	if !strings.Contains(string(body), "Mode: plan") {
		t.Fatalf("the system prompt does not name the mode:\n%s", body)
	}
	for _, n := range toolsOffered(t, body) {
		if n == "write" || n == "edit" {
			t.Fatalf("plan mode offered %s", n)
		}
	}
	svPrompt(c, "pm", "WRITE-IT")
	if _, err := os.Stat(filepath.Join(e.cwd, "w.txt")); !os.IsNotExist(err) {
		t.Fatalf("plan mode let the model write w.txt: %v", err)
	}

	// The other session is untouched by pm's mode.
	svPrompt(c, "other", "CMD:echo hi > other.txt")
	if _, err := os.Stat(filepath.Join(e.cwd, "other.txt")); err != nil {
		t.Fatalf("a build-mode session could not write: %v", err)
	}

	s.kill9()
	s = s.restart()
	c = s.dial("b")
	if got := svStr(c.must("get_state", svM{"sessionId": "pm"}).m, "data", "mode"); got != "plan" {
		t.Fatalf("after kill -9 and a restart get_state mode is %q", got)
	}
	cfg := rsOK(t, s, "GET", rsConvPath("pm")+"/config", nil)
	chat, _ := cfg.m["chat"].(map[string]any)
	if chat["mode"] != "plan" || len(cfg.m["modes"].([]any)) < 2 {
		t.Fatalf("REST config after the restart: %s", cfg)
	}
	if r := rsDo(t, s, "PATCH", rsConvPath("pm")+"/config", map[string]any{"chat": map[string]any{"mode": "nope"}}); r.status != http.StatusBadRequest ||
		!strings.Contains(r.str("error"), `unknown mode "nope"`) {
		t.Fatalf("PATCH to an unknown mode: %d %s", r.status, r)
	}
	up := rsOK(t, s, "PATCH", rsConvPath("pm")+"/config", map[string]any{"chat": map[string]any{"mode": "build"}})
	if !strings.Contains(up.body, `"mode":"build"`) {
		t.Fatalf("PATCH answered %s", up)
	}
	if svHas(c.must("get_state", svM{"sessionId": "pm"}).m, "data", "mode") {
		t.Fatal("get_state still reports a mode after the switch to build")
	}
	svPrompt(c, "pm", "CMD:echo hi > made.txt")
	if _, err := os.Stat(filepath.Join(e.cwd, "made.txt")); err != nil {
		t.Fatalf("back in build mode, bash could not write: %v", err)
	}

	// A conversation created in plan mode (PUT chat.mode) is in it from
	// its first message; a mode that does not exist makes none.
	rsOK(t, s, "PUT", rsConvPath("planned"), map[string]any{"config": map[string]any{"chat": map[string]any{"mode": "plan"}}})
	if chat, _ := rsOK(t, s, "GET", rsConvPath("planned")+"/config", nil).m["chat"].(map[string]any); chat["mode"] != "plan" {
		t.Fatalf("PUT with chat.mode plan: config chat %v", chat)
	}
	if r := rsDo(t, s, "PUT", rsConvPath("badmode"), map[string]any{"config": map[string]any{"chat": map[string]any{"mode": "nope"}}}); r.status != http.StatusBadRequest {
		t.Fatalf("PUT with an unknown mode: %d %s", r.status, r)
	}
	if r := rsDo(t, s, "GET", rsConvPath("badmode"), nil); r.status != http.StatusNotFound {
		t.Fatalf("a refused PUT left a conversation: %d %s", r.status, r)
	}
}

// agentd rpc: set_mode plan, then a bash command that writes is refused
// by the read-only sandbox although rpc's tools run with full access;
// the session file keeps the mode, so --continue is in plan mode too.
func TestRPCPlanModePersists(t *testing.T) {
	t.Parallel()
	needLandlock(t)
	e := e2eNewEnv(t, e2eOpts{})
	input := strings.Join([]string{
		`{"type":"get_modes","id":"gm"}`,
		`{"type":"set_mode","id":"bad"}`,
		`{"type":"set_mode","id":"sm","mode":"plan"}`,
		`{"type":"prompt","id":"p","message":"CMD:echo hi > made.txt"}`,
	}, "\n") + "\n"
	args := []string{"rpc", "--model", "mock/mock-model", "--data-dir", e.data}
	r := runIn(t, e.cwd, e.home, nil, input, args...)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	resp := map[string]any{}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		v, err := e2eParse([]byte(l))
		if err != nil {
			t.Fatalf("stdout line is not JSON: %q", l)
		}
		if (e2eLine{raw: l, v: v}).typ() == "response" {
			resp[e2eStr(v, "id")] = v
		}
	}
	if e2eStr(resp["gm"], "data", "mode") != "build" || e2eAt(resp["gm"], "data", "modes") == nil {
		t.Fatalf("get_modes: %v", resp["gm"])
	}
	if e2eStr(resp["bad"], "error") != `set_mode requires a "mode" string` {
		t.Fatalf("set_mode without a mode: %v", resp["bad"])
	}
	if e2eStr(resp["sm"], "data", "mode") != "plan" {
		t.Fatalf("set_mode: %v", resp["sm"])
	}
	if _, err := os.Stat(filepath.Join(e.cwd, "made.txt")); !os.IsNotExist(err) {
		t.Fatalf("plan mode's bash wrote made.txt: %v", err)
	}
	if body := string(e.mock.LastRequest(t).Body); !strings.Contains(body, "read-only") {
		t.Fatalf("the tool result does not say the read-only sandbox refused:\n%s", body)
	}

	r = runIn(t, e.cwd, e.home, nil, `{"type":"get_state","id":"st"}`+"\n", append(args, "--continue")...)
	if !strings.Contains(r.stdout, `"mode":"plan"`) {
		t.Fatalf("--continue: get_state without plan mode:\n%s\n%s", r.stdout, r.stderr)
	}

	// --mode chooses a new session's mode; one that does not exist is
	// refused before anything starts.
	r = runIn(t, e.cwd, e.home, nil, `{"type":"get_state","id":"st"}`+"\n", append(args, "--no-session", "--mode", "plan")...)
	if !strings.Contains(r.stdout, `"mode":"plan"`) {
		t.Fatalf("--mode plan: get_state without plan mode:\n%s\n%s", r.stdout, r.stderr)
	}
	r = runIn(t, e.cwd, e.home, nil, "", append(args, "--no-session", "--mode", "nope")...)
	if r.code == 0 || !strings.Contains(r.stderr, `unknown mode "nope"; this session's modes are build, plan`) {
		t.Fatalf("--mode nope: exit %d\n%s", r.code, r.stderr)
	}
}
