package convapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentd-dev/agentd/internal/engine"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/llmtest"
	"github.com/agentd-dev/agentd/internal/llm/openaichat"
	"github.com/agentd-dev/agentd/internal/llm/registry"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
)

// A provider's 401 on the REST face names the key, as on every face:
// sessions stream through engine.Models, which gives the failure its
// hint, and the step's answer, the error event and the conversation's
// last_error carry it.
func TestREST401NamesTheKey(t *testing.T) {
	srv := llmtest.NewServer(t)
	srv.Handle(func(r *wiremock.Request) wiremock.Script {
		return wiremock.Script{Status: 401, ErrorMessage: "invalid api key"}
	})
	root := t.TempDir()
	models, err := json.Marshal(map[string]any{"providers": map[string]any{"mock": map[string]any{
		"baseUrl": srv.OpenAIURL(), "api": "openai-completions", "apiKey": "MOCK_API_KEY", "models": []any{map[string]any{"id": "m1"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "models.json"), models, 0o600); err != nil {
		t.Fatal(err)
	}
	reg, err := registry.Load(context.Background(), registry.Options{ConfigDir: root, Env: func(k string) string {
		if k == "MOCK_API_KEY" {
			return "wrong"
		}
		return ""
	}})
	if err != nil {
		t.Fatal(err)
	}
	e, ok := reg.Find("mock", "m1")
	if !ok {
		t.Fatal("mock/m1 is not in the registry")
	}
	ms := &engine.Models{Registry: reg, Providers: map[llm.API]llm.Provider{e.Model.API: openaichat.New(nil)}}
	layer, err := server.New(server.Config{
		Builder: server.BuilderFunc(func(spec sessionspec.Spec) (*session.Session, error) {
			return session.New(session.Config{Cwd: spec.Cwd, SessionsDir: spec.SessionsDir, Open: spec.Open,
				Model: e.Model, Stream: ms.Stream, FirstSeq: spec.FirstSeq, ReserveSeq: spec.ReserveSeq})
		}),
		Cwd: root, SessionsDir: filepath.Join(root, "sessions"), StateDir: filepath.Join(root, "state"),
	})
	if err != nil {
		t.Fatal(err)
	}
	face, err := New(layer, Options{Models: fixedModels{e.Model}, DefaultModel: e.Model, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := layer.Start(); err != nil {
		t.Fatal(err)
	}
	fx := &fixture{t: t, layer: layer, face: face, ts: httptest.NewServer(face.Handler(http.NewServeMux())), root: root}
	t.Cleanup(fx.stop)

	const want = "401 invalid api key (mock refused the API key: check MOCK_API_KEY)"
	sid := fx.create("c1", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}})
	st := fx.open("/api/v2/conversations/c1/events?session_id=" + sid)
	st.next("connected")
	// A step whose model fails at once answers with the failure.
	if r := fx.do("POST", "/api/v2/conversations/c1/step", map[string]any{"session_id": sid}); r.str("error") != want {
		t.Fatalf("step: %s, want the error %q", r, want)
	}
	done := st.next("generation_complete")
	if md, _ := done.m["message"].(map[string]any)["metadata"].(map[string]any); md["error"] != want {
		t.Fatalf("generation_complete %s, want the error %q", done.raw, want)
	}
	if ev := st.next("error"); ev.str("error") != want {
		t.Fatalf("error event %s, want %q", ev.raw, want)
	}
	r := fx.ok("GET", "/api/v2/conversations/c1", nil)
	s, _ := r.m["session"].(map[string]any)
	if s == nil || s["last_error"] != want {
		t.Fatalf("the conversation's last_error is not %q: %s", want, r)
	}
}
