package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// acpSettingsStep is what testdata/acp/settings.mjs printed for a step.
type acpSettingsStep struct {
	Step    string           `json:"step"`
	Result  map[string]any   `json:"result"`
	Updates []map[string]any `json:"updates"`
	Code    *int             `json:"code"`
	Message string           `json:"message"`
}

// acpSettings runs testdata/acp/settings.mjs (the official SDK) through
// steps against `agentd acp <args>` and returns its steps in order.
func (e *e2eEnv) acpSettings(steps []string, args ...string) []acpSettingsStep {
	t := e.t
	t.Helper()
	modules := acpNodeModules(t)
	script, err := filepath.Abs(filepath.Join("testdata", "acp", "settings.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	all := append(append([]string{script, modules}, steps...), "--", agentdBin, "acp")
	cmd := exec.Command("node", append(all, args...)...)
	cmd.Dir = e.cwd
	cmd.Env = []string{"HOME=" + e.home, "PATH=" + os.Getenv("PATH"), "AGENTD_DATA_DIR=" + e.data,
		"TMPDIR=" + e.tmp, "LANG=C.UTF-8"}
	dieWithTest(cmd)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the ACP client did not finish\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	if err != nil {
		t.Fatalf("ACP client: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	var out []acpSettingsStep
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var s acpSettingsStep
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("client output %q: %v", sc.Text(), err)
		}
		out = append(out, s)
	}
	return out
}

func acpSettingsFind(t *testing.T, steps []acpSettingsStep, name string, nth int) acpSettingsStep {
	t.Helper()
	for _, s := range steps {
		if s.Step == name {
			if nth == 0 {
				return s
			}
			nth--
		}
	}
	t.Fatalf("no step %q in %+v", name, steps)
	return acpSettingsStep{}
}

// hasUpdate reports whether one of s's updates is of kind and, when
// field is set, has it equal to value.
func (s acpSettingsStep) hasUpdate(kind, field string, value any) bool {
	for _, u := range s.Updates {
		if u["sessionUpdate"] == kind && (field == "" || u[field] == value) {
			return true
		}
	}
	return false
}

// checkACPPlanMode checks what both ACP tests have the client do: the
// modes of session/new, a mode that does not exist refused, plan mode
// announced, a bash command that writes refused by the read-only
// sandbox, a model and an option set.
func checkACPPlanMode(t *testing.T, e *e2eEnv, steps []acpSettingsStep, file string) {
	t.Helper()
	n := acpSettingsFind(t, steps, "new", 0)
	modes, _ := n.Result["modes"].(map[string]any)
	if modes["currentModeId"] != "build" || !strings.Contains(fmt.Sprint(modes["availableModes"]), "plan") {
		t.Fatalf("session/new modes: %v", n.Result)
	}
	models, _ := n.Result["models"].(map[string]any)
	if models["currentModelId"] != "mock/mock-model" {
		t.Fatalf("session/new models: %v", n.Result["models"])
	}
	if opts, _ := n.Result["configOptions"].([]any); len(opts) < 2 {
		t.Fatalf("session/new configOptions: %v", n.Result["configOptions"])
	}
	if bad := acpSettingsFind(t, steps, "mode:yolo", 0); bad.Code == nil || *bad.Code != -32602 || !strings.Contains(bad.Message, `unknown mode "yolo"`) {
		t.Fatalf("set_mode yolo: %+v", bad)
	}
	if m := acpSettingsFind(t, steps, "mode:plan", 0); m.Code != nil || !m.hasUpdate("current_mode_update", "currentModeId", "plan") {
		t.Fatalf("set_mode plan: %+v", m)
	}
	p := acpSettingsFind(t, steps, "prompt:CMD:echo hi > "+file, 0)
	if _, err := os.Stat(filepath.Join(e.cwd, file)); !os.IsNotExist(err) {
		t.Fatalf("plan mode's bash wrote %s: %v", file, err)
	}
	if p.Result["stopReason"] != "end_turn" || !strings.Contains(fmt.Sprint(p.Updates), "read-only") {
		t.Fatalf("the prompt in plan mode: %v %v", p.Result, p.Updates)
	}
	if m := acpSettingsFind(t, steps, "model:mock/mock-model", 0); m.Code != nil {
		t.Fatalf("set_model: %+v", m)
	}
	if m := acpSettingsFind(t, steps, "model:mock/none", 0); m.Code == nil || *m.Code != -32602 {
		t.Fatalf("set_model of an unknown model: %+v", m)
	}
	o := acpSettingsFind(t, steps, "option:mode=build", 0)
	if o.Code != nil || !strings.Contains(fmt.Sprint(o.Result["configOptions"]), "currentValue:build") {
		t.Fatalf("set_config_option mode=build: %+v", o)
	}
}

// agentd acp with the official SDK: session/new answers the modes,
// set_mode plan makes a writing bash fail in the read-only sandbox, the
// model and options can be set, and the session loaded after a restart
// is in the mode it was left in.
func TestACPModesWithTheOfficialClient(t *testing.T) {
	acpNodeModules(t)
	needLandlock(t)
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	steps := e.acpSettings([]string{"init", "new", "mode:yolo", "mode:plan", "prompt:CMD:echo hi > acp.txt",
		"model:mock/mock-model", "model:mock/none", "option:mode=build", "option:mode=plan",
		"restart", "init", "load"}, "--model", "mock/mock-model")
	checkACPPlanMode(t, e, steps, "acp.txt")
	l := acpSettingsFind(t, steps, "load", 0)
	if m, _ := l.Result["modes"].(map[string]any); m["currentModeId"] != "plan" {
		t.Fatalf("session/load after a restart: %v", l.Result)
	}
}

// agentd acp --connect: the same, on a session of agentd serve; a
// pi-server client sees the mode the editor chose.
func TestACPConnectModesWithTheOfficialClient(t *testing.T) {
	acpNodeModules(t)
	needLandlock(t)
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStart(t, e)
	steps := e.acpSettings([]string{"init", "new", "mode:yolo", "mode:plan", "prompt:CMD:echo hi > bridge.txt",
		"model:mock/mock-model", "model:mock/none", "option:mode=build", "option:mode=plan"}, "--connect", "ws://"+s.addr+"/")
	checkACPPlanMode(t, e, steps, "bridge.txt")
	sid, _ := acpSettingsFind(t, steps, "new", 0).Result["sessionId"].(string)
	c := s.dial("w")
	if got := svStr(c.must("get_state", svM{"sessionId": sid}).m, "data", "mode"); got != "plan" {
		t.Fatalf("pi-server get_state of the editor's session: mode %q", got)
	}
}

// awaitUpdate reads agentd acp's frames until a session/update of kind
// arrives and returns it.
func (p *acpProc) awaitUpdate(kind string) map[string]any {
	p.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		for _, u := range p.takeUpdates() {
			if u["sessionUpdate"] == kind {
				return u
			}
		}
		select {
		case f, ok := <-p.frames:
			if !ok {
				p.t.Fatalf("agentd acp ended before a %s\nstderr:\n%s", kind, p.stderr.String())
			}
			if m, isReq := f["method"].(string); isReq {
				p.handle(m, f)
				continue
			}
			got, _ := f["id"].(float64)
			p.early[int(got)] = f
		case <-timeout:
			p.t.Fatalf("no %s\nstderr:\n%s", kind, p.stderr.String())
		}
	}
}

// A mode switched by another client of agentd serve (pi-server's
// set_mode) reaches the editor on the bridge as current_mode_update.
func TestACPConnectHearsAnotherClientsModeSwitch(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStart(t, e)
	ed := startACPProc(t, e, "--connect", "ws://"+s.addr+"/")
	ed.call("initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{}})
	sid, _ := ed.call("session/new", map[string]any{"cwd": e.cwd, "mcpServers": []any{}})["sessionId"].(string)
	c := s.dial("browser")
	c.must("set_mode", svM{"sessionId": sid, "mode": "plan"})
	if u := ed.awaitUpdate("current_mode_update"); u["currentModeId"] != "plan" {
		t.Fatalf("current_mode_update %v", u)
	}
}
