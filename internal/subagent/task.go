package subagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/tool"
)

// progressEvery is the least time between two progress updates.
const progressEvery = 200 * time.Millisecond

// ToolName is the task tool's name, as opencode's.
const ToolName = "task"

// CustomSubagent is the custom entry a child's transcript records what it
// is with (type, depth, parent), so that it keeps its depth when it is
// loaded again.
const CustomSubagent = "agentd.subagent"

// Default bounds.
const (
	// DefaultMaxDepth: a session a client made may start children, and
	// they grandchildren, no deeper.
	DefaultMaxDepth = 2
	// DefaultMaxConcurrent: children of one session running at once.
	DefaultMaxConcurrent = 4
)

// Request is what the task tool asks its host to start.
type Request struct {
	Type   *Type
	Parent *session.Session
	// Tools are the tools the child may have: the type's that the
	// parent may call now.
	Tools []string
	// Sandbox is the type's mode ("" for none); the host runs the child
	// in the stricter of it and the parent's.
	Sandbox sandbox.Mode
	// Depth is the child's depth (1 for a child of a top-level session).
	Depth int
	// Description is the model's short name for the job.
	Description string
}

// Child is a session started for a task, as its host made it.
type Child interface {
	// ID is the id clients know the child by (agentd serve's session id,
	// else its transcript's id).
	ID() string
	Session() *session.Session
	// Release is called once the task is over: a host that keeps the
	// child for its clients keeps it; one that does not closes it.
	Release()
}

// Spawner starts a child session. Its errors are shown to the model.
type Spawner func(ctx context.Context, r Request) (Child, error)

// Options configure a task tool.
type Options struct {
	Catalog *Catalog
	// Depth is the depth of the session the tool belongs to (0: one a
	// client made); MaxDepth the deepest a child may be.
	Depth    int
	MaxDepth int
	// MaxConcurrent bounds this session's children running at once.
	MaxConcurrent int
	Spawn         Spawner
}

// Tool is the task tool of one session.
type Tool struct {
	opt     Options
	parent  atomic.Pointer[session.Session]
	mu      sync.Mutex
	running int
}

// New makes a task tool; Bind gives it its session.
func New(o Options) *Tool {
	if o.MaxDepth <= 0 {
		o.MaxDepth = DefaultMaxDepth
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if o.Catalog == nil {
		o.Catalog = NewCatalog(Builtins()...)
	}
	return &Tool{opt: o}
}

// Bind gives the tool the session it works for, once it is made.
func (t *Tool) Bind(s *session.Session) { t.parent.Store(s) }

// Catalog is the types the tool offers.
func (t *Tool) Catalog() *Catalog { return t.opt.Catalog }

// Spec implements tool.Tool.
func (t *Tool) Spec() llm.Tool {
	var b strings.Builder
	b.WriteString("Hand a self-contained job to a subagent: a new agent with its own context that does it and returns its final message as this tool's result. ")
	b.WriteString("Use it for searches and investigations whose steps you do not need to see, or for independent pieces of work; several calls in one turn run at once. ")
	b.WriteString("The subagent sees nothing of this conversation: give it everything it needs in prompt, and say what it should report back. ")
	fmt.Fprintf(&b, "At most %d run at once.\n\nAgent types (subagent_type):\n", t.opt.MaxConcurrent)
	for _, ty := range t.opt.Catalog.Types() {
		fmt.Fprintf(&b, "- %s: %s\n", ty.Name, ty.Description)
	}
	return llm.Tool{
		Name:        ToolName,
		Description: b.String(),
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"description":{"type":"string","description":"A short (3-5 words) name for the job"},` +
			`"prompt":{"type":"string","description":"The job, complete and self-contained"},` +
			`"subagent_type":{"type":"string","description":"The agent type to use"}},` +
			`"required":["description","prompt","subagent_type"],"additionalProperties":false}`),
	}
}

type args struct {
	Description string `json:"description"`
	Prompt      string `json:"prompt"`
	Type        string `json:"subagent_type"`
}

// parseArgs reads a call's arguments. Anything but the three fields is
// refused: nothing a model writes here chooses tools, sandbox or model.
func parseArgs(raw json.RawMessage) (args, error) {
	var a args
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return a, fmt.Errorf("task: bad arguments: %v (want description, prompt and subagent_type, all strings)", err)
	}
	if strings.TrimSpace(a.Prompt) == "" {
		return a, errors.New("task: prompt is empty; give the subagent its job")
	}
	if a.Type == "" {
		return a, errors.New("task: subagent_type is empty")
	}
	if len(a.Description) > 200 {
		a.Description = clip(a.Description, 200)
	}
	return a, nil
}

// Details are what a task's results tell clients: which session does the
// job (to watch it) and how it went. Usage is the child's spending, which
// the parent's stats count (session.Stats).
type Details struct {
	SessionID   string    `json:"sessionId"`
	SessionFile string    `json:"sessionFile,omitempty"`
	Agent       string    `json:"agent"`
	Description string    `json:"description,omitempty"`
	Status      string    `json:"status"` // running, waiting, completed, failed, cancelled
	Turns       int       `json:"turns"`
	ToolCalls   int       `json:"toolCalls"`
	Activity    []string  `json:"activity,omitempty"`
	Usage       llm.Usage `json:"usage"`
}

// record is the CustomSubagent entry.
type record struct {
	Agent         string `json:"agent"`
	Depth         int    `json:"depth"`
	ParentSession string `json:"parentSession,omitempty"`
	Description   string `json:"description,omitempty"`
}

// depth is the depth of the tool's session: the one it was built with,
// or the one its transcript records (a child loaded again).
func (t *Tool) depth(s *session.Session) int {
	d := t.opt.Depth
	if raw, ok := s.Custom(CustomSubagent); ok {
		var r record
		if json.Unmarshal(raw, &r) == nil && r.Depth > d {
			d = r.Depth
		}
	}
	return d
}

func (t *Tool) acquire() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.running >= t.opt.MaxConcurrent {
		return false
	}
	t.running++
	return true
}

func (t *Tool) release() {
	t.mu.Lock()
	t.running--
	t.mu.Unlock()
}

// Execute implements tool.Tool: it starts the child, streams its progress
// as partial results, relays its questions to the parent's clients, and
// returns its final message. Cancelling ctx (the parent's run aborted or
// interrupted, its session closed) aborts the child.
func (t *Tool) Execute(ctx context.Context, call tool.Call, update func(tool.Result)) tool.Result {
	a, err := parseArgs(call.Args)
	if err != nil {
		return tool.Errorf("%s", err.Error())
	}
	ty, ok := t.opt.Catalog.Get(a.Type)
	if !ok {
		return tool.Errorf("task: unknown subagent_type %q; the types are %s", a.Type, strings.Join(t.opt.Catalog.Names(), ", "))
	}
	parent := t.parent.Load()
	if parent == nil {
		return tool.Errorf("task: this session cannot start subagents")
	}
	depth := t.depth(parent)
	if depth+1 > t.opt.MaxDepth {
		return tool.Errorf("task: subagent depth limit reached: this session is %d level(s) below the one a person started, and subagents may nest %d deep; do this job yourself", depth, t.opt.MaxDepth)
	}
	if !t.acquire() {
		return tool.Errorf("task: %d subagents are already running for this session, the most allowed at once; wait for one to finish, or do this job yourself", t.opt.MaxConcurrent)
	}
	defer t.release()
	if t.opt.Spawn == nil {
		return tool.Errorf("task: this session cannot start subagents")
	}
	tools, sb := ty.Allowed(parent.ToolNames()), ty.Sandbox
	// A parent in a read-only mode (plan) gets no child that writes:
	// the child has only the tools the parent's mode allows (never write
	// or edit), runs in the read-only sandbox, and is put in the parent's
	// mode before it starts (run), so its bash is the read-only one too.
	pm := parent.Mode()
	if pm.ReadOnly {
		tools = slices.DeleteFunc(tools, func(n string) bool { return !pm.Allows(n) })
		sb = sandbox.ReadOnly
	}
	child, err := t.opt.Spawn(ctx, Request{
		Type: ty, Parent: parent, Tools: tools, Sandbox: sb,
		Depth: depth + 1, Description: a.Description,
	})
	if err != nil {
		msg := err.Error()
		if fe := fault.As(err); fe != nil {
			msg = fe.Message
		}
		return tool.Errorf("task: could not start a %s subagent: %s", ty.Name, msg)
	}
	defer child.Release()
	return t.run(ctx, parent, child, ty, a, depth+1, update)
}

// run drives one child to the end of its run.
func (t *Tool) run(ctx context.Context, parent *session.Session, child Child, ty *Type, a args, depth int, update func(tool.Result)) tool.Result {
	cs := child.Session()
	fail := func(err error) tool.Result {
		return tool.Errorf("task: could not start the %s subagent: %v", ty.Name, err)
	}
	// What binds the parent binds the child: a parent whose every call
	// waits for a person has a child whose every call does too.
	if parent.ConfirmAll() {
		if err := cs.SetConfirmAll(true); err != nil {
			return fail(err)
		}
	}
	// ... and a parent that may change nothing has a child that may
	// not either: the child is in the parent's read-only mode (recorded,
	// so it stays in it when it is loaded again).
	if pm := parent.Mode(); pm.ReadOnly {
		if err := cs.SetMode(pm.Name); err != nil {
			return fail(err)
		}
	}
	if err := cs.SaveCustom(CustomSubagent, record{Agent: ty.Name, Depth: depth, ParentSession: parent.File(), Description: a.Description}); err != nil {
		return fail(err)
	}
	// The enabled tools, recorded: a child loaded again keeps them.
	if err := cs.SetTools(cs.AvailableTools()); err != nil {
		return fail(err)
	}
	w := newWatch(child.ID(), cs.File(), ty.Name, a.Description)
	relays := &relay{parent: parent, child: cs, label: ty.Name}
	relayCtx, stopRelays := context.WithCancel(ctx)
	unsub := cs.Subscribe(func(ev session.Event) {
		w.observe(ev)
		relays.observe(relayCtx, ev)
	})
	defer func() {
		unsub()
		stopRelays()
		relays.wait()
	}()
	// Questions the child asked before the subscription (none in
	// practice: it has not run yet) are relayed too.
	for _, r := range cs.Interactions() {
		relays.start(relayCtx, r)
	}
	if err := cs.Prompt(session.UserMessage(a.Prompt, nil), session.BehaviorNone); err != nil {
		return fail(err)
	}
	if update != nil {
		update(w.result())
	}
	// Updates go out at most every progressEvery: a child streaming
	// tokens changes its progress far more often than anyone reads it.
	last := time.Now()
	var tick <-chan time.Time
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	send := func() {
		if update != nil {
			update(w.result())
		}
		last = time.Now()
	}
	aborted := false
wait:
	for {
		select {
		case <-w.changed:
			if wait := progressEvery - time.Since(last); wait > 0 {
				if tick == nil {
					timer = time.NewTimer(wait)
					tick = timer.C
				}
				continue
			}
			send()
		case <-tick:
			tick = nil
			send()
		case <-w.done:
			break wait
		case <-ctx.Done():
			aborted = true
			cs.Abort()
			break wait
		}
	}
	// The run is over (Abort returns once it has ended).
	_ = cs.Wait(context.WithoutCancel(ctx))
	return t.final(cs, w, ty, aborted || cs.LastOutcome() == session.OutcomeCancelled)
}

// final is the tool's result: the child's last message, and its usage.
func (t *Tool) final(cs *session.Session, w *watch, ty *Type, cancelled bool) tool.Result {
	st := cs.Stats()
	d := w.details()
	d.Usage = st.Tokens
	d.Activity = nil
	d.Status = string(cs.LastOutcome())
	text, _ := cs.LastAssistantText()
	switch {
	case cancelled:
		d.Status = string(session.OutcomeCancelled)
		msg := fmt.Sprintf("task: the %s subagent was stopped before it finished (session %s).", ty.Name, d.SessionID)
		if text != "" {
			msg += " Its last message:\n\n" + text
		}
		return tool.Result{Content: []llm.Content{llm.Text(msg)}, Details: d, IsError: true}
	case cs.LastOutcome() == session.OutcomeFailed:
		reason := lastError(cs)
		return tool.Result{Content: []llm.Content{llm.Text(fmt.Sprintf("task: the %s subagent failed (session %s): %s", ty.Name, d.SessionID, reason))}, Details: d, IsError: true}
	}
	if text == "" {
		text = "(the subagent finished without a final message)"
	}
	return tool.Result{Content: []llm.Content{llm.Text(text)}, Details: d}
}

// lastError is the error the child's last answer ended with.
func lastError(cs *session.Session) string {
	msgs := cs.Messages()
	for i := len(msgs) - 1; i >= 0; i-- {
		if m := msgs[i]; m.Role == llm.RoleAssistant {
			if m.ErrorMessage != "" {
				return m.ErrorMessage
			}
			break
		}
	}
	return "its run failed"
}

// clip shortens s to n bytes at a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
