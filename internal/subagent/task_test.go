package subagent_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/engine"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/llmtest"
	"github.com/agentd-dev/agentd/internal/llm/openaichat"
	"github.com/agentd-dev/agentd/internal/llm/registry"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
	"github.com/agentd-dev/agentd/internal/subagent"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// fixture is an engine whose model is the wire mock of Chat Completions,
// with subagents on, and one parent session in a temporary project.
type fixture struct {
	t    *testing.T
	srv  *wiremock.Server
	eng  *engine.Engine
	dir  string // sessions
	cwd  string
	home string
}

func newFixture(t *testing.T, mod func(*engine.Options)) *fixture {
	t.Helper()
	f := &fixture{t: t, srv: llmtest.NewServer(t), dir: t.TempDir(), cwd: t.TempDir(), home: t.TempDir()}
	m := llm.Model{ID: "m1", Name: "Mock", API: llm.APIOpenAICompletions, Provider: "mock", BaseURL: f.srv.OpenAIURL(),
		Input: []string{"text"}, Cost: llm.ModelCost{Input: 1, Output: 2}, ContextWindow: 128000, MaxTokens: 4096}
	reg, err := registry.Load(context.Background(), registry.Options{Extra: []llm.Model{m}})
	if err != nil {
		t.Fatal(err)
	}
	model, _ := reg.Find("mock", "m1")
	opt := engine.Options{
		Models: &engine.Models{Registry: reg, Providers: map[llm.API]llm.Provider{llm.APIOpenAICompletions: openaichat.New(nil)}},
		Model:  model.Model, Home: f.home, TempDir: t.TempDir(),
		Subagents: engine.Subagents{Enabled: true, GlobalDirs: []string{filepath.Join(f.home, ".agentd")}},
	}
	if mod != nil {
		mod(&opt)
	}
	if f.eng, err = engine.New(opt); err != nil {
		t.Fatal(err)
	}
	return f
}

// session builds a parent session and records its events.
func (f *fixture) session(spec sessionspec.Spec) (*session.Session, *recorder) {
	f.t.Helper()
	spec.Cwd, spec.SessionsDir = f.cwd, f.dir
	s, err := f.eng.Session(spec)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = s.Close() })
	r := &recorder{changed: make(chan struct{}, 1)}
	s.Subscribe(r.add)
	return s, r
}

// run prompts s and waits for the run to end.
func run(t *testing.T, s *session.Session, text string) {
	t.Helper()
	if err := s.Prompt(session.UserMessage(text, nil), session.BehaviorNone); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Wait(ctx); err != nil {
		t.Fatal("the run did not end:", err)
	}
}

type recorder struct {
	mu      sync.Mutex
	evs     []session.Event
	changed chan struct{}
}

func (r *recorder) add(ev session.Event) {
	r.mu.Lock()
	if ev.Agent != nil && ev.Agent.Type == agent.EventToolExecutionUpdate && ev.Agent.Partial != nil {
		p := *ev.Agent.Partial
		ev.Agent = &agent.Event{Type: ev.Agent.Type, ToolName: ev.Agent.ToolName, ToolCallID: ev.Agent.ToolCallID, Partial: &p}
	}
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// waitFor waits until an event satisfies pred and returns it.
func (r *recorder) waitFor(t *testing.T, what string, pred func(session.Event) bool) session.Event {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		for _, ev := range r.evs {
			if pred(ev) {
				r.mu.Unlock()
				return ev
			}
		}
		r.mu.Unlock()
		select {
		case <-r.changed:
		case <-deadline:
			t.Fatalf("no %s", what)
		}
	}
}

// toolEnds are the results of the tool calls named name.
func (r *recorder) toolEnds(name string) []*agent.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*agent.Event
	for _, ev := range r.evs {
		if ev.Agent != nil && ev.Agent.Type == agent.EventToolExecutionEnd && ev.Agent.ToolName == name {
			out = append(out, ev.Agent)
		}
	}
	return out
}

func (r *recorder) updates(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ev := range r.evs {
		if ev.Agent != nil && ev.Agent.Type == agent.EventToolExecutionUpdate && ev.Agent.ToolName == name {
			n++
		}
	}
	return n
}

func resultText(r *agent.Event) string {
	if r == nil || r.Result == nil {
		return ""
	}
	var b strings.Builder
	for _, c := range r.Result.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

func details(t *testing.T, r *agent.Event) subagent.Details {
	t.Helper()
	raw, err := json.Marshal(r.Result.Details)
	if err != nil {
		t.Fatal(err)
	}
	var d subagent.Details
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// Scripts: a child's job says CHILDJOB; the parent's first request
// asks for the task, its next answers.
func isChild(r *wiremock.Request) bool {
	msgs, _ := r.JSON["messages"].([]any)
	for _, m := range msgs {
		if m, _ := m.(map[string]any); m["role"] == "user" {
			b, _ := json.Marshal(m["content"])
			return strings.Contains(string(b), "CHILDJOB")
		}
	}
	return false
}

func lastRole(r *wiremock.Request) string {
	msgs, _ := r.JSON["messages"].([]any)
	if len(msgs) == 0 {
		return ""
	}
	m, _ := msgs[len(msgs)-1].(map[string]any)
	s, _ := m["role"].(string)
	return s
}

func toolNames(r *wiremock.Request) []string {
	var out []string
	tools, _ := r.JSON["tools"].([]any)
	for _, t := range tools {
		fn, _ := t.(map[string]any)["function"].(map[string]any)
		n, _ := fn["name"].(string)
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func taskCall(id, typ, prompt string) wiremock.ToolCall {
	b, _ := json.Marshal(map[string]string{"description": "a job", "prompt": prompt, "subagent_type": typ})
	return wiremock.ToolCall{ID: id, Name: "task", Args: []string{string(b)}}
}

// A task call starts a child session of the type asked for, with that
// type's tools, whose transcript names its parent (pi's parentSession);
// its progress streams as tool updates, its last message is the result,
// and its tokens count in the parent's stats.
func TestTaskRunsAChildSession(t *testing.T) {
	f := newFixture(t, nil)
	var mu sync.Mutex
	var childTools []string
	f.srv.Handle(func(r *wiremock.Request) wiremock.Script {
		switch {
		case isChild(r):
			mu.Lock()
			childTools = toolNames(r)
			mu.Unlock()
			return wiremock.Script{Text: []string{"CHILD-", "ANSWER"}, Usage: &wiremock.Usage{Input: 100, Output: 10}}
		case lastRole(r) == "tool":
			return wiremock.Script{Text: []string{"done"}, Usage: &wiremock.Usage{Input: 20, Output: 3}}
		}
		return wiremock.Script{ToolCalls: []wiremock.ToolCall{taskCall("t1", "explore", "CHILDJOB find the answer")}, Usage: &wiremock.Usage{Input: 10, Output: 5}}
	})
	s, rec := f.session(sessionspec.Spec{})
	run(t, s, "go")

	ends := rec.toolEnds("task")
	if len(ends) != 1 || ends[0].IsError || resultText(ends[0]) != "CHILD-ANSWER" {
		t.Fatalf("task result %q (error %v), want the child's text", resultText(ends[0]), ends[0].IsError)
	}
	if rec.updates("task") == 0 {
		t.Error("no tool updates streamed the child's progress")
	}
	d := details(t, ends[0])
	if d.SessionID == "" || d.Agent != "explore" || d.Status != "completed" || d.Usage.Input != 100 {
		t.Errorf("details %+v", d)
	}
	mu.Lock()
	if want := []string{"ask_user", "find", "grep", "ls", "read", "todo"}; !slices.Equal(childTools, want) {
		t.Errorf("explore child's tools %v, want %v", childTools, want)
	}
	mu.Unlock()
	info, err := transcript.ReadInfo(d.SessionFile)
	if err != nil {
		t.Fatal("the child's transcript:", err)
	}
	if info.ParentSession != s.File() || s.File() == "" {
		t.Errorf("child's parentSession %q, want %q", info.ParentSession, s.File())
	}
	st := s.Stats()
	if st.Tokens.Input != 10+20+100 || st.Tokens.Output != 5+3+10 {
		t.Errorf("parent's tokens %+v, want the child's counted too", st.Tokens)
	}
	if st.Tokens.Cost.Total <= 0 {
		t.Errorf("no cost in %+v", st.Tokens)
	}
}

// What confines the parent confines the child, whatever the model or a
// project's agent file asks for: a read-only parent's child cannot
// write; a parent without bash has a child without bash even of a type
// that lists it with a full-access sandbox; a call naming a sandbox,
// tools or model, or an unknown type, is refused.
func TestChildIsNoWiderThanItsParent(t *testing.T) {
	type want struct {
		errText    string   // the task result's error, or "" for success
		childTools []string // the child's request's tools, when it runs
	}
	for _, tt := range []struct {
		name  string
		spec  sessionspec.Spec
		agent string // a project agent file
		call  string // the task call's arguments
		child wiremock.Script
		want  want
	}{
		{
			name: "read-only parent", spec: sessionspec.Spec{Sandbox: sandbox.ReadOnly},
			call:  `{"description":"w","prompt":"CHILDJOB write x","subagent_type":"general"}`,
			child: wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "w1", Name: "write", Args: []string{`{"path":"x.txt","content":"hi"}`}}}},
			want:  want{},
		},
		{
			name: "project type asks for more", spec: sessionspec.Spec{Tools: []string{"read", "ls", "task"}, Sandbox: sandbox.WorkspaceWrite},
			agent: "---\ndescription: wants everything\ntools: [read, bash, write, ls]\nsandbox: full-access\n---\nDo it.\n",
			call:  `{"description":"w","prompt":"CHILDJOB p","subagent_type":"greedy"}`,
			child: wiremock.Script{Text: []string{"ok"}},
			want:  want{childTools: []string{"ask_user", "ls", "read", "todo"}},
		},
		{
			name: "type names a model that is not there", agent: "---\ndescription: d\nmodel: nope/x\n---\n",
			call: `{"description":"w","prompt":"CHILDJOB p","subagent_type":"greedy"}`,
			want: want{errText: "agent type greedy names model \"nope/x\", which is not available"},
		},
		{
			name: "arguments name a sandbox", call: `{"description":"w","prompt":"CHILDJOB p","subagent_type":"general","sandbox":"full-access"}`,
			want: want{errText: "unknown field \"sandbox\""},
		},
		{
			name: "arguments name tools", call: `{"description":"w","prompt":"CHILDJOB p","subagent_type":"explore","tools":["bash"]}`,
			want: want{errText: "unknown field \"tools\""},
		},
		{
			name: "unknown type", call: `{"description":"w","prompt":"CHILDJOB p","subagent_type":"root"}`,
			want: want{errText: "unknown subagent_type \"root\"; the types are explore, general"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil)
			if tt.agent != "" {
				p := filepath.Join(f.cwd, ".agentd", "agents", "greedy.md")
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(tt.agent), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var mu sync.Mutex
			var childTools []string
			childRuns := 0
			f.srv.Handle(func(r *wiremock.Request) wiremock.Script {
				mu.Lock()
				defer mu.Unlock()
				switch {
				case isChild(r) && lastRole(r) == "tool":
					return wiremock.Script{Text: []string{"child done"}}
				case isChild(r):
					childRuns++
					childTools = toolNames(r)
					return tt.child
				case lastRole(r) == "tool":
					return wiremock.Script{Text: []string{"parent done"}}
				}
				return wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "t1", Name: "task", Args: []string{tt.call}}}}
			})
			s, rec := f.session(tt.spec)
			run(t, s, "go")
			ends := rec.toolEnds("task")
			if len(ends) != 1 {
				t.Fatalf("%d task results", len(ends))
			}
			if tt.want.errText != "" {
				if !ends[0].IsError || !strings.Contains(resultText(ends[0]), tt.want.errText) {
					t.Fatalf("result %q, want an error with %q", resultText(ends[0]), tt.want.errText)
				}
				if childRuns != 0 {
					t.Fatal("a child ran")
				}
				return
			}
			if ends[0].IsError {
				t.Fatalf("task failed: %s", resultText(ends[0]))
			}
			mu.Lock()
			if tt.want.childTools != nil && !slices.Equal(childTools, tt.want.childTools) {
				t.Errorf("child's tools %v, want %v", childTools, tt.want.childTools)
			}
			mu.Unlock()
			if _, err := os.Stat(filepath.Join(f.cwd, "x.txt")); err == nil {
				t.Error("the child of a read-only parent wrote a file")
			}
			d := details(t, ends[0])
			child, err := transcript.Open(d.SessionFile)
			if err != nil {
				t.Fatal(err)
			}
			if tt.name == "read-only parent" {
				// The write's result, as the child's model saw it.
				found := false
				for _, e := range child.Entries() {
					if e.Type == transcript.TypeMessage && e.Message.Role == llm.RoleToolResult && e.Message.ToolName == "write" {
						found = e.Message.IsError && strings.Contains(e.Message.TextContent(), "read-only")
					}
				}
				if !found {
					for _, e := range child.Entries() {
						if e.Type == transcript.TypeMessage {
							t.Logf("%s %s %s", e.Message.Role, e.Message.ToolName, e.Message.TextContent())
						}
					}
					t.Error("the child's write was not refused by the read-only sandbox")
				}
			}
		})
	}
}

// A child's transcript keeps what it may do: opened again (a client
// loads it, the server reloads it after a restart), it has its type's
// tools and its depth, not a fresh session's.
func TestChildKeepsItsToolsWhenReopened(t *testing.T) {
	f := newFixture(t, func(o *engine.Options) { o.Subagents.MaxDepth = 1 })
	f.srv.Handle(func(r *wiremock.Request) wiremock.Script {
		switch {
		case isChild(r):
			return wiremock.Script{Text: []string{"ok"}}
		case lastRole(r) == "tool":
			return wiremock.Script{Text: []string{"done"}}
		}
		return wiremock.Script{ToolCalls: []wiremock.ToolCall{taskCall("t1", "general", "CHILDJOB x")}}
	})
	s, rec := f.session(sessionspec.Spec{Tools: []string{"read", "bash", "ls", "task"}})
	run(t, s, "go")
	ends := rec.toolEnds("task")
	if len(ends) != 1 || ends[0].IsError {
		t.Fatalf("task results %v", ends)
	}
	d := details(t, ends[0])
	again, err := f.eng.Session(sessionspec.Spec{Cwd: f.cwd, SessionsDir: f.dir, Open: d.SessionFile})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	got := again.ToolNames()
	slices.Sort(got)
	// The parent's three, less task: the child was at the depth limit.
	if want := []string{"ask_user", "bash", "ls", "read", "todo"}; !slices.Equal(got, want) {
		t.Fatalf("reopened child's tools %v, want %v", got, want)
	}
}

// A parent in plan mode is offered task (an explorer may look for it),
// but the child it starts, even a general one told to write, changes
// nothing: it is offered neither write nor edit, its calls of them and of
// bash are refused, and it is in plan mode itself, also when loaded
// again.
func TestPlanModeParentHasAReadOnlyChild(t *testing.T) {
	f := newFixture(t, nil)
	var mu sync.Mutex
	var parentTools, childTools []string
	f.srv.Handle(func(r *wiremock.Request) wiremock.Script {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case isChild(r) && lastRole(r) == "tool":
			return wiremock.Script{Text: []string{"child done"}}
		case isChild(r):
			childTools = toolNames(r)
			return wiremock.Script{ToolCalls: []wiremock.ToolCall{
				{ID: "w1", Name: "write", Args: []string{`{"path":"x.txt","content":"hi"}`}},
				{ID: "e1", Name: "edit", Args: []string{`{"path":"keep.txt","edits":[{"oldText":"keep","newText":"changed"}]}`}},
				{ID: "b1", Name: "bash", Args: []string{`{"command":"echo hi > y.txt"}`}},
			}}
		case lastRole(r) == "tool":
			return wiremock.Script{Text: []string{"parent done"}}
		}
		parentTools = toolNames(r)
		return wiremock.Script{ToolCalls: []wiremock.ToolCall{taskCall("t1", "general", "CHILDJOB write x.txt, edit keep.txt and make y.txt with bash")}}
	})
	if err := os.WriteFile(filepath.Join(f.cwd, "keep.txt"), []byte("keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, rec := f.session(sessionspec.Spec{Mode: "plan"})
	run(t, s, "go")
	ends := rec.toolEnds("task")
	if len(ends) != 1 || ends[0].IsError {
		t.Fatalf("task results %v", ends)
	}
	mu.Lock()
	if !slices.Contains(parentTools, "task") {
		t.Errorf("plan mode's tools %v lack task", parentTools)
	}
	if slices.Contains(childTools, "write") || slices.Contains(childTools, "edit") || len(childTools) == 0 {
		t.Errorf("the plan-mode parent's child was offered %v", childTools)
	}
	mu.Unlock()
	for _, name := range []string{"x.txt", "y.txt"} {
		if _, err := os.Stat(filepath.Join(f.cwd, name)); err == nil {
			t.Errorf("the child of a plan-mode parent made %s", name)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(f.cwd, "keep.txt")); string(b) != "keep\n" {
		t.Errorf("keep.txt = %q", b)
	}
	d := details(t, ends[0])
	child, err := transcript.Open(d.SessionFile)
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, e := range child.Entries() {
		if e.Type == transcript.TypeMessage && e.Message.Role == llm.RoleToolResult {
			// Not offered, or refused by the mode: either way an error.
			if e.Message.IsError {
				refused++
			} else {
				t.Errorf("the child's %s ran: %s", e.Message.ToolName, e.Message.TextContent())
			}
		}
	}
	if refused != 3 {
		t.Errorf("%d of the child's 3 calls refused", refused)
	}
	again, err := f.eng.Session(sessionspec.Spec{Cwd: f.cwd, SessionsDir: f.dir, Open: d.SessionFile})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if m := again.Mode(); m.Name != "plan" || !m.ReadOnly {
		t.Errorf("the reopened child is in mode %q", m.Name)
	}
}

// A child opened again (after a restart, or by a client loading its
// file) keeps its type's prompt and the sandbox it ran in, not the
// engine's defaults: a read-only type's child reopened in a full-access
// engine still cannot write.
func TestChildKeepsItsPromptAndSandboxWhenReopened(t *testing.T) {
	f := newFixture(t, nil)
	p := filepath.Join(f.cwd, ".agentd", "agents", "scribe.md")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("---\ndescription: notes things\ntools: [read, write]\nsandbox: read-only\n---\nSCRIBE-TYPE-PROMPT\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	reopened := false
	var prompts []bool // whether each child request carried the type's prompt
	f.srv.Handle(func(r *wiremock.Request) wiremock.Script {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case isChild(r):
			prompts = append(prompts, strings.Contains(string(r.Body), "SCRIBE-TYPE-PROMPT"))
			if reopened && lastRole(r) == "user" {
				return wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "w1", Name: "write", Args: []string{`{"path":"x.txt","content":"hi"}`}}}}
			}
			return wiremock.Script{Text: []string{"ok"}}
		case lastRole(r) == "tool":
			return wiremock.Script{Text: []string{"done"}}
		}
		return wiremock.Script{ToolCalls: []wiremock.ToolCall{taskCall("t1", "scribe", "CHILDJOB note")}}
	})
	s, rec := f.session(sessionspec.Spec{})
	run(t, s, "go")
	ends := rec.toolEnds("task")
	if len(ends) != 1 || ends[0].IsError {
		t.Fatalf("task results %v", ends)
	}
	d := details(t, ends[0])
	mu.Lock()
	reopened = true
	mu.Unlock()
	again, err := f.eng.Session(sessionspec.Spec{Cwd: f.cwd, SessionsDir: f.dir, Open: d.SessionFile})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	run(t, again, "again")
	mu.Lock()
	if len(prompts) != 3 || slices.Contains(prompts, false) {
		t.Errorf("the type's prompt in the child's requests: %v, want in all 3", prompts)
	}
	mu.Unlock()
	if _, err := os.Stat(filepath.Join(f.cwd, "x.txt")); err == nil {
		t.Error("the reopened read-only child wrote a file")
	}
	refused := false
	for _, m := range again.Messages() {
		if m.Role == llm.RoleToolResult && m.ToolName == "write" {
			refused = m.IsError && strings.Contains(m.TextContent(), "read-only")
		}
	}
	if !refused {
		t.Error("the reopened child's write was not refused by its read-only sandbox")
	}
}
