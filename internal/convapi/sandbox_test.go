package convapi

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/sandbox"
)

func sandboxOf(r reply) string {
	chat, _ := r.m["chat"].(map[string]any)
	s, _ := chat["sandbox"].(string)
	return s
}

// config.chat.sandbox on PUT: the layer's rule and words for what may be
// chosen, the mode echoed by the config answers and kept by a fork, and
// PATCH may repeat it but not change it.
func TestConversationSandboxChoice(t *testing.T) {
	fx := newFixture(t, fixtureOptions{sandbox: sandbox.WorkspaceWrite})
	const allowed = "sandbox must be read-only or workspace-write"
	refused := []struct {
		name  string
		value any
		want  string
	}{
		{"looser", "full-access", "Sandbox mode full-access is not allowed: this server runs tools in workspace-write, and a session may only choose that or a stricter mode; " + allowed},
		{"unknown", "sandboxed", `Unknown sandbox mode "sandboxed": ` + allowed},
		{"bool", true, `Unknown sandbox mode "true": ` + allowed},
		{"html", "<script>", `Unknown sandbox mode "<script>": ` + allowed},
		{"newline", "read-only\n", `Unknown sandbox mode "read-only\n": ` + allowed},
		{"long", strings.Repeat("é", 100), `Unknown sandbox mode "` + strings.Repeat("é", 32) + `…": ` + allowed},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			id := "refused-" + tc.name
			r := fx.do("PUT", "/api/v2/conversations/"+id, map[string]any{"config": map[string]any{"chat": map[string]any{"sandbox": tc.value}}})
			wantErr(t, r, http.StatusBadRequest, tc.want)
			if r := fx.do("GET", "/api/v2/conversations/"+id, nil); r.status != http.StatusNotFound {
				t.Errorf("a refused PUT left the conversation: %s", r)
			}
		})
	}

	modes := []struct{ id, ask, want string }{
		{"none", "", "workspace-write"},
		{"null", "null", "workspace-write"},
		{"same", "workspace-write", "workspace-write"},
		{"ro", "read-only", "read-only"},
	}
	for _, m := range modes {
		chat := map[string]any{}
		switch m.ask {
		case "":
		case "null":
			chat["sandbox"] = nil
		default:
			chat["sandbox"] = m.ask
		}
		fx.create(m.id, map[string]any{"config": map[string]any{"chat": chat}})
		if got := sandboxOf(fx.ok("GET", "/api/v2/conversations/"+m.id+"/config", nil)); got != m.want {
			t.Errorf("%s: config.chat.sandbox = %q, want %q", m.id, got, m.want)
		}
	}

	r := fx.ok("PATCH", "/api/v2/conversations/ro/config", map[string]any{"chat": map[string]any{"sandbox": "read-only", "name": "still ro"}})
	if cfg, _ := r.m["config"].(map[string]any); cfg == nil || sandboxOf(reply{m: cfg}) != "read-only" {
		t.Errorf("PATCH answered %s", r)
	}
	wantErr(t, fx.do("PATCH", "/api/v2/conversations/ro/config", map[string]any{"chat": map[string]any{"sandbox": "workspace-write"}}),
		http.StatusBadRequest, "sandbox cannot change: this conversation's tools run in read-only; create a conversation to choose another mode")
	wantErr(t, fx.do("PATCH", "/api/v2/conversations/ro/config", map[string]any{"chat": map[string]any{"sandbox": "full-access"}}),
		http.StatusBadRequest, "Sandbox mode full-access is not allowed: this server runs tools in workspace-write, and a session may only choose that or a stricter mode; "+allowed)
	if got := sandboxOf(fx.ok("GET", "/api/v2/conversations/ro/config", nil)); got != "read-only" {
		t.Errorf("after refused PATCHes: sandbox %q", got)
	}
}

// A read-only conversation's write is refused by the sandbox, as the
// tool's result; the file never appears, in the conversation, its fork,
// or the conversation after a restart.
func TestConversationReadOnlyRefusesWrites(t *testing.T) {
	root := t.TempDir()
	fx := newFixture(t, fixtureOptions{sandbox: sandbox.WorkspaceWrite, root: root})
	fx.create("ro", map[string]any{"config": map[string]any{"chat": map[string]any{"sandbox": "read-only"}}})

	write := func(fx *fixture, id, name string) {
		t.Helper()
		st := fx.open("/api/v2/conversations/" + id + "/events")
		sid := st.next("connected").str("session_id")
		fx.ok("POST", "/api/v2/conversations/"+id, map[string]any{"role": "user", "content": "write " + name})
		fx.faux.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "w-" + name, Name: "write", Args: `{"path":"` + name + `","content":"x"}`}}},
			faux.Response{Text: "Done."})
		fx.ok("POST", "/api/v2/conversations/"+id+"/step", map[string]any{"session_id": sid, "auto_confirm": true})
		res := st.next("message_added")
		for res.m["message"].(map[string]any)["call_id"] != "w-"+name {
			res = st.next("message_added")
		}
		want := "Cannot write " + name + ": the sandbox (read-only: no writes anywhere; no network) does not allow it."
		if c, _ := res.m["message"].(map[string]any)["content"].(string); !strings.Contains(c, want) {
			t.Errorf("%s: the write's result is %s, want one containing %q", id, res.raw, want)
		}
		st.next("generation_complete")
		// The run ends after its last message: a fork waits for that.
		st.next("run_ended")
		if _, err := os.Stat(filepath.Join(fx.cwd, name)); !os.IsNotExist(err) {
			t.Errorf("%s: a read-only conversation wrote %s (stat: %v)", id, name, err)
		}
	}
	write(fx, "ro", "a.txt")
	fork := fx.ok("POST", "/api/v2/conversations/ro/fork?after_message=0", nil)
	forkID := fork.str("conversation_id")
	if got := sandboxOf(fx.ok("GET", "/api/v2/conversations/"+forkID+"/config", nil)); got != "read-only" {
		t.Fatalf("the fork runs in %q", got)
	}
	write(fx, forkID, "b.txt")

	fx.stop()
	fx = newFixture(t, fixtureOptions{sandbox: sandbox.WorkspaceWrite, root: root})
	if got := sandboxOf(fx.ok("GET", "/api/v2/conversations/ro/config", nil)); got != "read-only" {
		t.Fatalf("after a restart: sandbox %q", got)
	}
	write(fx, "ro", "c.txt")
}
