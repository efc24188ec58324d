package subagent_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/engine"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// Aborting the parent's run stops the child's: its stream is closed, its
// run ends cancelled, and the task's result says so.
func TestAbortStopsTheChild(t *testing.T) {
	f := newFixture(t, nil)
	asked := make(chan struct{})
	var once sync.Once
	f.srv.Handle(func(r *wiremock.Request) wiremock.Script {
		if isChild(r) {
			once.Do(func() { close(asked) })
			return wiremock.Script{Text: []string{"thinking ", "about ", "it"}, HangAfter: 3}
		}
		return wiremock.Script{ToolCalls: []wiremock.ToolCall{taskCall("t1", "explore", "CHILDJOB forever")}}
	})
	s, rec := f.session(sessionspec.Spec{})
	if err := s.Prompt(session.UserMessage("go", nil), session.BehaviorNone); err != nil {
		t.Fatal(err)
	}
	select {
	case <-asked:
	case <-time.After(30 * time.Second):
		t.Fatal("the child never asked its model")
	}
	s.Abort()
	ends := rec.toolEnds("task")
	if len(ends) != 1 || !ends[0].IsError || !strings.Contains(resultText(ends[0]), "stopped before it finished") {
		t.Fatalf("task results %v", ends)
	}
	d := details(t, ends[0])
	if d.Status != "cancelled" {
		t.Errorf("status %q, want cancelled", d.Status)
	}
	child, err := transcript.Open(d.SessionFile)
	if err != nil {
		t.Fatal(err)
	}
	var last *llm.Message
	for _, e := range child.Entries() {
		if e.Type == transcript.TypeMessage && e.Message.Role == llm.RoleAssistant {
			last = e.Message
		}
	}
	if last == nil || last.StopReason != llm.StopAborted {
		t.Fatalf("the child's last answer %+v, want it aborted", last)
	}
}

// A child's tool approval is put to the parent's clients under a
// "sub-" id; the answer given there lets the child's call run.
func TestChildApprovalsReachTheParent(t *testing.T) {
	policy, err := interaction.ParsePolicy([]byte(`{"rules":[{"tool":"bash","action":"ask"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(o *engine.Options) { o.Policy = policy })
	f.srv.Handle(func(r *wiremock.Request) wiremock.Script {
		switch {
		case isChild(r) && lastRole(r) == "tool":
			return wiremock.Script{Text: []string{"wrote it"}}
		case isChild(r):
			return wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "b1", Name: "bash", Args: []string{`{"command":"echo relayed > out.txt"}`}}}}
		case lastRole(r) == "tool":
			return wiremock.Script{Text: []string{"parent done"}}
		}
		return wiremock.Script{ToolCalls: []wiremock.ToolCall{taskCall("t1", "general", "CHILDJOB write out.txt")}}
	})
	s, rec := f.session(sessionspec.Spec{})
	if err := s.Prompt(session.UserMessage("go", nil), session.BehaviorNone); err != nil {
		t.Fatal(err)
	}
	ev := rec.waitFor(t, "relayed approval", func(ev session.Event) bool {
		return ev.Type == session.EventInteractionRequested && strings.HasPrefix(ev.Interaction.Request.ID, "sub-")
	})
	req := ev.Interaction.Request
	if req.ID != "sub-tool-b1" || req.Kind != interaction.KindApproval || req.Tool == nil || req.Tool.ToolName != "bash" || !strings.Contains(req.Title, "[subagent general]") {
		t.Fatalf("relayed request %+v", req)
	}
	if err := s.Answer(req.ID, interaction.Response{Verdict: interaction.VerdictApprove}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(f.cwd, "out.txt")); err != nil || strings.TrimSpace(string(b)) != "relayed" {
		t.Fatalf("out.txt %q, %v: the approved call did not run", b, err)
	}
	ends := rec.toolEnds("task")
	if len(ends) != 1 || ends[0].IsError || resultText(ends[0]) != "wrote it" {
		t.Fatalf("task result %v", ends)
	}
	if n := len(s.Interactions()); n != 0 {
		t.Errorf("%d interactions left pending", n)
	}
}

// Subagents nest at most MaxDepth deep: a child may start a grandchild,
// which gets no task tool; every level's tokens reach the top.
func TestDepthIsBounded(t *testing.T) {
	f := newFixture(t, func(o *engine.Options) { o.Subagents.MaxDepth = 2 })
	var mu sync.Mutex
	tools := map[string][]string{}
	f.srv.Handle(func(r *wiremock.Request) wiremock.Script {
		mu.Lock()
		defer mu.Unlock()
		level := "parent"
		if isChild(r) {
			level = "child"
			if strings.Contains(firstUser(r), "GRAND") {
				level = "grandchild"
			}
		}
		if _, seen := tools[level]; !seen {
			tools[level] = toolNames(r)
		}
		switch {
		case level == "grandchild":
			return wiremock.Script{Text: []string{"deep answer"}, Usage: &wiremock.Usage{Input: 1000, Output: 100}}
		case lastRole(r) == "tool":
			return wiremock.Script{Text: []string{level + " done"}, Usage: &wiremock.Usage{Input: 1, Output: 1}}
		case level == "child":
			return wiremock.Script{ToolCalls: []wiremock.ToolCall{taskCall("t2", "general", "CHILDJOB GRAND")}, Usage: &wiremock.Usage{Input: 10, Output: 10}}
		}
		return wiremock.Script{ToolCalls: []wiremock.ToolCall{taskCall("t1", "general", "CHILDJOB one")}, Usage: &wiremock.Usage{Input: 10, Output: 10}}
	})
	s, rec := f.session(sessionspec.Spec{})
	run(t, s, "go")
	mu.Lock()
	defer mu.Unlock()
	for level, want := range map[string]bool{"parent": true, "child": true, "grandchild": false} {
		if got := slices.Contains(tools[level], "task"); got != want {
			t.Errorf("%s has the task tool: %v, want %v (tools %v)", level, got, want, tools[level])
		}
	}
	if ends := rec.toolEnds("task"); len(ends) != 1 || resultText(ends[0]) != "child done" {
		t.Fatalf("task results %v", ends)
	}
	// parent 10+1, child 10+1, grandchild 1000.
	if st := s.Stats(); st.Tokens.Input != 1022 || st.Tokens.Output != 122 {
		t.Errorf("tokens %+v, want every level's", st.Tokens)
	}
}

func firstUser(r *wiremock.Request) string {
	msgs, _ := r.JSON["messages"].([]any)
	for _, m := range msgs {
		if m, _ := m.(map[string]any); m["role"] == "user" {
			s, _ := m["content"].(string)
			if s == "" {
				parts, _ := m["content"].([]any)
				for _, p := range parts {
					if p, _ := p.(map[string]any); p["text"] != nil {
						s += p["text"].(string)
					}
				}
			}
			return s
		}
	}
	return ""
}

// A session runs at most MaxConcurrent children at once: a task call
// beyond that is refused at once with a clear error while the others go on.
func TestConcurrencyIsBounded(t *testing.T) {
	f := newFixture(t, func(o *engine.Options) { o.Subagents.MaxConcurrent = 1 })
	release := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	f.srv.Handle(func(r *wiremock.Request) wiremock.Script {
		switch {
		case isChild(r):
			<-release
			return wiremock.Script{Text: []string{"one finished"}}
		case lastRole(r) == "tool":
			return wiremock.Script{Text: []string{"parent done"}}
		}
		return wiremock.Script{ToolCalls: []wiremock.ToolCall{taskCall("t1", "explore", "CHILDJOB a"), taskCall("t2", "explore", "CHILDJOB b")}}
	})
	s, rec := f.session(sessionspec.Spec{})
	if err := s.Prompt(session.UserMessage("go", nil), session.BehaviorNone); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, "a refused task", func(ev session.Event) bool {
		return ev.Agent != nil && ev.Agent.ToolName == "task" && ev.Agent.Result != nil && ev.Agent.IsError
	})
	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	var ok, refused int
	for _, e := range rec.toolEnds("task") {
		switch {
		case !e.IsError && resultText(e) == "one finished":
			ok++
		case e.IsError && strings.Contains(resultText(e), "1 subagents are already running for this session"):
			refused++
		}
	}
	if ok != 1 || refused != 1 {
		t.Fatalf("%d finished and %d refused, want one each", ok, refused)
	}
}
