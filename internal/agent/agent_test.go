package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/tool"
)

// sleepTool waits for its "ms" argument (or until cancelled) and echoes
// its "say" argument; it records how many calls run at once.
type sleepTool struct {
	name    string
	running atomic.Int32
	maxRun  atomic.Int32
}

func (t *sleepTool) Spec() llm.Tool {
	return llm.Tool{Name: t.name, Description: "sleeps", Parameters: json.RawMessage(`{"type":"object","properties":{"ms":{"type":"number"},"say":{"type":"string"}}}`)}
}

func (t *sleepTool) Execute(ctx context.Context, call tool.Call, update func(tool.Result)) tool.Result {
	var args struct {
		MS  int    `json:"ms"`
		Say string `json:"say"`
	}
	if err := json.Unmarshal(call.Args, &args); err != nil {
		return tool.Errorf("bad args: %v", err)
	}
	n := t.running.Add(1)
	defer t.running.Add(-1)
	for {
		m := t.maxRun.Load()
		if n <= m || t.maxRun.CompareAndSwap(m, n) {
			break
		}
	}
	if update != nil {
		update(tool.TextResult("working", nil))
	}
	select {
	case <-time.After(time.Duration(args.MS) * time.Millisecond):
		return tool.TextResult("said "+args.Say, map[string]any{"ms": args.MS})
	case <-ctx.Done():
		return tool.Errorf("aborted")
	}
}

// gateTool blocks each call until the test releases it by id, and tells
// the test when each call has started: tests that care in which order
// tools end say so with release, not with sleeps a busy machine stretches.
type gateTool struct {
	started chan string
	running atomic.Int32
	maxRun  atomic.Int32
	mu      sync.Mutex
	gates   map[string]chan struct{}
}

func newGateTool() *gateTool {
	return &gateTool{started: make(chan string, 16), gates: map[string]chan struct{}{}}
}

func (g *gateTool) gate(id string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.gates[id]
	if !ok {
		c = make(chan struct{})
		g.gates[id] = c
	}
	return c
}

// release lets call id finish.
func (g *gateTool) release(id string) { close(g.gate(id)) }

// waitStarted waits until n calls are inside Execute at once.
func (g *gateTool) waitStarted(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-g.started:
		case <-time.After(time.Minute):
			t.Fatalf("only %d of %d calls started", i, n)
		}
	}
}

func (g *gateTool) Spec() llm.Tool {
	return llm.Tool{Name: "gate", Description: "waits to be released", Parameters: json.RawMessage(`{"type":"object","properties":{"ms":{"type":"number"},"say":{"type":"string"}}}`)}
}

func (g *gateTool) Execute(ctx context.Context, call tool.Call, update func(tool.Result)) tool.Result {
	var args struct {
		MS  int    `json:"ms"`
		Say string `json:"say"`
	}
	if err := json.Unmarshal(call.Args, &args); err != nil {
		return tool.Errorf("bad args: %v", err)
	}
	n := g.running.Add(1)
	defer g.running.Add(-1)
	for {
		m := g.maxRun.Load()
		if n <= m || g.maxRun.CompareAndSwap(m, n) {
			break
		}
	}
	gate := g.gate(call.ID)
	g.started <- call.ID
	select {
	case <-gate:
		return tool.TextResult("said "+args.Say, map[string]any{"ms": args.MS})
	case <-ctx.Done():
		return tool.Errorf("aborted")
	}
}

type recorder struct {
	mu     sync.Mutex
	events []agent.Event
}

func (r *recorder) emit(ev agent.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Message != nil {
		ev.Message = ev.Message.Clone()
	}
	r.events = append(r.events, ev)
}

func (r *recorder) types() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, ev := range r.events {
		s := string(ev.Type)
		if ev.Type == agent.EventMessageStart || ev.Type == agent.EventMessageEnd {
			s += ":" + string(ev.Message.Role)
		}
		if ev.Type == agent.EventToolExecutionStart || ev.Type == agent.EventToolExecutionEnd {
			s += ":" + ev.ToolCallID
		}
		if ev.Type == agent.EventMessageUpdate || ev.Type == agent.EventToolExecutionUpdate || ev.Type == agent.EventQueueUpdate {
			continue // counted separately; their number depends on chunking
		}
		out = append(out, s)
	}
	return out
}

func (r *recorder) waitFor(t *testing.T, pred func(agent.Event) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		for _, ev := range r.events {
			if pred(ev) {
				r.mu.Unlock()
				return
			}
		}
		r.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("event never came")
}

func newAgent(p *faux.Provider, tools ...tool.Tool) (*agent.Agent, *recorder) {
	rec := &recorder{}
	a := agent.New(agent.Config{Model: faux.Model(), Stream: p.Stream, Tools: tools, SystemPrompt: "be brief"}, rec.emit)
	return a, rec
}

func user(text string) *llm.Message {
	return &llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text(text)}}
}

func TestPromptAnswerEventOrder(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := faux.New(faux.Options{})
	p.Push(faux.Response{Text: "Hello there"})
	a, rec := newAgent(p)
	added, err := a.Prompt(context.Background(), user("hi"))
	if err != nil {
		t.Fatal(err)
	}
	want := "agent_start turn_start message_start:user message_end:user message_start:assistant message_end:assistant turn_end agent_end"
	if got := strings.Join(rec.types(), " "); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	if len(added) != 2 || added[1].TextContent() != "Hello there" || len(a.Messages()) != 2 {
		t.Fatalf("added %v", added)
	}
	if req := p.Requests(); len(req) != 1 || req[0].SystemPrompt != "be brief" || req[0].Messages[0].TextContent() != "hi" {
		t.Fatalf("request %+v", req)
	}
}

func TestToolCallsRunInParallelResultsInCallOrder(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := faux.New(faux.Options{})
	p.Push(faux.Response{ToolCalls: []faux.ToolCall{
		{ID: "a", Name: "gate", Args: `{"ms":150,"say":"first"}`},
		{ID: "b", Name: "gate", Args: `{"ms":10,"say":"second"}`},
		{ID: "c", Name: "gate", Args: `{"ms":80,"say":"third"}`},
	}}, faux.Response{Text: "done"})
	st := newGateTool()
	a, rec := newAgent(p, st)
	type result struct {
		added []*llm.Message
		err   error
	}
	done := make(chan result, 1)
	go func() {
		added, err := a.Prompt(context.Background(), user("go"))
		done <- result{added, err}
	}()
	// All three are inside the tool at once before any may finish: that
	// is what running in parallel means. Then they finish b, c, a.
	st.waitStarted(t, 3)
	for _, id := range []string{"b", "c", "a"} {
		st.release(id)
		rec.waitFor(t, func(ev agent.Event) bool {
			return ev.Type == agent.EventToolExecutionEnd && ev.ToolCallID == id
		})
	}
	r := <-done
	added, err := r.added, r.err
	if err != nil {
		t.Fatal(err)
	}
	if st.maxRun.Load() != 3 {
		t.Fatalf("tools did not run in parallel: max %d at once", st.maxRun.Load())
	}
	var results []string
	for _, m := range added {
		if m.Role == llm.RoleToolResult {
			results = append(results, m.ToolCallID+"="+m.TextContent())
		}
	}
	if strings.Join(results, ",") != "a=said first,b=said second,c=said third" {
		t.Fatalf("results %v", results)
	}
	types := strings.Join(rec.types(), " ")
	// Ends are emitted as tools finish; result messages in call order.
	if !strings.Contains(types, "tool_execution_start:a tool_execution_start:b tool_execution_start:c tool_execution_end:b tool_execution_end:c tool_execution_end:a message_start:toolResult message_end:toolResult") {
		t.Fatalf("events %s", types)
	}
	if added[len(added)-1].TextContent() != "done" || strings.Count(types, "turn_start") != 2 {
		t.Fatalf("second turn missing: %s", types)
	}
	// The second request carries the results in call order.
	req := p.Requests()[1]
	var ids []string
	for _, m := range req.Messages {
		if m.Role == llm.RoleToolResult {
			ids = append(ids, m.ToolCallID)
		}
	}
	if strings.Join(ids, "") != "abc" {
		t.Fatalf("request tool results %v", ids)
	}
	var details string
	for _, m := range added {
		if m.ToolCallID == "a" {
			details = string(m.Details)
		}
	}
	if details != `{"ms":150}` {
		t.Fatalf("details %s", details)
	}
}

func TestSequentialAndUnknownTool(t *testing.T) {
	p := faux.New(faux.Options{})
	p.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "a", Name: "sleep", Args: `{"ms":20}`}, {ID: "b", Name: "sleep", Args: `{"ms":20}`}, {ID: "x", Name: "nope"}}}, faux.Response{Text: "ok"})
	st := &sleepTool{name: "sleep"}
	a, _ := newAgent(p, st)
	a.Update(func(c *agent.Config) { c.Sequential = true })
	added, _ := a.Prompt(context.Background(), user("go"))
	if st.maxRun.Load() != 1 {
		t.Fatalf("sequential ran %d at once", st.maxRun.Load())
	}
	for _, m := range added {
		if m.ToolCallID == "x" && (!m.IsError || m.TextContent() != "Tool nope not found") {
			t.Fatalf("unknown tool result %+v", m)
		}
	}
}

func TestBeforeToolCallDecisions(t *testing.T) {
	p := faux.New(faux.Options{})
	p.Push(faux.Response{ToolCalls: []faux.ToolCall{
		{ID: "run", Name: "sleep", Args: `{"say":"orig"}`},
		{ID: "edit", Name: "sleep", Args: `{"say":"orig"}`},
		{ID: "deny", Name: "sleep", Args: `{"say":"orig"}`},
	}}, faux.Response{Text: "ok"})
	a, _ := newAgent(p, &sleepTool{name: "sleep"})
	a.Update(func(c *agent.Config) {
		c.BeforeToolCall = func(ctx context.Context, call tool.Call) agent.ToolDecision {
			switch call.ID {
			case "edit":
				return agent.ToolDecision{Run: true, Args: json.RawMessage(`{"say":"edited"}`)}
			case "deny":
				r := tool.Errorf("The user rejected this tool call: not now")
				return agent.ToolDecision{Result: &r}
			}
			return agent.ToolDecision{Run: true}
		}
	})
	added, _ := a.Prompt(context.Background(), user("go"))
	got := map[string]string{}
	for _, m := range added {
		if m.Role == llm.RoleToolResult {
			got[m.ToolCallID] = fmt.Sprintf("%v %s", m.IsError, m.TextContent())
		}
	}
	want := map[string]string{"run": "false said orig", "edit": "false said edited", "deny": "true The user rejected this tool call: not now"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
}

func TestSteerAndFollowUp(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := faux.New(faux.Options{})
	p.Push(
		faux.Response{ToolCalls: []faux.ToolCall{{ID: "a", Name: "gate", Args: `{}`}}},
		faux.Response{Text: "after steer"},
		faux.Response{Text: "after follow-up"},
	)
	gt := newGateTool()
	a, rec := newAgent(p, gt)
	done := make(chan []*llm.Message)
	go func() {
		added, _ := a.Prompt(context.Background(), user("start"))
		done <- added
	}()
	rec.waitFor(t, func(ev agent.Event) bool { return ev.Type == agent.EventToolExecutionStart })
	a.FollowUp(user("follow"))
	a.Steer(user("steer"))
	if _, err := a.Prompt(context.Background(), user("again")); err != agent.ErrBusy {
		t.Fatalf("second prompt: %v", err)
	}
	// The tool ends only now, so both messages were queued while it ran.
	gt.release("a")
	added := <-done
	var seq []string
	for _, m := range added {
		seq = append(seq, string(m.Role)[:1]+":"+m.TextContent())
	}
	want := "u:start a: t:said  u:steer a:after steer u:follow a:after follow-up"
	if got := strings.Join(seq, " "); got != want {
		t.Fatalf("conversation\n got %s\nwant %s", got, want)
	}
	if a.PendingCount() != 0 {
		t.Fatal("queues not drained")
	}
	queueUpdates := 0
	for _, ev := range rec.events {
		if ev.Type == agent.EventQueueUpdate {
			queueUpdates++
		}
	}
	if queueUpdates != 4 {
		t.Fatalf("queue_update events %d, want 4 (two queued, two delivered)", queueUpdates)
	}
}

// The subtests run in synctest bubbles: the model's 50ms chunks and the
// test's polling are the bubble's clock, so the abort always lands long
// before the last word however loaded the machine is.
func TestAbortWhileStreamingAndWhileToolRuns(t *testing.T) {
	defer goleak.VerifyNone(t)
	t.Run("streaming", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := faux.New(faux.Options{ChunkDelay: 50 * time.Millisecond})
			p.Push(faux.Response{Text: "one two three four five six seven eight nine ten"})
			a, rec := newAgent(p)
			done := make(chan []*llm.Message)
			go func() { added, _ := a.Prompt(context.Background(), user("talk")); done <- added }()
			rec.waitFor(t, func(ev agent.Event) bool { return ev.Type == agent.EventMessageUpdate })
			a.Abort()
			added := <-done
			last := added[len(added)-1]
			if last.StopReason != llm.StopAborted || last.TextContent() == "" || strings.Contains(last.TextContent(), "ten") {
				t.Fatalf("last %+v", last)
			}
			if a.Running() {
				t.Fatal("still running after Abort returned")
			}
		})
	})
	t.Run("tool", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := faux.New(faux.Options{})
			p.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "a", Name: "sleep", Args: `{"ms":60000}`}}}, faux.Response{Text: "never"})
			a, rec := newAgent(p, &sleepTool{name: "sleep"})
			done := make(chan []*llm.Message)
			go func() { added, _ := a.Prompt(context.Background(), user("wait")); done <- added }()
			rec.waitFor(t, func(ev agent.Event) bool { return ev.Type == agent.EventToolExecutionUpdate })
			a.Abort()
			added := <-done
			last := added[len(added)-1]
			if last.Role != llm.RoleAssistant || last.StopReason != llm.StopAborted {
				t.Fatalf("run must end with an aborted assistant message, got %+v", last)
			}
			tr := added[len(added)-2]
			if tr.Role != llm.RoleToolResult || !tr.IsError {
				t.Fatalf("tool result %+v", tr)
			}
		})
	})
}

func TestContinue(t *testing.T) {
	p := faux.New(faux.Options{})
	a, _ := newAgent(p)
	if _, err := a.Continue(context.Background()); err != agent.ErrNothingToContinue {
		t.Fatalf("empty continue: %v", err)
	}
	p.Push(faux.Response{Text: "continued"})
	_ = a.SetMessages([]*llm.Message{user("question")})
	added, err := a.Continue(context.Background())
	if err != nil || len(added) != 1 || added[0].TextContent() != "continued" {
		t.Fatalf("%v %v", added, err)
	}
}

func TestToLLM(t *testing.T) {
	code := 2
	ms := []*llm.Message{
		{Role: llm.RoleBashExecution, Command: "make", Output: "boom", ExitCode: &code},
		{Role: llm.RoleBashExecution, Command: "secret", ExcludeFromContext: true},
		{Role: llm.RoleCompactionSummary, Summary: "we did X"},
		{Role: llm.RoleBranchSummary, Summary: "tried Y"},
		{Role: llm.RoleCustom, Content: []llm.Content{llm.Text("note")}},
	}
	out := agent.ToLLM(ms)
	if len(out) != 4 {
		t.Fatalf("got %d messages", len(out))
	}
	for _, m := range out {
		if m.Role != llm.RoleUser {
			t.Fatalf("role %s", m.Role)
		}
	}
	if !strings.Contains(out[0].TextContent(), "make") || !strings.Contains(out[0].TextContent(), "exited with code 2") ||
		!strings.Contains(out[1].TextContent(), "we did X") || !strings.Contains(out[2].TextContent(), "tried Y") || out[3].TextContent() != "note" {
		t.Fatalf("%+v", out)
	}
}
