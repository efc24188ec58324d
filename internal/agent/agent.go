package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/tool"
)

// StreamFunc starts one model request; it is llm.Provider.Stream of the
// model's provider.
type StreamFunc func(ctx context.Context, m *llm.Model, c *llm.Context, o *llm.StreamOptions) *llm.Stream

// QueueMode says how many queued messages are delivered at once.
type QueueMode string

// Queue modes, as pi's steeringMode / followUpMode.
const (
	OneAtATime QueueMode = "one-at-a-time"
	All        QueueMode = "all"
)

// ToolDecision is what a BeforeToolCall hook decided for one call.
type ToolDecision struct {
	// Run the tool. When false, Result is what the model sees instead.
	Run bool
	// Args replaces the call's arguments when non-nil (an approver
	// edited them).
	Args   json.RawMessage
	Result *tool.Result
}

// Config is what an Agent runs with. The model, thinking level, system
// prompt and tools may change between runs.
type Config struct {
	Model        *llm.Model
	Thinking     llm.ThinkingLevel
	SystemPrompt string
	Tools        []tool.Tool
	// Stream starts a model request. Required.
	Stream StreamFunc
	// Options returns the per-request stream options (credentials,
	// limits) for a model. An error ends the run with an error message.
	Options func(ctx context.Context, m *llm.Model) (llm.StreamOptions, error)
	// BeforeToolCall, when set, is asked before every tool call (the
	// permission check). It may block, e.g. on a person's approval.
	BeforeToolCall func(ctx context.Context, call tool.Call) ToolDecision
	// Sequential runs tool calls one after another instead of in
	// parallel.
	Sequential   bool
	SteeringMode QueueMode
	FollowUpMode QueueMode

	// MaxTurns bounds the model requests of one prompt's run, counting
	// the continuations after a retry or a compaction: a model that
	// calls tools for ever must not run for ever. 0 means
	// DefaultMaxTurns; a negative value means no limit.
	MaxTurns int
	// MaxSameToolFailures ends a run when one tool call (the same tool
	// with the same arguments) has failed this many times in a row. 0
	// means DefaultMaxSameToolFailures; a negative value never ends a
	// run for this.
	MaxSameToolFailures int
	// MaxQueued bounds the steering and follow-up messages waiting
	// together. 0 means DefaultMaxQueued; a negative value means no
	// limit.
	MaxQueued int
	// MaxQueuedBytes bounds the size of the queued messages together
	// (their text and image data, as MessageSize counts it). 0 means
	// DefaultMaxQueuedBytes; a negative value means no limit.
	MaxQueuedBytes int
}

// Defaults of the limits in Config.
const (
	DefaultMaxTurns            = 200
	DefaultMaxSameToolFailures = 3
	DefaultMaxQueued           = 64
	DefaultMaxQueuedBytes      = 16 << 20
)

// limit resolves a Config limit: 0 is the default, negative is none
// (returned as 0).
func limit(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// ErrBusy is returned when a run is requested while one is in progress.
var ErrBusy = errors.New("agent is already processing; steer or queue a follow-up instead")

// ErrNothingToContinue is returned by Continue and Resume when there is
// nothing to respond to: the conversation is empty or ends with the
// model's answer.
var ErrNothingToContinue = errors.New("nothing to continue: the conversation does not end with a user message, a tool result or tool calls still to run")

// Errors a run or a queued message may fail with; each comes wrapped in
// a *LimitError whose text is written for the person who hit the limit.
var (
	ErrQueueFull             = errors.New("queue full")
	ErrQueuedMessageTooLarge = errors.New("queued message too large")
	ErrTurnLimit             = errors.New("turn limit reached")
	ErrRepeatedToolFailure   = errors.New("the same tool call kept failing")
)

// LimitError is a limit of Config that was reached. Err is one of the
// Err* values above, for errors.Is; Error() is the message for a client.
type LimitError struct {
	Err     error
	Message string
}

func (e *LimitError) Error() string { return e.Message }
func (e *LimitError) Unwrap() error { return e.Err }

// As lets a face see the limit as the client-visible error it is: a
// message too large for the queue, or a capacity reached.
func (e *LimitError) As(target any) bool {
	p, ok := target.(**fault.Error)
	if !ok {
		return false
	}
	code := fault.Limit
	if errors.Is(e.Err, ErrQueuedMessageTooLarge) {
		code = fault.TooLarge
	}
	*p = &fault.Error{Code: code, Message: e.Message, Cause: e.Err}
	return true
}

// KindRunLimit is the kind of the *llm.Error on the assistant message that
// ends a run the agent stopped itself (turn limit, repeated failing tool
// call). It is not retryable.
const KindRunLimit llm.ErrorKind = "run_limit"

// Agent holds a conversation and runs the loop over it, one run at a
// time. Its methods are safe for concurrent use: clients steer, queue
// follow-ups and abort while a run is in progress.
type Agent struct {
	mu       sync.Mutex
	cfg      Config
	messages []*llm.Message
	steering []*llm.Message
	followUp []*llm.Message
	running  bool
	cancel   context.CancelFunc
	done     chan struct{}

	// What a prompt's run has done so far, carried across Continue so
	// that retries and compactions do not reset the run's limits. Only
	// the run in progress touches them.
	turns     int
	failedSig string // tool name and canonical arguments of the last call, if it failed
	failedN   int    // how many times in a row it failed

	emitMu sync.Mutex
	emit   func(Event)
}

// New returns an idle agent. emit receives every event, one at a time
// and in order (never concurrently), on the goroutine that produced it;
// it must not call back into the agent's run methods.
func New(cfg Config, emit func(Event)) *Agent {
	if cfg.SteeringMode == "" {
		cfg.SteeringMode = OneAtATime
	}
	if cfg.FollowUpMode == "" {
		cfg.FollowUpMode = OneAtATime
	}
	if emit == nil {
		emit = func(Event) {}
	}
	return &Agent{cfg: cfg, emit: emit}
}

func (a *Agent) send(ev Event) {
	a.emitMu.Lock()
	defer a.emitMu.Unlock()
	a.emit(ev)
}

// Config returns the current configuration.
func (a *Agent) Config() Config {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg
}

// Update changes the configuration; a run in progress keeps the settings
// it started with.
func (a *Agent) Update(f func(*Config)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(&a.cfg)
}

// Messages returns the conversation so far (a copy of the slice; the
// messages themselves are shared and must not be modified).
func (a *Agent) Messages() []*llm.Message {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*llm.Message(nil), a.messages...)
}

// SetMessages replaces the conversation (loading a session, compaction,
// branching). It fails while a run is in progress.
func (a *Agent) SetMessages(ms []*llm.Message) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running {
		return ErrBusy
	}
	a.messages = append([]*llm.Message(nil), ms...)
	return nil
}

// Append adds messages to the conversation outside a run (a bash command
// the user ran, a custom message).
func (a *Agent) Append(ms ...*llm.Message) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.messages = append(a.messages, ms...)
}

// Running reports whether a run is in progress.
func (a *Agent) Running() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running
}

// Steer queues a message to be delivered after the current turn's tool
// calls finish, before the model is asked again. It fails with a
// *LimitError (ErrQueueFull, ErrQueuedMessageTooLarge) when the message
// does not fit the queues' limits.
func (a *Agent) Steer(m *llm.Message) error { return a.enqueue(&a.steering, m) }

// FollowUp queues a message to be delivered when the agent would
// otherwise stop; it fails as Steer does.
func (a *Agent) FollowUp(m *llm.Message) error { return a.enqueue(&a.followUp, m) }

func (a *Agent) enqueue(q *[]*llm.Message, m *llm.Message) error {
	size := MessageSize(m)
	a.mu.Lock()
	if err := a.admit(size); err != nil {
		a.mu.Unlock()
		return err
	}
	*q = append(*q, m)
	a.mu.Unlock()
	a.sendQueue()
	return nil
}

// admit checks a message of size bytes against the queue limits; a.mu
// is held.
func (a *Agent) admit(size int) error {
	maxN := limit(a.cfg.MaxQueued, DefaultMaxQueued)
	maxBytes := limit(a.cfg.MaxQueuedBytes, DefaultMaxQueuedBytes)
	if maxBytes > 0 && size > maxBytes {
		return &LimitError{ErrQueuedMessageTooLarge, fmt.Sprintf("Queued message too large: %s, at most %s", byteSize(size), byteSize(maxBytes))}
	}
	if n := len(a.steering) + len(a.followUp); maxN > 0 && n >= maxN {
		return &LimitError{ErrQueueFull, fmt.Sprintf("Queue full: at most %d queued messages (steering and follow-up together); wait until some are delivered", maxN)}
	}
	if maxBytes == 0 {
		return nil
	}
	queued := 0
	for _, q := range [][]*llm.Message{a.steering, a.followUp} {
		for _, m := range q {
			queued += MessageSize(m)
		}
	}
	if queued+size > maxBytes {
		return &LimitError{ErrQueueFull, fmt.Sprintf("Queue full: queued messages take at most %s together, %s are queued and this one is %s; wait until some are delivered",
			byteSize(maxBytes), byteSize(queued), byteSize(size))}
	}
	return nil
}

// MessageSize is the size in bytes of what m carries: text, thinking,
// image data, tool arguments and details, and the bash, summary and error
// texts. It leaves out the fixed size of the structs, so it is what a
// person would call the message's size; the queue limits count it.
func MessageSize(m *llm.Message) int {
	n := len(m.ErrorMessage) + len(m.Details) + len(m.Command) + len(m.Output) + len(m.Summary)
	for i := range m.Content {
		c := &m.Content[i]
		n += len(c.Text) + len(c.TextSignature) + len(c.Thinking) + len(c.ThinkingSignature) + len(c.Data) + len(c.Arguments) + len(c.ThoughtSignature)
	}
	return n
}

// byteSize writes n bytes for a person: 512 bytes, 3.2 KiB, 16.0 MiB.
func byteSize(n int) string {
	switch {
	case n == 1:
		return "1 byte"
	case n < 1<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// ClearQueues empties both queues and returns what was in them.
func (a *Agent) ClearQueues() (steering, followUp []*llm.Message) {
	a.mu.Lock()
	steering, followUp = a.steering, a.followUp
	a.steering, a.followUp = nil, nil
	a.mu.Unlock()
	if len(steering)+len(followUp) > 0 {
		a.sendQueue()
	}
	return steering, followUp
}

// PendingCount is the number of queued steering and follow-up messages.
func (a *Agent) PendingCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.steering) + len(a.followUp)
}

// Queued returns the texts of the queued messages.
func (a *Agent) Queued() (steering, followUp []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return texts(a.steering), texts(a.followUp)
}

func texts(ms []*llm.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.TextContent()
	}
	return out
}

func (a *Agent) sendQueue() {
	s, f := a.Queued()
	a.send(Event{Type: EventQueueUpdate, Steering: s, FollowUp: f})
}

// takeQueued removes the messages to deliver next; the loop announces
// the new queue when it delivers them, after turn_start, as pi does.
func (a *Agent) takeQueued(q *[]*llm.Message, mode QueueMode) []*llm.Message {
	a.mu.Lock()
	if len(*q) == 0 {
		a.mu.Unlock()
		return nil
	}
	var out []*llm.Message
	if mode == All {
		out, *q = *q, nil
	} else {
		out = []*llm.Message{(*q)[0]}
		*q = append([]*llm.Message(nil), (*q)[1:]...)
	}
	a.mu.Unlock()
	return out
}

// Abort cancels the run in progress, if any, and waits for it to end:
// the stream is closed, running tools are killed, and the run ends with an
// aborted assistant message.
func (a *Agent) Abort() {
	a.mu.Lock()
	cancel, done := a.cancel, a.done
	a.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// Prompt runs the loop with new messages (usually one user message) and
// returns the messages the run added. It blocks until the run ends; it
// fails with ErrBusy if a run is already in progress.
func (a *Agent) Prompt(ctx context.Context, prompts ...*llm.Message) ([]*llm.Message, error) {
	return a.run(ctx, prompts, runPrompt)
}

// Continue runs the loop from the current conversation without a new
// message (after a retryable error, or after compaction), as part of the
// run in progress: the run's turn and failure counts go on. There must be
// something to respond to (see Resume); otherwise it fails with
// ErrNothingToContinue.
func (a *Agent) Continue(ctx context.Context) ([]*llm.Message, error) {
	return a.run(ctx, nil, runContinue)
}

// Resume starts a new run from the conversation as it stands, without a
// new message. When the conversation ends with an assistant message whose
// tool calls have no results yet (a run stopped by a restart, an edit),
// those calls go through BeforeToolCall and run first, then the model is
// asked; when it ends with a user message, tool results or another
// non-assistant message, the model is asked at once. Assistant messages
// that ended in an error or were aborted at the end are passed over (the
// providers leave them out of the request). Anything else is
// ErrNothingToContinue. Unlike Continue, the run's limits start afresh,
// as for a prompt.
func (a *Agent) Resume(ctx context.Context) ([]*llm.Message, error) {
	return a.run(ctx, nil, runResume)
}

// runMode says how a run starts.
type runMode int

const (
	runPrompt runMode = iota
	runContinue
	runResume
)

// PendingToolCalls returns the assistant message that ends the
// conversation ms and those of its tool calls that have no result yet, in
// call order. The conversation ends with that message when only results
// of its calls follow it. An assistant message that ended in an error or
// was aborted has no pending calls: they were never meant to run.
func PendingToolCalls(ms []*llm.Message) (*llm.Message, []llm.Content) {
	done := map[string]bool{}
	for i := len(ms) - 1; i >= 0; i-- {
		m := ms[i]
		switch m.Role {
		case llm.RoleToolResult:
			done[m.ToolCallID] = true
			continue
		case llm.RoleAssistant:
		default:
			return nil, nil
		}
		if m.StopReason == llm.StopError || m.StopReason == llm.StopAborted {
			return nil, nil
		}
		var calls []llm.Content
		for _, c := range m.ToolCalls() {
			if !done[c.ID] {
				calls = append(calls, c)
			}
		}
		if len(calls) == 0 {
			return nil, nil
		}
		return m, calls
	}
	return nil, nil
}

// respondable reports whether the model has something to respond to in
// ms, and the tool calls to run first if the conversation ends with some.
func respondable(ms []*llm.Message) (ok bool, resume *llm.Message, calls []llm.Content) {
	n := len(ms)
	for n > 0 && ms[n-1].Role == llm.RoleAssistant && (ms[n-1].StopReason == llm.StopError || ms[n-1].StopReason == llm.StopAborted) {
		n--
	}
	if resume, calls = PendingToolCalls(ms[:n]); len(calls) > 0 {
		return true, resume, calls
	}
	return n > 0 && ms[n-1].Role != llm.RoleAssistant, nil, nil
}

// CanRespond reports whether Resume has something to respond to in ms.
func CanRespond(ms []*llm.Message) bool {
	ok, _, _ := respondable(ms)
	return ok
}

func (a *Agent) run(ctx context.Context, prompts []*llm.Message, mode runMode) ([]*llm.Message, error) {
	a.mu.Lock()
	if a.running {
		a.mu.Unlock()
		return nil, ErrBusy
	}
	var resume *llm.Message
	var calls []llm.Content
	if mode != runPrompt {
		var ok bool
		if ok, resume, calls = respondable(a.messages); !ok {
			a.mu.Unlock()
			return nil, ErrNothingToContinue
		}
	}
	if mode != runContinue {
		a.turns, a.failedSig, a.failedN = 0, "", 0
	}
	runCtx, cancel := context.WithCancel(ctx)
	a.running, a.cancel, a.done = true, cancel, make(chan struct{})
	cfg := a.cfg
	done := a.done
	a.mu.Unlock()

	r := &run{a: a, cfg: cfg, ctx: runCtx}
	added := r.loop(prompts, resume, calls)

	cancel()
	a.mu.Lock()
	a.running, a.cancel, a.done = false, nil, nil
	a.mu.Unlock()
	close(done)
	return added, nil
}

// now is the message timestamp clock.
func now() int64 { return time.Now().UnixMilli() }
