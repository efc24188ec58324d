package session_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// echoModel answers "re: <last user text>" and reports tool output.
func echoModel(r *wiremock.Request) wiremock.Script {
	last := lastUserText(r)
	if strings.HasPrefix(last, "TOOL:") {
		return wiremock.Script{Text: []string{"done: ", strings.TrimSpace(strings.TrimPrefix(last, "TOOL:"))}}
	}
	return wiremock.Script{Text: []string{"re: " + last}}
}

func convo(ms []*llm.Message) string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Role)+":"+m.TextContent())
	}
	return strings.Join(out, " | ")
}

func wantCode(t *testing.T, err error, code fault.Code, text string) {
	t.Helper()
	if fault.CodeOf(err) != code || !strings.Contains(err.Error(), text) {
		t.Fatalf("error %v (%s), want %s containing %q", err, fault.CodeOf(err), code, text)
	}
}

// TestAppendAndStep: a message added without a run, answered by a step;
// what a step refuses, and why.
func TestAppendAndStep(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Handle(echoModel)
	wantCode(t, h.s.Step(session.StepOptions{}), fault.Invalid, "Nothing to respond to")
	wantCode(t, h.s.Append(&llm.Message{Role: llm.RoleToolResult, ToolCallID: "x"}), fault.Invalid, "toolResult message cannot be added")
	wantCode(t, h.s.Append(nil), fault.Invalid, "no message")
	wantCode(t, h.s.Step(session.StepOptions{AutoConfirmNext: -1}), fault.Invalid, "0 or more")

	if err := h.s.Append(session.UserMessage("hello", nil)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(h.types(), " "); got != "message_start message_end" {
		t.Fatalf("append emitted %s", got)
	}
	if h.s.Running() || convo(h.s.Messages()) != "user:hello" {
		t.Fatalf("after append: running %v, %s", h.s.Running(), convo(h.s.Messages()))
	}
	if err := h.s.Step(session.StepOptions{}); err != nil {
		t.Fatal(err)
	}
	h.wait()
	if got := convo(h.s.Messages()); got != "user:hello | assistant:re: hello" {
		t.Fatalf("conversation %s", got)
	}
	wantCode(t, h.s.Step(session.StepOptions{}), fault.Invalid, "Nothing to respond to")

	// While a run goes on, neither a step nor a message.
	h.srv.Handle(func(*wiremock.Request) wiremock.Script {
		return wiremock.Script{Text: []string{"slow ", "answer"}, Delay: 10 * time.Second}
	})
	h.reset()
	h.prompt("slow")
	if err := h.s.Step(session.StepOptions{}); err != session.ErrRunning || fault.CodeOf(err) != fault.Busy {
		t.Fatalf("step while running: %v", err)
	}
	if err := h.s.Append(session.UserMessage("x", nil)); err != session.ErrAppendWhileRunning || fault.CodeOf(err) != fault.Busy {
		t.Fatalf("append while running: %v", err)
	}
	h.waitEvent(func(ev session.Event) bool {
		return ev.Type == "message_update" && ev.Agent.Update.Type == llm.EventTextDelta
	})
	h.s.Abort()
	// A step after an interrupted answer asks again.
	h.srv.Handle(echoModel)
	if err := h.s.Step(session.StepOptions{}); err != nil {
		t.Fatal(err)
	}
	h.wait()
	if got := convo(h.s.Messages()); got != "user:hello | assistant:re: hello | user:slow | assistant:slow  | assistant:re: slow" {
		t.Fatalf("conversation %s", got)
	}
	// All of it is in the file.
	h2 := reopenCopy(t, h)
	if got, want := convo(h2.s.Messages()), convo(h.s.Messages()); got != want {
		t.Fatalf("reloaded %s\nwant %s", got, want)
	}
}

// TestAppendedToolCallWaits: an assistant message with a tool call,
// added by a client, waits for approval as after a restart; a step that
// auto-confirms runs it.
func TestAppendedToolCallWaits(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Handle(echoModel)
	_ = h.s.Append(session.UserMessage("list", nil))
	call := &llm.Message{Role: llm.RoleAssistant, StopReason: llm.StopToolUse,
		Content: []llm.Content{llm.ToolCall("call_1", "bash", json.RawMessage(`{"command":"echo listed"}`))}}
	if err := h.s.Append(call); err != nil {
		t.Fatal(err)
	}
	pendingApproval(t, h)
	if err := h.s.Step(session.StepOptions{AutoConfirm: true}); err != nil {
		t.Fatal(err)
	}
	h.wait()
	if text, _ := h.s.LastAssistantText(); text != "done: listed" {
		t.Fatalf("answer %q", text)
	}
}

// TestConfirmationModes: with confirm-all every call waits for a person,
// even one the policy allows, under the call's stable id; a step's
// auto-confirm and the grants release them; deny still denies. The mode
// and the grants survive a reload.
func TestConfirmationModes(t *testing.T) {
	deny := interaction.Policy{Rules: []interaction.Rule{{Tool: "bash", Match: "rm *", Action: interaction.ActionDeny, Reason: "no deleting"}}}
	h := newHarness(t, func(c *session.Config) { c.Policy = deny })
	var command string
	h.srv.Handle(func(r *wiremock.Request) wiremock.Script {
		if last := lastUserText(r); !strings.HasPrefix(last, "TOOL:") {
			args, _ := json.Marshal(map[string]string{"command": command})
			return wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "call_" + last, Name: "bash", Args: []string{string(args)}}}}
		}
		return echoModel(r)
	})
	step := func(name, cmd string, opts session.StepOptions) {
		t.Helper()
		command = cmd
		if err := h.s.Append(session.UserMessage(name, nil)); err != nil {
			t.Fatal(err)
		}
		if err := h.s.Step(opts); err != nil {
			t.Fatal(err)
		}
	}
	asked := func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		n := 0
		for _, ev := range h.evs {
			if ev.Type == session.EventInteractionRequested {
				n++
			}
		}
		return n
	}
	last := func() string {
		res := toolResults(h.s.Messages())
		return res[len(res)-1].TextContent()
	}

	// Off (the default): the policy allows bash, nobody is asked.
	step("1", "echo one", session.StepOptions{})
	h.wait()
	if asked() != 0 || last() != "one\n" {
		t.Fatalf("off: asked %d, result %q", asked(), last())
	}
	if err := h.s.SetConfirmAll(true); err != nil {
		t.Fatal(err)
	}
	ev := h.waitEvent(is(string(session.EventConfigChanged)))
	if c := ev.Config; c.Changed != "confirm" || !c.ConfirmAll {
		t.Fatalf("config_changed %+v", c)
	}
	// On: the allowed call waits, under tool-<call id>.
	step("2", "echo two", session.StepOptions{})
	req := h.waitEvent(is(string(session.EventInteractionRequested))).Interaction.Request
	if req.ID != "tool-call_2" {
		t.Fatalf("approval id %q", req.ID)
	}
	if err := h.s.Answer(req.ID, interaction.Response{Verdict: interaction.VerdictApprove}); err != nil {
		t.Fatal(err)
	}
	h.wait()
	if last() != "two\n" {
		t.Fatalf("result %q", last())
	}
	// A step that auto-confirms asks nobody; deny still denies.
	step("3", "echo three", session.StepOptions{AutoConfirm: true})
	h.wait()
	step("4", "rm -rf x", session.StepOptions{AutoConfirm: true})
	h.wait()
	if asked() != 1 || last() != "Tool call denied by policy: no deleting" {
		t.Fatalf("auto-confirm: asked %d, result %q", asked(), last())
	}
	// Confirm the next 2, across steps: the third call asks again.
	step("5", "echo five", session.StepOptions{AutoConfirmNext: 2})
	h.wait()
	if g := h.s.Grants(); g.Next != 1 {
		t.Fatalf("grants after one of two: %+v", g)
	}
	step("6", "echo six", session.StepOptions{})
	h.wait()
	step("7", "echo seven", session.StepOptions{})
	h.waitEvent(func(ev session.Event) bool {
		return ev.Type == session.EventInteractionRequested && ev.Interaction.Request.ID == "tool-call_7"
	})
	if asked() != 2 || h.s.Grants().Next != 0 {
		t.Fatalf("after the count: asked %d, grants %+v", asked(), h.s.Grants())
	}
	if err := h.s.Answer("tool-call_7", interaction.Response{Verdict: interaction.VerdictAlways}); err != nil {
		t.Fatal(err)
	}
	h.wait()
	step("8", "echo eight", session.StepOptions{})
	h.wait()
	if asked() != 2 || last() != "eight\n" {
		t.Fatalf("always: asked %d, result %q", asked(), last())
	}

	// All of it is in the file: mode and grants come back; the context
	// is the conversation only.
	h2 := reopenCopy(t, h)
	if !h2.s.ConfirmAll() || strings.Join(h2.s.Grants().Tools, ",") != "bash" {
		t.Fatalf("reloaded: confirm %v, grants %+v", h2.s.ConfirmAll(), h2.s.Grants())
	}
	if got, want := convo(h2.s.Messages()), convo(h.s.Messages()); got != want {
		t.Fatalf("reloaded context %s\nwant %s", got, want)
	}
	f, err := transcript.Open(h2.s.File())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	custom := map[string]int{}
	for _, e := range f.Entries() {
		if e.Type == transcript.TypeCustom {
			custom[e.CustomType]++
		}
	}
	// confirm once; grants: 2 (step 5), 1 (spent), 0 (spent), always.
	if custom[session.CustomConfirm] != 1 || custom[session.CustomGrants] != 4 {
		t.Fatalf("custom entries %v", custom)
	}
	// Setting the mode in force records nothing.
	if err := h2.s.SetConfirmAll(true); err != nil {
		t.Fatal(err)
	}
	if f.Len() != len(must(transcript.Open(h2.s.File())).Entries()) {
		t.Fatal("setting the same mode was recorded")
	}
}

// reset forgets the events seen so far.
func (h *harness) reset() {
	h.mu.Lock()
	h.evs = nil
	h.mu.Unlock()
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestSetTools: the model is offered the enabled tools only; an unknown
// name is refused; the choice survives a reload; nil enables all again.
func TestSetTools(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Handle(echoModel)
	all := h.s.AvailableTools()
	if strings.Join(all, ",") != "read,bash,edit,write,grep,find,ls,ask_user,todo" || strings.Join(h.s.ToolNames(), ",") != strings.Join(all, ",") {
		t.Fatalf("tools %v / %v", all, h.s.ToolNames())
	}
	wantCode(t, h.s.SetTools([]string{"read", "shell"}), fault.Invalid, `unknown tool "shell"; this session's tools are read, bash`)
	if err := h.s.SetTools([]string{"bash", "read", "bash"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(h.s.ToolNames(), ","); got != "read,bash" {
		t.Fatalf("enabled %s", got)
	}
	if ev := h.waitEvent(is(string(session.EventConfigChanged))); ev.Config.Changed != "tools" || strings.Join(ev.Config.Tools, ",") != "read,bash" {
		t.Fatalf("config_changed %+v", ev.Config)
	}
	offered := func() string {
		req := h.srv.LastRequest(t)
		var names []string
		tools, _ := req.JSON["tools"].([]any)
		for _, tl := range tools {
			fn, _ := tl.(map[string]any)["function"].(map[string]any)
			names = append(names, fn["name"].(string))
		}
		return strings.Join(names, ",")
	}
	h.prompt("hi")
	h.wait()
	if got := offered(); got != "read,bash" {
		t.Fatalf("offered %s", got)
	}
	h2 := reopenCopy(t, h)
	if got := strings.Join(h2.s.ToolNames(), ","); got != "read,bash" {
		t.Fatalf("reloaded %s", got)
	}
	if err := h.s.SetTools(nil); err != nil {
		t.Fatal(err)
	}
	h.prompt("again")
	h.wait()
	if got := offered(); got != strings.Join(all, ",") {
		t.Fatalf("offered after nil %s", got)
	}
	if err := h.s.SetTools([]string{}); err != nil {
		t.Fatal(err)
	}
	h3 := reopenCopy(t, h)
	if got := h3.s.ToolNames(); len(got) != 0 {
		t.Fatalf("none enabled, reloaded %v", got)
	}
}

// TestEditBranchesTheTree: an edit puts the new message on a new branch
// from the original's parent and the old branch stays in the file; a
// truncation moves before a message and is recorded, so a reload starts
// there, with the model and thinking level in force.
func TestEditBranchesTheTree(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Handle(echoModel)
	reasoner := mockModel(h.srv)
	reasoner.ID, reasoner.Reasoning = "mock-reasoner", true
	if err := h.s.SetModel(reasoner); err != nil {
		t.Fatal(err)
	}
	if _, err := h.s.SetThinking(llm.ThinkingHigh); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "b"} {
		h.prompt(p)
		h.wait()
	}
	if _, err := h.s.Bash(context.Background(), "echo shell", false); err != nil {
		t.Fatal(err)
	}
	wantCode(t, h.s.EditMessage(4, []llm.Content{llm.Text("x")}), fault.Invalid, "message 4 is a bashExecution message and cannot be edited")
	wantCode(t, h.s.EditMessage(5, []llm.Content{llm.Text("x")}), fault.Invalid, "message index 5 is out of range: the conversation has 5 messages (0 to 4)")
	wantCode(t, h.s.TruncateAt(-1), fault.Invalid, "out of range")
	wantCode(t, h.s.EditMessage(0, nil), fault.Invalid, "needs content")

	if err := h.s.EditMessage(2, []llm.Content{llm.Text("b2")}); err != nil {
		t.Fatal(err)
	}
	if ev := h.waitEvent(is(string(session.EventConversationEdited))); ev.Index != 2 || ev.Truncated {
		t.Fatalf("conversation_edited %+v", ev)
	}
	if got := convo(h.s.Messages()); got != "user:a | assistant:re: a | user:b2" {
		t.Fatalf("after the edit %s", got)
	}
	if err := h.s.Step(session.StepOptions{}); err != nil {
		t.Fatal(err)
	}
	h.wait()
	if got := convo(h.s.Messages()); got != "user:a | assistant:re: a | user:b2 | assistant:re: b2" {
		t.Fatalf("after the step %s", got)
	}
	// The old branch is still there: b, its answer and the command.
	var old []string
	for _, n := range h.s.Tree().Nodes {
		if n.Text == "b" || n.Text == "re: b" || n.Role == llm.RoleBashExecution {
			old = append(old, n.Text)
		}
	}
	if len(old) != 3 {
		t.Fatalf("the old branch: %v", old)
	}
	h2 := reopenCopy(t, h)
	if got, want := convo(h2.s.Messages()), convo(h.s.Messages()); got != want {
		t.Fatalf("reloaded %s\nwant %s", got, want)
	}

	if err := h.s.TruncateAt(2); err != nil {
		t.Fatal(err)
	}
	if got := convo(h.s.Messages()); got != "user:a | assistant:re: a" {
		t.Fatalf("after truncating %s", got)
	}
	h3 := reopenCopy(t, h)
	if got := convo(h3.s.Messages()); got != "user:a | assistant:re: a" {
		t.Fatalf("reloaded after truncating %s", got)
	}
	// Truncating everything keeps the model and thinking level for the
	// next load.
	if err := h.s.TruncateAt(0); err != nil {
		t.Fatal(err)
	}
	h4 := reopenCopy(t, h)
	if n := len(h4.s.Messages()); n != 0 || h4.s.Thinking() != llm.ThinkingHigh {
		t.Fatalf("reloaded after truncating all: %d messages, thinking %s", n, h4.s.Thinking())
	}
	f := must(transcript.Open(h.s.File()))
	defer f.Close()
	if c := f.Context(f.Leaf()); c.ModelID != "mock-reasoner" || len(c.Messages) != 0 {
		t.Fatalf("file context after truncating all: %s, %d messages", c.ModelID, len(c.Messages))
	}
	// While a run goes on, no edit.
	h.srv.Handle(func(*wiremock.Request) wiremock.Script {
		return wiremock.Script{Text: []string{"slow ", "answer"}, Delay: 10 * time.Second}
	})
	h.prompt("slow")
	wantCode(t, h.s.EditMessage(0, []llm.Content{llm.Text("x")}), fault.Busy, "processing")
	wantCode(t, h.s.TruncateAt(0), fault.Busy, "processing")
	h.s.Abort()
}

// TestEditLeavesPendingCallsBehind: an edit before a call a restart left
// waiting ends its approval, and the call stays unanswered on the old
// branch; the new branch goes on without it.
func TestEditLeavesPendingCallsBehind(t *testing.T) {
	h, srv := restartedWithPending(t, "echo ran > out.txt", nil)
	srv.Handle(echoModel)
	if err := h.s.EditMessage(0, []llm.Content{llm.Text("something else")}); err != nil {
		t.Fatal(err)
	}
	if p := h.s.Interactions(); len(p) != 0 || h.s.State() != session.StateIdle {
		t.Fatalf("after the edit: pending %v, state %s", p, h.s.State())
	}
	ev := h.waitEvent(is(string(session.EventInteractionResolved)))
	if r := ev.Interaction.Resolution; r.By != interaction.ResolvedCancelled || r.Reason != "the conversation moved on" {
		t.Fatalf("resolution %+v", r)
	}
	if err := h.s.Step(session.StepOptions{}); err != nil {
		t.Fatal(err)
	}
	h.wait()
	if got := convo(h.s.Messages()); got != "user:something else | assistant:re: something else" {
		t.Fatalf("conversation %s", got)
	}
	if len(toolResults(h.s.Messages())) != 0 {
		t.Fatal("a result was recorded for the call left behind")
	}
	// Back on the old branch the call waits again.
	var call string
	for _, n := range h.s.Tree().Nodes {
		if n.Role == llm.RoleAssistant && n.Text == "[assistant]" {
			call = n.EntryID
		}
	}
	if _, err := h.s.NavigateTree(context.Background(), call, session.NavigateOptions{}); err != nil {
		t.Fatal(err)
	}
	pendingApproval(t, h)
}
