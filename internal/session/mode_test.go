package session_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/modes"
	"github.com/agentd-dev/agentd/internal/session"
)

// requestTools names the tools a request offered the model.
func requestTools(r *wiremock.Request) []string {
	var out []string
	ts, _ := r.JSON["tools"].([]any)
	for _, t := range ts {
		m, _ := t.(map[string]any)
		f, _ := m["function"].(map[string]any)
		if n, ok := f["name"].(string); ok {
			out = append(out, n)
		}
	}
	return out
}

func systemText(r *wiremock.Request) string {
	msgs, _ := r.JSON["messages"].([]any)
	for _, m := range msgs {
		mm, _ := m.(map[string]any)
		if mm["role"] == "system" || mm["role"] == "developer" {
			s, _ := mm["content"].(string)
			return s
		}
	}
	return ""
}

// In plan mode the model is offered no write, edit or (with no
// confined bash here) bash; a write it sends anyway is refused at the
// gate and the file is not created; the mode is in the system prompt,
// survives reopening the file, and build gives everything back.
func TestPlanModeRefusesWrites(t *testing.T) {
	custom := modes.Mode{Name: "review", Description: "look only", Tools: []string{"read", "grep"}, Ask: []string{"grep"}, Prompt: "REVIEW-PROMPT"}
	set, err := modes.New(custom)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(c *session.Config) { c.Modes = set })
	var reqs []*wiremock.Request
	h.srv.Handle(func(r *wiremock.Request) wiremock.Script {
		reqs = append(reqs, r)
		last := lastUserText(r)
		switch {
		case strings.HasPrefix(last, "TOOL:"):
			return wiremock.Script{Text: []string{"ok"}}
		case last == "write it":
			return wiremock.Script{ToolCalls: []wiremock.ToolCall{
				{ID: "w1", Name: "write", Args: []string{`{"path":"x.txt","content":"hi"}`}},
				{ID: "b1", Name: "bash", Args: []string{`{"command":"echo hi > y.txt"}`}},
			}}
		}
		return wiremock.Script{Text: []string{"ok"}}
	})
	if got := h.s.Mode().Name; got != modes.Build {
		t.Fatalf("a new session's mode is %q", got)
	}
	if err := h.s.SetMode("nope"); fault.CodeOf(err) != fault.Invalid || !strings.Contains(err.Error(), "build, plan, review") {
		t.Fatalf("unknown mode: %v", err)
	}
	if err := h.s.SetMode(modes.Plan); err != nil {
		t.Fatal(err)
	}
	ev := h.waitEvent(func(ev session.Event) bool {
		return ev.Type == session.EventConfigChanged && ev.Config.Changed == "mode"
	})
	if ev.Config.Mode != modes.Plan {
		t.Fatalf("config_changed says mode %q", ev.Config.Mode)
	}
	h.prompt("write it")
	h.wait()
	for _, f := range []string{"x.txt", "y.txt"} {
		if _, err := os.Stat(filepath.Join(h.cwd, f)); !os.IsNotExist(err) {
			t.Fatalf("%s was written in plan mode: %v", f, err)
		}
	}
	if len(reqs) == 0 {
		t.Fatal("no request")
	}
	offered := requestTools(reqs[0])
	for _, n := range []string{"write", "edit", "bash"} {
		if slices.Contains(offered, n) {
			t.Fatalf("plan mode offered %s: %v", n, offered)
		}
	}
	if !slices.Contains(offered, "read") || !strings.Contains(systemText(reqs[0]), "Mode: plan") {
		t.Fatalf("tools %v, system prompt:\n%s", offered, systemText(reqs[0]))
	}
	// Not offered, the tools are not found when called.
	var refusals int
	for _, m := range h.s.Messages() {
		if m.Role == "toolResult" && m.IsError && strings.Contains(m.TextContent(), "not found") {
			refusals++
		}
	}
	if refusals != 2 {
		t.Fatalf("want the write and the bash refused, got %d refusals", refusals)
	}

	// Reopened, the session is still in plan mode.
	path := h.s.File()
	_ = h.s.Close()
	h2 := reopen(t, h.cfg, path)
	if got := h2.s.Mode().Name; got != modes.Plan {
		t.Fatalf("reopened in mode %q", got)
	}
	if err := h2.s.SetMode("review"); err != nil {
		t.Fatal(err)
	}
	if !h2.s.Mode().Asks("grep") || h2.s.Mode().Allows("bash") {
		t.Fatalf("review mode: %+v", h2.s.Mode())
	}
	if err := h2.s.SetMode(modes.Build); err != nil {
		t.Fatal(err)
	}
	raw, ok := h2.s.Custom(session.CustomMode)
	var d struct{ Mode string }
	if !ok || json.Unmarshal(raw, &d) != nil || d.Mode != modes.Build {
		t.Fatalf("recorded mode %s", raw)
	}
}

// A write that waits for approval when the session switches to plan
// mode is refused when the person approves it: the mode binds the call
// when it would run, not when it was asked for.
func TestPlanModeBindsACallWaitingForApproval(t *testing.T) {
	h := newHarness(t, func(c *session.Config) {
		c.Policy = interaction.Policy{Rules: []interaction.Rule{{Tool: "write", Action: interaction.ActionAsk}}}
	})
	h.srv.Handle(func(r *wiremock.Request) wiremock.Script {
		if strings.HasPrefix(lastUserText(r), "TOOL:") {
			return wiremock.Script{Text: []string{"ok"}}
		}
		return wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "w1", Name: "write", Args: []string{`{"path":"x.txt","content":"hi"}`}}}}
	})
	h.prompt("write it")
	ev := h.waitEvent(is(string(session.EventInteractionRequested)))
	if err := h.s.SetMode(modes.Plan); err != nil {
		t.Fatal(err)
	}
	if err := h.s.Answer(ev.Interaction.Request.ID, interaction.Response{Verdict: interaction.VerdictApprove}); err != nil {
		t.Fatal(err)
	}
	h.wait()
	if _, err := os.Stat(filepath.Join(h.cwd, "x.txt")); !os.IsNotExist(err) {
		t.Fatalf("x.txt was written after the switch to plan mode: %v", err)
	}
	msgs := h.s.Messages()
	if r := msgs[2]; r.Role != "toolResult" || !strings.Contains(r.TextContent(), "not available in plan mode") {
		t.Fatalf("result %s %q", r.Role, r.TextContent())
	}
}
