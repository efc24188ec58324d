// Package session is one agent conversation as clients see it: the agent
// loop plus its transcript on disk (pi's JSONL v3 files), a state machine,
// pending interactions (tool approvals and questions), auto-retry and
// compaction, stats, branching and export. Every change is an event with a
// per-session monotonic seq; a bounded log of recent events lets a
// subscriber resume after the last seq it saw.
package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/checkpoint"
	"github.com/agentd-dev/agentd/internal/compaction"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/instructions"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/modes"
	"github.com/agentd-dev/agentd/internal/todo"
	"github.com/agentd-dev/agentd/internal/tool"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// RetrySettings configure automatic retries of transient model errors.
type RetrySettings struct {
	Enabled    bool
	MaxRetries int           // retries after the first attempt (default 3)
	BaseDelay  time.Duration // first delay, doubled per retry (default 2s)
	// MaxDelay caps a delay, including one the provider asked for with
	// retry-after (default 60s).
	MaxDelay time.Duration
}

// DefaultRetry is pi's retry policy: 3 retries at 2 s, 4 s, 8 s.
func DefaultRetry() RetrySettings {
	return RetrySettings{Enabled: true, MaxRetries: 3, BaseDelay: 2 * time.Second, MaxDelay: 60 * time.Second}
}

// Config is what a session is made from. Stream and the model are
// required; everything else has a default.
type Config struct {
	// Cwd is the working directory tools act in.
	Cwd string
	// SessionsDir is where session files are created. Empty keeps the
	// session in memory only (pi's --no-session).
	SessionsDir string
	// Open, when set, loads this session file instead of creating one.
	Open string

	Model        *llm.Model
	Thinking     llm.ThinkingLevel
	SystemPrompt string
	// Instructions are the files SystemPrompt was built from (AGENTS.md,
	// SYSTEM.md, ...), for the faces to show.
	Instructions []instructions.File
	// Slash expands the templates and skill commands a prompt starts
	// with and runs built-in commands (package commands); nil leaves
	// prompts as they are.
	Slash Slash
	// Stream starts a model request for any model (the caller maps the
	// model's API to its provider).
	Stream agent.StreamFunc
	// Options resolves per-request options (credentials) for a model.
	Options func(ctx context.Context, m *llm.Model) (llm.StreamOptions, error)
	// ResolveModel finds a model by provider and id, for sessions whose
	// transcript names a model (load, switch). Optional.
	ResolveModel func(provider, id string) (*llm.Model, bool)
	// Tools are the tools besides ask_user and todo, which the session
	// adds itself (they need its interaction broker and todo list).
	Tools []tool.Tool
	// Modes are the modes the session may switch between (SetMode); nil
	// is the built-in ones. Mode is the mode of a session whose
	// transcript records none ("" for modes.Default).
	Modes *modes.Set
	Mode  string
	// ReadOnlyBash is bash confined to the read-only sandbox, which a
	// read-only mode runs the model's commands in; nil leaves bash out
	// of read-only modes (the kernel cannot confine it here).
	ReadOnlyBash tool.Tool
	// BashEnv is where commands the user runs directly (Bash) execute,
	// and what the permission gate resolves tool paths against (its Cwd
	// and Home); normally the same Env the tools were built with. An
	// empty Cwd is the session's Cwd. The session owns its Scope (one is
	// made when it is nil) and closes it in Close, which ends the
	// processes and deletes the output files the tools and commands
	// sharing it left behind.
	BashEnv tool.Env
	// BashTimeout bounds a command the user runs directly (Bash): 0
	// means DefaultBashTimeout, a negative value no limit.
	BashTimeout time.Duration
	// Policy is the permission policy for tool calls (default: allow
	// everything, as pi).
	Policy interaction.Policy
	// ConfirmAll is the confirmation mode of a session whose transcript
	// does not record one (see SetConfirmAll).
	ConfirmAll bool
	// InteractionTimeout bounds how long a pending interaction waits for
	// an answer; 0 waits forever.
	InteractionTimeout time.Duration
	// ApprovalTimeout is the gate's behaviour when an approval times out.
	Gate interaction.GateOptions

	Retry        RetrySettings
	Compaction   compaction.Settings
	SteeringMode agent.QueueMode
	FollowUpMode agent.QueueMode
	// EventLogSize bounds the event log (default 4096 events).
	EventLogSize int
	// FirstSeq is the seq the session starts from: its first event gets
	// FirstSeq+1. A host that reloads a session after a restart passes
	// a seq at or above any the session used before, so seqs never go
	// backwards and a client's old cursor is never mistaken for a new one.
	FirstSeq uint64
	// ReserveSeq, when set, is called before the session emits an event
	// whose seq is above the last limit it returned (the first call gets
	// FirstSeq+1); it records durably that seqs up to the returned limit
	// may be in use, so a restart after a crash can start above them.
	ReserveSeq func(next uint64) (limit uint64)
	Sync       transcript.SyncPolicy
	Logger     *slog.Logger
	// TranscriptOptions go with Sync to every transcript file the session
	// creates or opens (its first, a new_session's, a switch's; forks and
	// clones inherit them): in a cluster, transcript.WithMirror with the
	// lease's mirror, so the session's file is also in JetStream.
	TranscriptOptions []transcript.Option

	// EventLogBytes bounds the event log's estimated size (default
	// DefaultEventLogBytes, 16 MiB) besides EventLogSize.
	EventLogBytes int
	// MaxTurns, MaxSameToolFailures, MaxQueued and MaxQueuedBytes are
	// the agent's limits (see agent.Config: 0 is the default, negative
	// none).
	MaxTurns            int
	MaxSameToolFailures int
	MaxQueued           int
	MaxQueuedBytes      int

	// CheckpointDir, when set, keeps the workspace's checkpoints (one
	// store per session id under it; see package checkpoint): taken
	// before a turn's first call of a tool that may change files, so a
	// turn can be diffed, reverted and the revert undone. Empty turns
	// checkpoints off.
	CheckpointDir    string
	CheckpointLimits checkpoint.Limits
}

// Errors callers branch on.
var (
	// ErrBusy is a prompt while a run is in progress without a
	// steer/followUp behaviour.
	ErrBusy = fault.New(fault.Busy, "Agent is already processing. Specify streamingBehavior ('steer' or 'followUp') to queue the message.")
	// ErrClosed is any operation on a closed session.
	ErrClosed = fault.New(fault.NotFound, "session is closed")
)

// Session is one conversation. It is safe for concurrent use.
type Session struct {
	cfg    Config
	log    *slog.Logger
	agent  *agent.Agent
	broker *interaction.Broker
	gate   *interaction.Gate
	todos  *todo.List

	// emitMu orders events: seq assignment, the log and listener calls
	// happen under it, so every listener sees every event in seq order.
	// Lock order: the session's own code never emits holding mu (setState
	// and the rest release it first); it may emit holding parkMu or
	// settingsMu. Listeners run under it: they may take their own locks
	// and read the session (mu), and must not emit or subscribe.
	emitMu    sync.Mutex
	seq       uint64
	seqLimit  uint64 // seqs up to this were reserved (ReserveSeq)
	events    *eventLog
	listeners map[int]func(Event)
	nextLis   int
	progress  map[string]ToolProgress // running calls' latest output (toolprogress.go)

	// mu guards the fields below (and those marked s.mu). Lock order:
	// it is taken last of the session's locks: under parkMu or
	// settingsMu, and by listeners under emitMu; nothing of the session
	// is locked under it, and it is released before emitting.
	mu            sync.Mutex
	file          *transcript.File
	state         State
	thinking      llm.ThinkingLevel
	model         *llm.Model
	retry         RetrySettings
	compact       compaction.Settings
	lastErr       *llm.Error
	retryAttempt  int // the retry in progress, ended by the next answer that is not an error
	runCancel     func(cause error)
	runDone       chan struct{}
	lastOutcome   Outcome
	compactCancel context.CancelFunc
	pendingBash   []*llm.Message // user bash results recorded while a run was in progress
	bashCancel    context.CancelFunc
	closed        bool
	items         []item // the current context with entry ids, for compaction
	prevDetails   *compaction.Details
	wg            sync.WaitGroup

	// parkMu orders what settles the tool calls the conversation ends
	// with when no run executes them: answering one of their parked
	// requests (which starts the run), a step, a new message moving on,
	// an abort, a change of context. Lock order: outermost; mu and
	// emitMu are taken under it, never it under them.
	parkMu sync.Mutex
	// parked are the requests published for those calls (s.mu); a run
	// that starts takes them over as runParked, call id to request id.
	parked    []parkedCall
	runParked map[string]string
	unparking bool // settling parked calls: the caller sets the state (s.mu)
	// runAuto: the run in progress confirms its calls without asking
	// (a step's AutoConfirm).
	runAuto bool

	// settingsMu orders the durable settings entries, so the last one
	// written is the setting in force. Lock order: outermost, like
	// parkMu (the session's code does not nest the two); mu and emitMu are taken
	// under it.
	settingsMu  sync.Mutex
	confirmAll  bool               // s.mu
	savedGrants interaction.Grants // settingsMu
	toolNames   []string           // enabled tools, nil for all (s.mu)
	mode        modes.Mode         // the mode in force (s.mu)
	tools       []tool.Tool        // every tool the session has (s.mu once sources are added)
	sources     []*toolSource      // sources of tools added after New (s.mu)

	checkpoints checkpoints
	runEnd      runEnd // a run winding down after agent_end (s.mu)

	// detach: Close is stopping the run. What the stop makes of the tool
	// calls in progress is not recorded, so that they wait for a person
	// again when the session is loaded, as after a crash; once one result
	// is left out, nothing after it is recorded.
	detach, detachSkip bool
}

// parkedCall is a tool call the conversation ends with, waiting for a
// person under request id.
type parkedCall struct {
	id   string
	call tool.Call
}

// item is one message of the current context with its transcript entry.
type item struct {
	id  string
	msg *llm.Message
}

// New creates or opens a session.
func New(cfg Config) (*Session, error) {
	if cfg.Stream == nil {
		return nil, errors.New("session: no model stream function")
	}
	if cfg.Model == nil {
		return nil, errors.New("session: no model")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Retry == (RetrySettings{}) {
		cfg.Retry = DefaultRetry()
	}
	if cfg.Compaction == (compaction.Settings{}) {
		cfg.Compaction = compaction.DefaultSettings()
	}
	if cfg.Thinking == "" {
		cfg.Thinking = llm.ThinkingOff
	}
	if cfg.BashEnv.Cwd == "" {
		cfg.BashEnv.Cwd = cfg.Cwd
	}
	if cfg.BashEnv.Scope == nil {
		cfg.BashEnv.Scope = tool.NewScope()
	}
	s := &Session{
		cfg: cfg, log: cfg.Logger, events: newEventLog(cfg.EventLogSize, cfg.EventLogBytes, cfg.FirstSeq), listeners: map[int]func(Event){},
		seq: cfg.FirstSeq, seqLimit: cfg.FirstSeq,
		state: StateIdle, thinking: cfg.Thinking, model: cfg.Model, retry: cfg.Retry, compact: cfg.Compaction,
		confirmAll: cfg.ConfirmAll,
	}
	s.mode = s.initialMode()
	s.broker = interaction.NewBroker(interaction.BrokerOptions{Timeout: cfg.InteractionTimeout, OnEvent: s.onInteraction})
	gate, err := interaction.NewGate(cfg.Policy, s.broker, cfg.BashEnv, cfg.Gate)
	if err != nil {
		return nil, fmt.Errorf("session: permission policy: %w", err)
	}
	s.gate = gate
	s.todos = todo.NewList(s.onTodo)
	tools := append([]tool.Tool{}, cfg.Tools...)
	tools = append(tools, interaction.NewAskUserTool(s.broker, cfg.InteractionTimeout), todo.NewTool(s.todos))
	s.tools = tools
	s.agent = agent.New(agent.Config{
		Model: cfg.Model, Thinking: cfg.Thinking, SystemPrompt: s.systemPrompt(s.mode), Tools: s.modeTools(s.mode, tools),
		Stream: cfg.Stream, Options: cfg.Options, BeforeToolCall: s.beforeToolCall,
		SteeringMode: cfg.SteeringMode, FollowUpMode: cfg.FollowUpMode,
		MaxTurns: cfg.MaxTurns, MaxSameToolFailures: cfg.MaxSameToolFailures, MaxQueued: cfg.MaxQueued, MaxQueuedBytes: cfg.MaxQueuedBytes,
	}, s.onAgent)

	var f *transcript.File
	if cfg.Open != "" {
		if f, err = transcript.Open(cfg.Open, s.fileOptions()...); err != nil {
			return nil, fmt.Errorf("opening session %s: %w", cfg.Open, err)
		}
	} else if f, err = s.newFile(""); err != nil {
		return nil, err
	}
	if err := s.adopt(f); err != nil {
		f.Close()
		return nil, err
	}
	s.repark()
	return s, nil
}

// fileOptions are the options of every transcript file the session opens.
func (s *Session) fileOptions() []transcript.Option {
	return append([]transcript.Option{transcript.WithSync(s.cfg.Sync)}, s.cfg.TranscriptOptions...)
}

// newFile creates an empty transcript: on disk under SessionsDir, or in
// memory.
func (s *Session) newFile(parent string) (*transcript.File, error) {
	opts := s.fileOptions()
	if parent != "" {
		opts = append(opts, transcript.WithParentSession(parent))
	}
	if s.cfg.SessionsDir == "" {
		return transcript.NewMemory(s.cfg.Cwd, opts...), nil
	}
	f, err := transcript.Create(s.cfg.SessionsDir, s.cfg.Cwd, opts...)
	if err != nil {
		return nil, fmt.Errorf("creating session file: %w", err)
	}
	return f, nil
}

// adopt makes f the session's transcript and loads its context into the
// agent: messages, model and thinking level.
func (s *Session) adopt(f *transcript.File) error {
	c := f.Context(f.Leaf())
	items, msgs := contextItems(c)
	if err := s.agent.SetMessages(msgs); err != nil {
		return err
	}
	s.mu.Lock()
	old := s.file
	s.file = f
	s.items = items
	s.prevDetails = lastCompactionDetails(f)
	if c.Provider != "" && s.cfg.ResolveModel != nil {
		if m, ok := s.cfg.ResolveModel(c.Provider, c.ModelID); ok {
			s.model = m
		}
	}
	if f.Len() > 0 {
		s.thinking = c.ThinkingLevel
	}
	model, thinking := s.model, s.thinking
	s.mu.Unlock()
	s.agent.Update(func(ac *agent.Config) { ac.Model, ac.Thinking = model, thinking })
	s.loadSettings(f)
	if f.Len() == 0 {
		// A new transcript starts by recording what it runs with, as pi's
		// files do.
		if _, err := f.AppendModelChange(model.Provider, model.ID); err != nil {
			return err
		}
		if _, err := f.AppendThinkingLevelChange(thinking); err != nil {
			return err
		}
	}
	if old != nil && old != f {
		if err := old.Close(); err != nil {
			s.log.Warn("closing previous transcript", "path", old.Path(), "err", err)
		}
	}
	return nil
}

// lastCompactionDetails reads the file lists of the latest compaction on
// f's current branch, which the next compaction carries forward.
func lastCompactionDetails(f *transcript.File) *compaction.Details {
	path := f.Branch(f.Leaf())
	for i := len(path) - 1; i >= 0; i-- {
		if e := path[i]; e.Type == transcript.TypeCompaction {
			if e.FromHook || len(e.Details) == 0 {
				return nil
			}
			return compaction.ParseDetails(e.Details)
		}
	}
	return nil
}

// Subscribe calls fn for every event from now on, in seq order, on the
// goroutine that produced it; fn must not block (a face puts the event in
// its own bounded queue). The returned function unsubscribes.
func (s *Session) Subscribe(fn func(Event)) (unsubscribe func()) {
	s.emitMu.Lock()
	id := s.nextLis
	s.nextLis++
	s.listeners[id] = fn
	s.emitMu.Unlock()
	return func() {
		s.emitMu.Lock()
		delete(s.listeners, id)
		s.emitMu.Unlock()
	}
}

// SubscribeAfter atomically returns the logged events after seq and
// subscribes fn for the ones after those, so nothing is missed or seen
// twice. ok is false when the log no longer reaches back to seq.
func (s *Session) SubscribeAfter(seq uint64, fn func(Event)) (missed []Event, ok bool, unsubscribe func()) {
	s.emitMu.Lock()
	missed, ok = s.events.since(seq)
	id := s.nextLis
	s.nextLis++
	s.listeners[id] = fn
	s.emitMu.Unlock()
	return missed, ok, func() {
		s.emitMu.Lock()
		delete(s.listeners, id)
		s.emitMu.Unlock()
	}
}

// EventsSince returns the logged events after seq; ok is false when seq
// is older than the log reaches, or newer than the last event (a cursor
// from the future: another server's, or from before a crash lost events).
func (s *Session) EventsSince(seq uint64) ([]Event, bool) {
	s.emitMu.Lock()
	defer s.emitMu.Unlock()
	return s.events.since(seq)
}

// FirstSeq is the seq the session started from (Config.FirstSeq): its
// own events come after it, and its log holds none before it.
func (s *Session) FirstSeq() uint64 { return s.cfg.FirstSeq }

// Seq is the seq of the last event.
func (s *Session) Seq() uint64 {
	s.emitMu.Lock()
	defer s.emitMu.Unlock()
	return s.seq
}

func (s *Session) emit(ev Event) {
	s.emitMu.Lock()
	defer s.emitMu.Unlock()
	s.seq++
	if s.cfg.ReserveSeq != nil && s.seq > s.seqLimit {
		s.seqLimit = max(s.cfg.ReserveSeq(s.seq), s.seq)
	}
	ev.Seq = s.seq
	ev.Time = time.Now()
	s.events.add(ev)
	s.noteProgress(ev)
	for _, fn := range s.listeners {
		fn(ev)
	}
}

// setState moves the state machine and emits the transition.
func (s *Session) setState(st State, outcome Outcome) {
	s.mu.Lock()
	prev := s.state
	if prev == st && outcome == "" {
		s.mu.Unlock()
		return
	}
	s.state = st
	s.mu.Unlock()
	s.emit(Event{Type: EventStateChanged, State: st, Previous: prev, Outcome: outcome})
}

// Instructions are the files the session's system prompt was built
// from, in the order they appear in it.
func (s *Session) Instructions() []instructions.File {
	return slices.Clone(s.cfg.Instructions)
}

// State is the current state.
func (s *Session) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// onAgent persists and forwards agent events.
func (s *Session) onAgent(ev agent.Event) {
	if ev.Type == agent.EventMessageEnd {
		s.record(ev.Message)
		if ev.Message.Role == llm.RoleAssistant {
			s.mu.Lock()
			s.lastErr = ev.Err
			s.mu.Unlock()
		}
	}
	if ev.Type == agent.EventAgentEnd {
		s.setRunEnded(true) // before the client can read it
	}
	s.emit(Event{Type: EventType(ev.Type), Agent: &ev})
	// As pi, a retry ends when its answer ends, before turn_end and agent_end.
	if ev.Type == agent.EventMessageEnd && ev.Message.Role == llm.RoleAssistant && ev.Message.StopReason != llm.StopError {
		s.mu.Lock()
		attempt := s.retryAttempt
		s.retryAttempt = 0
		s.mu.Unlock()
		if attempt > 0 {
			s.emit(Event{Type: EventAutoRetryEnd, Success: true, Attempt: attempt})
		}
	}
}

// record appends a finished message to the transcript. A write failure
// is logged, not fatal: the conversation goes on in memory and the
// client still sees every event.
func (s *Session) record(m *llm.Message) {
	s.mu.Lock()
	if s.detach && (m.Role == llm.RoleToolResult || s.detachSkip) {
		s.detachSkip = true
		s.mu.Unlock()
		return
	}
	f := s.file
	s.mu.Unlock()
	id, err := f.AppendMessage(m)
	if err != nil {
		s.log.Error("writing session transcript", "path", f.Path(), "err", err)
		return
	}
	s.mu.Lock()
	s.items = append(s.items, item{id, m})
	s.mu.Unlock()
}

func (s *Session) onInteraction(ev interaction.Event) {
	s.emit(Event{Type: interactionEventType(ev), Interaction: &ev})
	s.syncSuspended()
}

// syncSuspended moves the state between running (or idle, when parked
// calls wait with no run) and suspended as people are being asked or no
// longer are.
func (s *Session) syncSuspended() {
	pending := len(s.broker.Pending()) > 0
	s.mu.Lock()
	st, run, parked, quiet := s.state, s.runDone != nil, len(s.parked) > 0, s.unparking
	s.mu.Unlock()
	if quiet {
		return
	}
	switch {
	case pending && (st == StateRunning || st == StateIdle && !run && parked):
		s.setState(StateSuspended, "")
	case !pending && st == StateSuspended && run:
		s.setState(StateRunning, "")
	case !pending && st == StateSuspended:
		s.setState(StateIdle, "")
	}
}

func interactionEventType(ev interaction.Event) EventType {
	if ev.Type == interaction.EventRequested {
		return EventInteractionRequested
	}
	return EventInteractionResolved
}

func (s *Session) onTodo(snap todo.Snapshot) {
	s.emit(Event{Type: EventTodoUpdated, Todo: &snap})
}

func (s *Session) beforeToolCall(ctx context.Context, call tool.Call) agent.ToolDecision {
	// Asking the user and keeping a plan never need approval: a policy of
	// "ask for everything" must not ask permission to ask.
	if call.Name == interaction.AskUserName || call.Name == todo.ToolName {
		return agent.ToolDecision{Run: true}
	}
	if r := s.modeRefusal(call.Name); r != nil {
		return agent.ToolDecision{Result: r}
	}
	s.mu.Lock()
	opts := interaction.CheckOptions{ID: s.runParked[call.ID], Ask: s.confirmAll || s.mode.Asks(call.Name), Approved: s.runAuto}
	s.mu.Unlock()
	if opts.ID == "" {
		opts.ID = interaction.ApprovalID(call.ID)
	}
	d := s.gate.CheckWith(ctx, call, opts)
	s.saveGrants()
	if r := s.modeRefusal(call.Name); d.Run && r != nil {
		// The mode changed while the call waited for a person.
		return agent.ToolDecision{Result: r}
	}
	if d.Run {
		s.checkpointBefore(ctx, call)
		if err := s.markStarted(call); err != nil {
			// Unrecorded, a call interrupted by a crash would be offered
			// again after it and could run twice: it does not run.
			s.log.Error("recording that a tool call starts", "tool", call.Name, "call", call.ID, "err", err)
			return agent.ToolDecision{Result: &tool.Result{Content: []llm.Content{llm.Text("Tool call not run: agentd could not record that it started")}, IsError: true}}
		}
	}
	return agent.ToolDecision{Run: d.Run, Args: d.Args, Result: d.Result}
}

// Close aborts any run, cancels pending interactions, waits for the
// session's goroutines, ends every process its commands left running,
// deletes their output files and closes the transcript.
//
// Tool calls the run had not finished get no result in the transcript:
// when the session is loaded again, as after a crash, those that had
// started are recorded as interrupted (CustomToolStarted) and the others
// (waiting for a person, not started) wait for a person. The stopped run's other
// messages (a partly streamed answer, marked aborted) are kept.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.detach = true
	cancel, done := s.runCancel, s.runDone
	compactCancel := s.compactCancel
	s.mu.Unlock()
	if compactCancel != nil {
		compactCancel()
	}
	if cancel != nil {
		s.stopRun(cancel, done, errors.New(reasonClosed))
	}
	s.AbortBash()
	s.wg.Wait()
	if err := s.cfg.BashEnv.Scope.Close(); err != nil {
		s.log.Warn("cleaning up after bash commands", "err", err)
	}
	s.broker.Close("session closed")
	s.mu.Lock()
	f := s.file
	sources := s.sources
	s.sources = nil
	s.mu.Unlock()
	for _, src := range sources {
		src.unwatch()
		if src.stop != nil {
			src.stop()
		}
	}
	return f.Close()
}
