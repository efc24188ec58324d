package picommand

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/piwire"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/settings"
)

type fixedModels []*llm.Model

func (f fixedModels) Available() []*llm.Model { return f }

func newEnv(t *testing.T) Env {
	t.Helper()
	p := faux.New(faux.Options{})
	s, err := session.New(session.Config{Cwd: t.TempDir(), Model: faux.Model(), Stream: p.Stream})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	st, err := settings.Open(filepath.Join(t.TempDir(), "settings.json"))
	if err != nil {
		t.Fatal(err)
	}
	return Env{Session: s, Models: fixedModels{faux.Model()}, Settings: st}
}

func str(s string) *string { return &s }

// Run refuses what a command cannot run with in pi's words, as an
// Invalid fault, and answers a command it does not have with ok false.
func TestRunChecksFieldsWithPisMessages(t *testing.T) {
	tests := []struct {
		typ  string
		f    piwire.Fields
		want string
	}{
		{"steer", piwire.Fields{}, `steer requires a "message" string`},
		{"follow_up", piwire.Fields{Message: str("x"), Images: []llm.Content{{Type: llm.ContentImage}}}, `images[0] must be {type: "image", data, mimeType}`},
		{"set_steering_mode", piwire.Fields{Mode: "most"}, `Invalid mode "most": use "all" or "one-at-a-time"`},
		{"set_auto_retry", piwire.Fields{}, `set_auto_retry requires an "enabled" boolean`},
		{"fork", piwire.Fields{}, `fork requires an "entryId"`},
		{"switch_session", piwire.Fields{}, `switch_session requires a "sessionPath"`},
		{"set_session_name", piwire.Fields{Name: str("  ")}, "Session name cannot be empty"},
		{"set_mode", piwire.Fields{}, `set_mode requires a "mode" string`},
		{"set_model", piwire.Fields{Provider: "mock", ModelID: "nope"}, "Model not found: mock/nope"},
	}
	e := newEnv(t)
	for _, tt := range tests {
		t.Run(tt.typ, func(t *testing.T) {
			_, ok, err := Run(context.Background(), e, tt.typ, &tt.f)
			if !ok {
				t.Fatalf("%s is not a shared command", tt.typ)
			}
			if fe := fault.As(err); fe == nil || fe.Code != fault.Invalid || fe.Message != tt.want {
				t.Fatalf("error %v, want Invalid %q", err, tt.want)
			}
		})
	}
	if _, ok, _ := Run(context.Background(), e, "prompt", &piwire.Fields{}); ok {
		t.Error("prompt ran through the layer: each face answers it its own way")
	}
}

// The answers a face sends as they are: get_messages' hand-written data
// and JSON null for cycle_model with one model; and pi's choices persist.
func TestRunAnswersAndPersists(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	data, _, err := Run(ctx, e, "get_messages", &piwire.Fields{})
	if raw, ok := data.(json.RawMessage); err != nil || !ok || string(raw) != `{"messages":[]}` {
		t.Errorf("get_messages = %T %s, %v", data, data, err)
	}
	if _, ok := Lookup("cycle_model"); ok {
		t.Error("cycle_model is in the table; its direction differs by face")
	}
	if d, err := CycleModel(e, false); err != nil || string(d.(json.RawMessage)) != "null" {
		t.Errorf("cycle_model with one model = %v, %v; want null", d, err)
	}
	if _, _, err := Run(ctx, e, "set_follow_up_mode", &piwire.Fields{Mode: "one-at-a-time"}); err != nil {
		t.Fatal(err)
	}
	on := false
	if _, _, err := Run(ctx, e, "set_auto_compaction", &piwire.Fields{Enabled: &on}); err != nil {
		t.Fatal(err)
	}
	st := e.Settings.Get()
	if st.FollowUpMode != "one-at-a-time" || st.Compaction == nil || st.Compaction.Enabled == nil || *st.Compaction.Enabled {
		t.Errorf("settings after set_follow_up_mode and set_auto_compaction = %+v", st)
	}
}
