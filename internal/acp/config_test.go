package acp

import (
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
)

// session/new answers the modes, models and config options; set_mode,
// set_model and set_config_option change them and announce it
// (current_mode_update, config_option_update); values the session was
// not offered are refused naming those it was; session/load answers the
// mode the session file recorded.
func TestSessionSettings(t *testing.T) {
	ts := &testSessions{p: faux.New(faux.Options{}), dir: t.TempDir()}
	other := *faux.Model()
	other.ID, other.Name = "echo-2", "Echo 2"
	c := startAgentWith(t, Options{Sessions: ts, SessionsDir: ts.dir, Version: "test", MaxLineBytes: 4096,
		Models: func() []*llm.Model { return []*llm.Model{faux.Model(), &other} }})
	cwd := t.TempDir()
	c.call("initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{}})
	r := result(t, c.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))
	sid := r["sessionId"].(string)
	modes, _ := r["modes"].(map[string]any)
	if modes["currentModeId"] != "build" || len(modes["availableModes"].([]any)) != 2 {
		t.Fatalf("modes %v", r["modes"])
	}
	models, _ := r["models"].(map[string]any)
	cur := faux.Model().Provider + "/" + faux.Model().ID
	if models["currentModelId"] != cur || len(models["availableModels"].([]any)) != 2 {
		t.Fatalf("models %v", r["models"])
	}
	opts, _ := r["configOptions"].([]any)
	if len(opts) < 2 || opts[0].(map[string]any)["id"] != "mode" || opts[1].(map[string]any)["currentValue"] != cur {
		t.Fatalf("configOptions %v", opts)
	}

	tests := []struct {
		name, method string
		params       map[string]any
		err          string
	}{
		{"unknown mode", "session/set_mode", map[string]any{"sessionId": sid, "modeId": "yolo"}, `unknown mode "yolo"; this session's are build, plan`},
		{"no mode", "session/set_mode", map[string]any{"sessionId": sid}, "modeId is required"},
		{"unknown model", "session/set_model", map[string]any{"sessionId": sid, "modelId": "x/y"}, `unknown model "x/y"`},
		{"unknown option", "session/set_config_option", map[string]any{"sessionId": sid, "configId": "color", "value": "red"}, `unknown configId "color"`},
		{"value not a string", "session/set_config_option", map[string]any{"sessionId": sid, "configId": "mode", "value": true}, "value must be a non-empty string"},
		{"unknown session", "session/set_mode", map[string]any{"sessionId": "nope", "modeId": "plan"}, "is not open"},
	}
	for _, tt := range tests {
		f := c.call(tt.method, tt.params)
		e, _ := f["error"].(map[string]any)
		if msg, _ := e["message"].(string); !strings.Contains(msg, tt.err) {
			t.Errorf("%s: %v, want an error with %q", tt.name, f, tt.err)
		}
	}

	result(t, c.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"}))
	var sawMode, sawOptions bool
	for _, u := range c.takeUpdates() {
		switch u["sessionUpdate"] {
		case "current_mode_update":
			sawMode = u["currentModeId"] == "plan"
		case "config_option_update":
			sawOptions = true
		}
	}
	if !sawMode || !sawOptions {
		t.Fatal("no current_mode_update / config_option_update after set_mode")
	}
	result(t, c.call("session/set_model", map[string]any{"sessionId": sid, "modelId": "faux/echo-2"}))
	res := result(t, c.call("session/set_config_option", map[string]any{"sessionId": sid, "configId": "mode", "value": "build"}))
	got := map[string]any{}
	for _, o := range res["configOptions"].([]any) {
		got[o.(map[string]any)["id"].(string)] = o.(map[string]any)["currentValue"]
	}
	if got["mode"] != "build" || got["model"] != "faux/echo-2" {
		t.Fatalf("configOptions after the changes: %v", got)
	}
	result(t, c.call("session/set_config_option", map[string]any{"sessionId": sid, "configId": "mode", "value": "plan"}))

	// Loaded again, the session is in the mode its file recorded.
	l := result(t, c.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
	if m, _ := l["modes"].(map[string]any); m["currentModeId"] != "plan" {
		t.Fatalf("session/load modes %v", l["modes"])
	}
	if _, ok := l["sessionId"]; ok {
		t.Fatalf("session/load answered a sessionId: %v", l)
	}
}
