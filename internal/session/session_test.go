package session_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/compaction"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/llmtest"
	"github.com/agentd-dev/agentd/internal/llm/openaichat"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/tool"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// harness is a session against the wire mock of the Chat Completions API,
// with the real built-in tools in a temporary directory.
type harness struct {
	t    *testing.T
	srv  *wiremock.Server
	s    *session.Session
	dir  string
	cwd  string
	mu   sync.Mutex
	evs  []session.Event
	cfg  session.Config
	seen chan struct{}
}

func mockModel(srv *wiremock.Server) *llm.Model {
	return &llm.Model{ID: "mock-model", Name: "Mock", API: llm.APIOpenAICompletions, Provider: "mock", BaseURL: srv.OpenAIURL(),
		Input: []string{"text"}, Cost: llm.ModelCost{Input: 1, Output: 2}, ContextWindow: 128000, MaxTokens: 4096}
}

func newHarness(t *testing.T, mod func(*session.Config)) *harness {
	t.Helper()
	h := &harness{t: t, srv: llmtest.NewServer(t), dir: t.TempDir(), cwd: t.TempDir(), seen: make(chan struct{}, 1)}
	p := openaichat.New(nil)
	h.cfg = session.Config{
		Cwd: h.cwd, SessionsDir: h.dir, Model: mockModel(h.srv), Stream: p.Stream,
		Options: func(context.Context, *llm.Model) (llm.StreamOptions, error) {
			return llm.StreamOptions{APIKey: "k"}, nil
		},
		Tools:      tool.Builtins(tool.Env{Cwd: h.cwd, TempDir: t.TempDir(), Locks: &tool.FileLocks{}}),
		Retry:      session.RetrySettings{Enabled: true, MaxRetries: 3, BaseDelay: 10 * time.Millisecond, MaxDelay: time.Second},
		Compaction: compaction.Settings{Enabled: true, ReserveTokens: 16384, KeepRecentTokens: 20000},
	}
	if mod != nil {
		mod(&h.cfg)
	}
	s, err := session.New(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.s = s
	s.Subscribe(func(ev session.Event) {
		h.mu.Lock()
		h.evs = append(h.evs, ev)
		h.mu.Unlock()
		select {
		case h.seen <- struct{}{}:
		default:
		}
	})
	t.Cleanup(func() { _ = s.Close() })
	return h
}

func (h *harness) prompt(text string) {
	h.t.Helper()
	if err := h.s.Prompt(session.UserMessage(text, nil), session.BehaviorNone); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) wait() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.s.Wait(ctx); err != nil {
		h.t.Fatal("run did not end")
	}
}

// waitEvent blocks until an event matching pred has been emitted.
func (h *harness) waitEvent(pred func(session.Event) bool) session.Event {
	h.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		h.mu.Lock()
		for _, ev := range h.evs {
			if pred(ev) {
				h.mu.Unlock()
				return ev
			}
		}
		h.mu.Unlock()
		select {
		case <-h.seen:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			h.t.Fatal("event never came")
		}
	}
}

func (h *harness) types() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, ev := range h.evs {
		if ev.Type == "message_update" || ev.Type == "tool_execution_update" {
			continue
		}
		s := string(ev.Type)
		if ev.Type == session.EventStateChanged {
			s += ":" + string(ev.State)
			if ev.Outcome != "" {
				s += "/" + string(ev.Outcome)
			}
		}
		out = append(out, s)
	}
	return out
}

func is(t string) func(session.Event) bool {
	return func(ev session.Event) bool { return string(ev.Type) == t }
}

func lastUserText(r *wiremock.Request) string {
	msgs, _ := r.JSON["messages"].([]any)
	for i := len(msgs) - 1; i >= 0; i-- {
		m, _ := msgs[i].(map[string]any)
		switch m["role"] {
		case "user":
			if s, ok := m["content"].(string); ok {
				return s
			}
			b, _ := json.Marshal(m["content"])
			return string(b)
		case "tool":
			return "TOOL:" + m["content"].(string)
		}
	}
	return ""
}

func TestPromptRunsBashAndFinishes(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Handle(func(r *wiremock.Request) wiremock.Script {
		last := lastUserText(r)
		if strings.HasPrefix(last, "TOOL:") {
			return wiremock.Script{Text: []string{"The tool said: ", strings.TrimSpace(strings.TrimPrefix(last, "TOOL:"))}, Usage: &wiremock.Usage{Input: 50, Output: 8}}
		}
		return wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "call_1", Name: "bash", Args: []string{`{"command":`, `"echo hello-from-tool"}`}}}, Usage: &wiremock.Usage{Input: 42, Output: 7}}
	})
	h.prompt("run it")
	h.wait()
	msgs := h.s.Messages()
	if len(msgs) != 4 || msgs[2].Role != llm.RoleToolResult || msgs[2].TextContent() != "hello-from-tool\n" || msgs[3].TextContent() != "The tool said: hello-from-tool" {
		for _, m := range msgs {
			t.Logf("%s %q", m.Role, m.TextContent())
		}
		t.Fatal("unexpected conversation")
	}
	got := strings.Join(h.types(), " ")
	want := "state_changed:running agent_start turn_start message_start message_end message_start message_end tool_execution_start tool_execution_end message_start message_end turn_end turn_start message_start message_end turn_end agent_end state_changed:idle/completed"
	if got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	// Seqs are 1..n without gaps.
	h.mu.Lock()
	for i, ev := range h.evs {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
	}
	h.mu.Unlock()
	st := h.s.Stats()
	if st.UserMessages != 1 || st.AssistantMessages != 2 || st.ToolCalls != 1 || st.ToolResults != 1 || st.Tokens.Input != 92 || st.Tokens.Output != 15 {
		t.Fatalf("stats %+v", st)
	}
	if text, ok := h.s.LastAssistantText(); !ok || text != "The tool said: hello-from-tool" {
		t.Fatalf("last assistant text %q", text)
	}
}

func TestParallelToolCalls(t *testing.T) {
	h := newHarness(t, nil)
	for _, name := range []string{"a.txt", "b.txt", "c.txt"} {
		if err := os.WriteFile(filepath.Join(h.cwd, name), []byte("content of "+name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h.srv.Enqueue(wiremock.Script{ToolCalls: []wiremock.ToolCall{
		{ID: "c1", Name: "read", Args: []string{`{"path":"a.txt"}`}},
		{ID: "c2", Name: "bash", Args: []string{`{"command":"sleep 0.2; echo slow"}`}},
		{ID: "c3", Name: "read", Args: []string{`{"path":"c.txt"}`}},
	}}, wiremock.Script{Text: []string{"read them"}})
	h.prompt("read all")
	h.wait()
	var ids, texts []string
	for _, m := range h.s.Messages() {
		if m.Role == llm.RoleToolResult {
			ids = append(ids, m.ToolCallID)
			texts = append(texts, m.TextContent())
		}
	}
	if strings.Join(ids, ",") != "c1,c2,c3" || !strings.Contains(texts[0], "content of a.txt") || texts[1] != "slow\n" {
		t.Fatalf("results %v %q", ids, texts)
	}
	// Both reads end before the slow bash does: they ran concurrently.
	var ends []string
	h.mu.Lock()
	for _, ev := range h.evs {
		if ev.Type == "tool_execution_end" {
			ends = append(ends, ev.Agent.ToolCallID)
		}
	}
	h.mu.Unlock()
	if ends[2] != "c2" {
		t.Fatalf("tool ends %v: bash should finish last", ends)
	}
}

func TestSteerAndFollowUp(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Handle(func(r *wiremock.Request) wiremock.Script {
		last := lastUserText(r)
		if last == "start" {
			return wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "c1", Name: "bash", Args: []string{`{"command":"sleep 0.3"}`}}}}
		}
		return wiremock.Script{Text: []string{"answer to " + last}}
	})
	h.prompt("start")
	h.waitEvent(is("tool_execution_start"))
	if err := h.s.Prompt(session.UserMessage("queued", nil), session.BehaviorNone); err != session.ErrBusy {
		t.Fatalf("prompt while running: %v", err)
	}
	if err := h.s.Prompt(session.UserMessage("later", nil), session.BehaviorFollowUp); err != nil {
		t.Fatal(err)
	}
	if err := h.s.Steer(session.UserMessage("now", nil)); err != nil {
		t.Fatal(err)
	}
	h.wait()
	var convo []string
	for _, m := range h.s.Messages() {
		if m.Role != llm.RoleToolResult {
			convo = append(convo, string(m.Role)+":"+m.TextContent())
		}
	}
	want := "user:start assistant: user:now assistant:answer to now user:later assistant:answer to later"
	if got := strings.Join(convo, " "); got != want {
		t.Fatalf("conversation\n got %s\nwant %s", got, want)
	}
}

func TestAbortWhileStreaming(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Enqueue(wiremock.Script{Text: []string{"one ", "two ", "three"}, Delay: 5 * time.Second})
	h.prompt("talk")
	h.waitEvent(func(ev session.Event) bool {
		return ev.Type == "message_update" && ev.Agent.Update.Type == llm.EventTextDelta
	})
	h.s.Abort()
	if h.s.Running() {
		t.Fatal("still running after Abort returned")
	}
	msgs := h.s.Messages()
	last := msgs[len(msgs)-1]
	if last.StopReason != llm.StopAborted || last.TextContent() != "one " {
		t.Fatalf("last %+v", last)
	}
	ev := h.waitEvent(func(ev session.Event) bool {
		return ev.Type == session.EventStateChanged && ev.State == session.StateIdle
	})
	if ev.Outcome != session.OutcomeCancelled {
		t.Fatalf("outcome %s", ev.Outcome)
	}
}

func TestAbortKillsRunningBashProcessGroup(t *testing.T) {
	h := newHarness(t, nil)
	pidFile := filepath.Join(h.cwd, "pids")
	h.srv.Enqueue(wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "c1", Name: "bash",
		Args: []string{`{"command":"sleep 30 & echo $! > pids; bash -c 'echo $$ >> pids; sleep 30'"}`}}}})
	h.prompt("sleep")
	h.waitEvent(is("tool_execution_start"))
	var pids []int
	deadline := time.Now().Add(10 * time.Second)
	for len(pids) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		b, _ := os.ReadFile(pidFile)
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			var p int
			if _, err := fmtSscan(f, &p); err == nil {
				pids = append(pids, p)
			}
		}
	}
	if len(pids) < 2 {
		t.Fatalf("children did not start: %v", pids)
	}
	h.s.Abort()
	msgs := h.s.Messages()
	if last := msgs[len(msgs)-1]; last.Role != llm.RoleAssistant || last.StopReason != llm.StopAborted {
		t.Fatalf("run must end with an aborted assistant message, got %+v", last)
	}
	for _, pid := range pids {
		gone := false
		for i := 0; i < 100 && !gone; i++ {
			gone = syscall.Kill(pid, 0) == syscall.ESRCH
			if !gone {
				time.Sleep(20 * time.Millisecond)
			}
		}
		if !gone {
			t.Errorf("process %d survived the abort", pid)
		}
	}
}

func TestRetryAfter503(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Enqueue(wiremock.Script{Status: 503, ErrorMessage: "mock failure 503"}, wiremock.Script{Text: []string{"recovered"}})
	h.prompt("hello")
	h.wait()
	msgs := h.s.Messages()
	if len(msgs) != 2 || msgs[1].TextContent() != "recovered" {
		t.Fatalf("context after retry: %d messages, last %q", len(msgs), msgs[len(msgs)-1].TextContent())
	}
	got := strings.Join(h.types(), " ")
	want := "state_changed:running agent_start turn_start message_start message_end message_start message_end turn_end agent_end state_changed:retrying auto_retry_start state_changed:running agent_start turn_start message_start message_end auto_retry_end turn_end agent_end state_changed:idle/completed"
	if got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	start := h.waitEvent(is("auto_retry_start"))
	if start.Attempt != 1 || start.MaxAttempts != 3 || start.ErrorMessage != "503 mock failure 503" {
		t.Fatalf("auto_retry_start %+v", start)
	}
	// The failed attempt is kept in the transcript, not in the context.
	if st := h.s.Stats(); st.AssistantMessages != 1 {
		t.Fatalf("context assistant messages %d", st.AssistantMessages)
	}
	f, err := transcript.Open(h.s.File())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	failed := 0
	for _, e := range f.Entries() {
		if e.Type == transcript.TypeMessage && e.Message.StopReason == llm.StopError {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("%d failed attempts in the transcript", failed)
	}
}

func TestRetryGivesUpAndNonRetryableFailsAtOnce(t *testing.T) {
	h := newHarness(t, nil)
	for i := 0; i < 4; i++ {
		h.srv.Enqueue(wiremock.Script{Status: 429, ErrorMessage: "slow down"})
	}
	h.prompt("hello")
	h.wait()
	end := h.waitEvent(is("auto_retry_end"))
	if end.Success || end.Attempt != 3 || end.FinalError != "429 slow down" {
		t.Fatalf("auto_retry_end %+v", end)
	}
	if n := len(h.srv.Requests()); n != 4 {
		t.Fatalf("%d requests, want 4", n)
	}
	h.srv.Enqueue(wiremock.Script{Status: 400, ErrorMessage: "bad request"})
	h.prompt("again")
	h.wait()
	if n := len(h.srv.Requests()); n != 5 {
		t.Fatalf("a 400 was retried: %d requests", n)
	}
}

func TestAbortDuringRetryWait(t *testing.T) {
	h := newHarness(t, func(c *session.Config) { c.Retry.BaseDelay = time.Minute; c.Retry.MaxDelay = time.Minute })
	h.srv.Enqueue(wiremock.Script{Status: 529, ErrorType: "overloaded_error", ErrorMessage: "Overloaded"})
	h.prompt("hello")
	h.waitEvent(is("auto_retry_start"))
	h.s.AbortRetry()
	end := h.waitEvent(is("auto_retry_end"))
	if end.Success {
		t.Fatal("retry reported success")
	}
	if h.s.Running() {
		t.Fatal("still running")
	}
}

func TestApprovals(t *testing.T) {
	policy := interaction.Policy{Rules: []interaction.Rule{{Tool: "bash", Action: interaction.ActionAsk}}}
	tests := []struct {
		name   string
		answer *interaction.Response // nil: let it time out
		want   string
		isErr  bool
	}{
		{"edit", &interaction.Response{Verdict: interaction.VerdictEdit, Args: json.RawMessage(`{"command":"echo edited"}`)}, "edited\n", false},
		{"skip", &interaction.Response{Verdict: interaction.VerdictSkip}, "Tool call skipped by the user", true},
		{"reject with feedback", &interaction.Response{Verdict: interaction.VerdictReject, Feedback: "use ls instead"}, "The user rejected this tool call: use ls instead", true},
		{"timeout", nil, "No answer before the approval timed out; the tool call was not run", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(c *session.Config) {
				c.Policy = policy
				c.InteractionTimeout = 300 * time.Millisecond
				if tt.answer != nil {
					c.InteractionTimeout = 0
				}
			})
			h.srv.Enqueue(wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "c1", Name: "bash", Args: []string{`{"command":"echo original"}`}}}},
				wiremock.Script{Text: []string{"ok"}})
			h.prompt("run")
			req := h.waitEvent(is(string(session.EventInteractionRequested)))
			if req.Interaction.Request.Kind != interaction.KindApproval || req.Interaction.Request.Tool.ToolName != "bash" {
				t.Fatalf("request %+v", req.Interaction.Request)
			}
			h.waitEvent(func(ev session.Event) bool {
				return ev.Type == session.EventStateChanged && ev.State == session.StateSuspended
			})
			if pending := h.s.Interactions(); len(pending) != 1 {
				t.Fatalf("pending %v", pending)
			}
			if tt.answer != nil {
				if err := h.s.Answer(req.Interaction.Request.ID, *tt.answer); err != nil {
					t.Fatal(err)
				}
				if err := h.s.Answer(req.Interaction.Request.ID, *tt.answer); err == nil {
					t.Fatal("a second answer was accepted")
				}
			}
			h.wait()
			var res *llm.Message
			for _, m := range h.s.Messages() {
				if m.Role == llm.RoleToolResult {
					res = m
				}
			}
			if res == nil || res.TextContent() != tt.want || res.IsError != tt.isErr {
				t.Fatalf("tool result %+v", res)
			}
			// What the model saw next is the same result.
			if got := lastUserText(ptr(h.srv.LastRequest(t))); got != "TOOL:"+tt.want && !strings.HasSuffix(got, tt.want) {
				t.Fatalf("model saw %q", got)
			}
		})
	}
}

func ptr(r wiremock.Request) *wiremock.Request { return &r }

func TestPersistReloadAndFork(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Handle(func(r *wiremock.Request) wiremock.Script {
		return wiremock.Script{Text: []string{"re: " + lastUserText(r)}, Usage: &wiremock.Usage{Input: 10, Output: 2}}
	})
	for _, p := range []string{"first", "second", "third"} {
		h.prompt(p)
		h.wait()
	}
	if err := h.s.SetName("my work"); err != nil {
		t.Fatal(err)
	}
	path := h.s.File()
	if path == "" || !strings.HasPrefix(path, h.dir) {
		t.Fatalf("session file %q", path)
	}
	// Reload in a new session object.
	cfg := h.cfg
	cfg.Open = path
	s2, err := session.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if len(s2.Messages()) != 6 || s2.Name() != "my work" || s2.ID() != h.s.ID() {
		t.Fatalf("reloaded %d messages, name %q", len(s2.Messages()), s2.Name())
	}
	// Fork from the second user message: the new session has the first
	// exchange only, and the source file is untouched.
	forks := s2.ForkMessages()
	if len(forks) != 3 || forks[1].Text != "second" {
		t.Fatalf("fork messages %+v", forks)
	}
	text, err := s2.Fork(forks[1].EntryID)
	if err != nil || text != "second" {
		t.Fatalf("fork: %q %v", text, err)
	}
	if s2.File() == path || len(s2.Messages()) != 2 {
		t.Fatalf("forked session %s has %d messages", s2.File(), len(s2.Messages()))
	}
	orig, err := transcript.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	if n := len(orig.Context(orig.Leaf()).Messages); n != 6 {
		t.Fatalf("source changed: %d messages", n)
	}
	// Clone keeps everything.
	if err := s2.Clone(); err != nil {
		t.Fatal(err)
	}
	if len(s2.Messages()) != 2 {
		t.Fatalf("clone has %d messages", len(s2.Messages()))
	}
}

func TestLoadsPiSessionFile(t *testing.T) {
	// A session file pi 0.73.1 wrote.
	data, err := os.ReadFile("testdata/pi-0.73.1-session-v3.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "pi.jsonl")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(c *session.Config) { c.Open = path })
	msgs := h.s.Messages()
	// pi's file ends with a compaction that kept everything: the summary
	// comes first, then the whole conversation.
	if len(msgs) != 9 || msgs[0].Role != llm.RoleCompactionSummary || msgs[1].TextContent() != "first long prompt" || msgs[8].StopReason != llm.StopAborted {
		t.Fatalf("loaded %d messages", len(msgs))
	}
	if h.s.Name() == "" {
		t.Fatal("session name from session_info not loaded")
	}
	// And the conversation goes on from there.
	h.srv.Enqueue(wiremock.Script{Text: []string{"continuing"}})
	h.prompt("and now?")
	h.wait()
	if text, _ := h.s.LastAssistantText(); text != "continuing" {
		t.Fatalf("last text %q", text)
	}
}

func TestEventLogResume(t *testing.T) {
	h := newHarness(t, func(c *session.Config) { c.EventLogSize = 16 })
	h.srv.Enqueue(wiremock.Script{Text: []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n"}})
	h.prompt("go")
	h.wait()
	seq := h.s.Seq()
	evs, ok := h.s.EventsSince(seq - 3)
	if !ok || len(evs) != 3 || evs[2].Seq != seq {
		t.Fatalf("since %d: ok %v, %d events", seq-3, ok, len(evs))
	}
	if _, ok := h.s.EventsSince(1); ok {
		t.Fatal("a cursor older than the log was accepted")
	}
	for _, ev := range evs {
		if ev.Agent != nil && ev.Type == "message_update" && ev.Agent.Message != nil {
			t.Fatal("logged message_update kept the live partial message")
		}
	}
}

func TestModelAndThinkingChangesArePersisted(t *testing.T) {
	h := newHarness(t, nil)
	m := mockModel(h.srv)
	m.ID, m.Reasoning = "mock-reasoner", true
	if err := h.s.SetModel(m); err != nil {
		t.Fatal(err)
	}
	if lvl, err := h.s.SetThinking(llm.ThinkingXHigh); err != nil || lvl != llm.ThinkingHigh {
		t.Fatalf("thinking %s %v", lvl, err)
	}
	h.s.SetQueueModes(agent.All, "")
	if st := h.s.Settings(); st.SteeringMode != agent.All || st.FollowUpMode != agent.OneAtATime {
		t.Fatalf("settings %+v", st)
	}
	f, err := transcript.Open(h.s.File())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := f.Context(f.Leaf())
	if c.ModelID != "mock-reasoner" || c.ThinkingLevel != llm.ThinkingHigh {
		t.Fatalf("persisted context %+v", c)
	}
}

func TestUserBashIsRecordedIntoContext(t *testing.T) {
	h := newHarness(t, func(c *session.Config) { c.BashEnv = tool.Env{Cwd: c.Cwd} })
	m, err := h.s.Bash(context.Background(), "echo from-user; exit 3", false)
	if err != nil {
		t.Fatal(err)
	}
	if m.Output != "from-user\n" || m.ExitCode == nil || *m.ExitCode != 3 || m.Cancelled {
		t.Fatalf("bash message %+v", m)
	}
	secret, _ := h.s.Bash(context.Background(), "echo hidden", true)
	if !secret.ExcludeFromContext {
		t.Fatal("exclude flag lost")
	}
	h.srv.Enqueue(wiremock.Script{Text: []string{"seen"}})
	h.prompt("what happened?")
	h.wait()
	body := string(h.srv.LastRequest(t).Body)
	if !strings.Contains(body, "from-user") || !strings.Contains(body, "exited with code 3") || strings.Contains(body, "hidden") {
		t.Fatalf("request: %s", body)
	}
	// Abort kills a long command.
	done := make(chan *llm.Message)
	go func() {
		m, _ := h.s.Bash(context.Background(), "sleep 30", false)
		done <- m
	}()
	for !h.s.AbortBash() {
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case m := <-done:
		if !m.Cancelled {
			t.Fatalf("aborted command %+v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("abort did not stop the command")
	}
	f, err := transcript.Open(h.s.File())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for _, m := range f.Context(f.Leaf()).Messages {
		if m.Role == llm.RoleBashExecution {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d bash executions in the transcript", n)
	}
}

func TestExportHTML(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Enqueue(wiremock.Script{Text: []string{"<b>bold</b> answer"}})
	h.prompt("<script>alert(1)</script>")
	h.wait()
	var b strings.Builder
	if err := h.s.ExportHTML(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "&lt;script&gt;alert(1)&lt;/script&gt;") || strings.Contains(out, "<script>alert") || !strings.Contains(out, "&lt;b&gt;bold") {
		t.Fatal("export does not escape content")
	}
}

// The cycling and export operations both pi faces use.
func TestCycleAndExportFile(t *testing.T) {
	h := newHarness(t, nil)
	base := h.s.Model()
	if _, ok, err := h.s.CycleThinking(); ok || err != nil {
		t.Fatalf("a model without reasoning cycled its thinking: %v %v", ok, err)
	}
	a, b, c := *base, *base, *base
	a.ID, b.ID, c.ID = "a", "b", "c"
	b.Reasoning = true
	models := []*llm.Model{&a, &b, &c}
	if _, ok, _ := h.s.CycleModel(models[:1], false); ok {
		t.Fatal("cycled through a single model")
	}
	steps := []struct {
		backward bool
		want     string
	}{{false, "a"}, {false, "b"}, {true, "a"}, {true, "c"}, {false, "a"}}
	for i, st := range steps {
		m, ok, err := h.s.CycleModel(models, st.backward)
		if err != nil || !ok || m.ID != st.want || h.s.Model().ID != st.want {
			t.Fatalf("step %d: got %v %v %v, want %s", i, m, ok, err, st.want)
		}
	}
	if _, _, err := h.s.CycleModel(models, false); err != nil { // now "b", which reasons
		t.Fatal(err)
	}
	var seen []llm.ThinkingLevel
	for range 6 {
		l, ok, err := h.s.CycleThinking()
		if !ok || err != nil {
			t.Fatalf("cycle thinking: %v %v", ok, err)
		}
		seen = append(seen, l)
	}
	// Five levels (off to high; this model has no xhigh), then round again.
	if seen[0] == seen[1] || seen[5] != seen[0] {
		t.Fatalf("thinking levels did not cycle: %v", seen)
	}

	dir := t.TempDir()
	p, err := h.s.ExportHTMLFile(session.ExportRequest{Cwd: dir})
	if err != nil || filepath.Dir(p) != dir || !strings.HasPrefix(filepath.Base(p), "agentd-session-") {
		t.Fatalf("default export path %q, %v", p, err)
	}
	if p, err = h.s.ExportHTMLFile(session.ExportRequest{Cwd: dir, Path: "out.html"}); err != nil || p != filepath.Join(dir, "out.html") {
		t.Fatalf("relative export path %q, %v", p, err)
	}
	if b, _ := os.ReadFile(p); !strings.Contains(string(b), "<html") {
		t.Fatalf("export is not HTML: %.100s", b)
	}
	if _, err := h.s.ExportHTMLFile(session.ExportRequest{Cwd: dir, Path: filepath.Join(dir, "missing", "x.html")}); err == nil || !strings.Contains(err.Error(), "cannot write") {
		t.Fatalf("export into a missing directory: %v", err)
	}
}

// A model or thinking level change the session file cannot record is not
// made: the session keeps what it had, and says why.
func TestSettingsChangeNotRecordedIsNotMade(t *testing.T) {
	h := newHarness(t, func(c *session.Config) { c.Model.Reasoning = true })
	h.srv.Enqueue(wiremock.Script{Text: []string{"hi"}})
	h.prompt("first")
	h.wait()
	path := h.s.File()
	cfg := h.cfg
	cfg.Open = path
	s, err := session.New(cfg) // loaded: the file is no longer held open
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := os.Rename(path, path+".aside"); err != nil {
		t.Fatal(err)
	}
	// A directory in the file's place: no one, root included, can
	// append to it.
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	model, thinking := s.Model(), s.Thinking()
	other := *model
	other.ID = "other-model"
	if err := s.SetModel(&other); err == nil {
		t.Error("SetModel succeeded with an unwritable session file")
	}
	if got, err := s.SetThinking(llm.ThinkingHigh); err == nil || got != thinking {
		t.Errorf("SetThinking = %q, %v; want %q and an error", got, err, thinking)
	}
	if s.Model() != model || s.Thinking() != thinking {
		t.Errorf("after the refused changes: model %s, thinking %q; want %s, %q", s.Model().ID, s.Thinking(), model.ID, thinking)
	}
}
