package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/piwire"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/todo"
	"github.com/agentd-dev/agentd/internal/tool"
)

// conversation is the session the face drives: one of the engine here
// (*session.Session), or one of a running agentd serve.
type conversation interface {
	ID() string
	Subscribe(fn func(session.Event)) (unsubscribe func())
	Prompt(m *llm.Message, b session.Behavior) error
	Abort()
	Close() error
	Answer(id string, r interaction.Response) error
	Interactions() []interaction.Request
	Messages() []*llm.Message
	Todo() todo.Snapshot
	Stats() session.Stats
	Running() bool
}

var _ conversation = (*session.Session)(nil)

// remoteSession is a session of agentd serve seen through its pi-server
// events: they are turned back into the engine's events, so the face
// maps them to session/update exactly as it maps a local session's.
type remoteSession struct {
	r      *Remote
	id     string
	cwd    string
	window int64

	mu       sync.Mutex
	subs     map[int]func(session.Event)
	nextSub  int
	running  bool
	messages []*llm.Message
	todo     todo.Snapshot
	calls    []llm.Content // the tool calls the model made, for approvals
	asks     map[string]interaction.Request
}

func newRemoteSession(r *Remote, cwd string) *remoteSession {
	return &remoteSession{r: r, cwd: cwd, subs: map[int]func(session.Event){}, asks: map[string]interaction.Request{}}
}

func (s *remoteSession) ID() string { return s.id }

func (s *remoteSession) Subscribe(fn func(session.Event)) func() {
	s.mu.Lock()
	n := s.nextSub
	s.nextSub++
	s.subs[n] = fn
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.subs, n)
		s.mu.Unlock()
	}
}

func (s *remoteSession) Prompt(m *llm.Message, _ session.Behavior) error {
	if s.Running() {
		// The server would queue it behind the run another client
		// started, whose end would then end this turn.
		return fault.New(fault.Busy, "Session "+s.id+" is running a prompt on agentd serve (perhaps from another client): wait for it to end or send session/cancel")
	}
	return fromRemote(s.r.prompt(s.r.ctx, s.id, m))
}

func (s *remoteSession) Abort() {
	ctx, cancel := context.WithTimeout(s.r.ctx, 10*time.Second)
	defer cancel()
	if err := s.r.call(ctx, map[string]any{"type": "abort", "sessionId": s.id}, nil); err != nil {
		s.r.log.Warn("abort", "session", s.id, "err", err)
	}
}

// Close stops watching the session; it stays on the server for the
// others who watch it.
func (s *remoteSession) Close() error {
	s.r.unregister(s)
	return nil
}

func (s *remoteSession) Answer(id string, resp interaction.Response) error {
	s.mu.Lock()
	req, ok := s.asks[id]
	s.mu.Unlock()
	if !ok {
		return interaction.ErrNotFound
	}
	var answer map[string]any
	switch {
	case resp.Cancelled:
		answer = map[string]any{"method": "cancelled"}
	case req.Kind == interaction.KindApproval:
		v := piwire.OptReject
		switch resp.Verdict {
		case interaction.VerdictApprove:
			v = piwire.OptAllow
		case interaction.VerdictAlways:
			v = piwire.OptAlways
		case interaction.VerdictSkip:
			v = piwire.OptSkip
		case interaction.VerdictReject:
			if resp.Feedback != "" {
				// pi-server takes any other value as a rejection whose
				// text the model reads.
				v = resp.Feedback
			}
		}
		answer = map[string]any{"method": "select", "value": v}
	case req.Kind == interaction.KindConfirm:
		answer = map[string]any{"method": "confirm", "confirmed": resp.Confirmed}
	default:
		answer = map[string]any{"method": "select", "value": resp.Value}
	}
	ctx, cancel := context.WithTimeout(s.r.ctx, 30*time.Second)
	defer cancel()
	return fromRemote(s.r.call(ctx, map[string]any{"type": "extension_ui_response", "sessionId": s.id, "requestId": id, "response": answer}, nil))
}

func (s *remoteSession) Interactions() []interaction.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]interaction.Request, 0, len(s.asks))
	for _, r := range s.asks {
		out = append(out, r)
	}
	return out
}

// Messages are the session's messages when it was opened here.
func (s *remoteSession) Messages() []*llm.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.messages
}

func (s *remoteSession) Todo() todo.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.todo
}

func (s *remoteSession) Stats() session.Stats {
	return session.Stats{SessionID: s.id, ContextWindow: s.window}
}

func (s *remoteSession) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running
}

// emit hands ev to the subscribers. It runs on the connection's reader,
// which holds nothing they wait for.
func (s *remoteSession) emit(ev session.Event) {
	s.mu.Lock()
	fns := make([]func(session.Event), 0, len(s.subs))
	for _, fn := range s.subs {
		fns = append(fns, fn)
	}
	s.mu.Unlock()
	for _, fn := range fns {
		fn(ev)
	}
}

// lost ends a run in progress with the connection's error, and the
// questions put to the editor with it.
func (s *remoteSession) lost(err error) {
	s.mu.Lock()
	asks := s.asks
	s.asks = map[string]interaction.Request{}
	s.mu.Unlock()
	for _, req := range asks {
		s.emit(session.Event{Type: session.EventInteractionResolved, Interaction: &interaction.Event{Request: req}})
	}
	s.emit(session.Event{Type: session.EventType(agent.EventMessageEnd), Agent: &agent.Event{Type: agent.EventMessageEnd,
		Message: &llm.Message{Role: llm.RoleAssistant, StopReason: llm.StopError, ErrorMessage: err.Error()}}})
	s.mu.Lock()
	s.running = false
	s.mu.Unlock()
	s.emit(sessionState(session.StateIdle, session.OutcomeFailed))
}

// wireEvent is every field of the pi-server events the bridge reads but
// "message", which is a message in some and a string in others.
type wireEvent struct {
	Type                  string `json:"type"`
	AssistantMessageEvent *struct {
		Type  llm.EventType `json:"type"`
		Delta string        `json:"delta"`
	} `json:"assistantMessageEvent"`
	ToolCallID    string          `json:"toolCallId"`
	ToolName      string          `json:"toolName"`
	Args          json.RawMessage `json:"args"`
	PartialResult *tool.Result    `json:"partialResult"`
	Result        *tool.Result    `json:"result"`
	IsError       bool            `json:"isError"`
	State         session.State   `json:"state"`
	Outcome       session.Outcome `json:"outcome"`
	Todo          *todo.Snapshot  `json:"todo"`
	Model         *struct {
		ContextWindow int64 `json:"contextWindow"`
	} `json:"model"`
	RequestID string   `json:"requestId"`
	Method    string   `json:"method"`
	Title     string   `json:"title"`
	Options   []string `json:"options"`
}

func (s *remoteSession) event(raw json.RawMessage) {
	var w wireEvent
	if err := json.Unmarshal(raw, &w); err != nil {
		s.r.log.Warn("agentd serve sent an event the bridge cannot read", "session", s.id, "err", err)
		return
	}
	switch w.Type {
	case "message_update":
		if u := w.AssistantMessageEvent; u != nil {
			s.emit(session.Event{Type: session.EventType(agent.EventMessageUpdate), Agent: &agent.Event{Type: agent.EventMessageUpdate,
				Update: &llm.Event{Type: u.Type, Delta: u.Delta}}})
		}
	case "message_end":
		var m struct {
			Message *llm.Message `json:"message"`
		}
		if json.Unmarshal(raw, &m) != nil || m.Message == nil {
			return
		}
		s.mu.Lock()
		s.seeCallsLocked([]*llm.Message{m.Message})
		s.mu.Unlock()
		s.emit(session.Event{Type: session.EventType(agent.EventMessageEnd), Agent: &agent.Event{Type: agent.EventMessageEnd, Message: m.Message}})
	case "tool_execution_start", "tool_execution_update", "tool_execution_end":
		ae := &agent.Event{Type: agent.EventType(w.Type), ToolCallID: w.ToolCallID, ToolName: w.ToolName, Args: w.Args,
			Partial: w.PartialResult, Result: w.Result, IsError: w.IsError}
		if w.Type == "tool_execution_end" {
			// The end carries no arguments; the face's diff needs them.
			ae.Args = s.callArgs(w.ToolCallID)
		}
		s.emit(session.Event{Type: session.EventType(w.Type), Agent: ae})
	case string(session.EventStateChanged):
		s.mu.Lock()
		s.running = w.State != session.StateIdle
		s.mu.Unlock()
		s.emit(sessionState(w.State, w.Outcome))
	case string(session.EventTodoUpdated):
		if w.Todo != nil {
			s.mu.Lock()
			s.todo = *w.Todo
			s.mu.Unlock()
			s.emit(session.Event{Type: session.EventTodoUpdated, Todo: w.Todo})
		}
	case string(session.EventModelChanged):
		if w.Model != nil {
			s.emit(session.Event{Type: session.EventModelChanged, Model: &llm.Model{ContextWindow: w.Model.ContextWindow}})
		}
	case "mode_changed":
		// Any client's set_mode: the editor hears current_mode_update.
		var m struct {
			Mode string `json:"mode"`
		}
		if json.Unmarshal(raw, &m) == nil && m.Mode != "" {
			s.emit(session.Event{Type: session.EventConfigChanged, Config: &session.ConfigChange{Changed: "mode", Mode: m.Mode}})
		}
	case "extension_ui_request":
		var m struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(raw, &m)
		req, ok := s.request(w, m.Message)
		if !ok {
			// Not a question ACP can put: the browser answers it.
			return
		}
		s.mu.Lock()
		s.asks[req.ID] = req
		s.mu.Unlock()
		s.emit(session.Event{Type: session.EventInteractionRequested, Interaction: &interaction.Event{Request: req}})
	case "extension_ui_resolved":
		s.mu.Lock()
		req, ok := s.asks[w.RequestID]
		delete(s.asks, w.RequestID)
		s.mu.Unlock()
		if ok {
			s.emit(session.Event{Type: session.EventInteractionResolved, Interaction: &interaction.Event{Request: req}})
		}
	}
}

func (s *remoteSession) callArgs(id string) json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.calls {
		if c.ID == id {
			return c.Arguments
		}
	}
	return nil
}

// approvalOptions are the options of pi-server's approval dialog.
var piApprovalOptions = []string{piwire.OptAllow, piwire.OptAlways, piwire.OptSkip, piwire.OptReject}

// request turns a dialog back into the interaction it asks about. An
// approval names the tool in its title ("Allow bash: ls?") and carries
// the arguments as its message; the call is the model's call of that
// tool with those arguments.
func (s *remoteSession) request(w wireEvent, message string) (interaction.Request, bool) {
	req := interaction.Request{ID: w.RequestID, Title: w.Title, Message: message, Options: w.Options}
	switch {
	case w.Method == "select" && slices.Equal(w.Options, piApprovalOptions) && strings.HasPrefix(w.Title, "Allow "):
		name := strings.TrimPrefix(w.Title, "Allow ")
		if i := strings.IndexAny(name, ":?"); i >= 0 {
			name = name[:i]
		}
		req.Kind, req.Options = interaction.KindApproval, nil
		req.Tool = &interaction.ToolApproval{ToolCallID: "approval-" + w.RequestID, ToolName: name, Args: json.RawMessage(message)}
		if !json.Valid(req.Tool.Args) {
			req.Tool.Args = nil
		}
		s.mu.Lock()
		s.matchCallLocked(&req)
		s.mu.Unlock()
	case w.Method == "select":
		req.Kind = interaction.KindSelect
	case w.Method == "confirm":
		req.Kind = interaction.KindConfirm
	default:
		return interaction.Request{}, false
	}
	return req, true
}

// matchCallLocked names the model's call an approval asks about: the
// latest call of that tool with those arguments. One asked before the
// session's messages arrived is matched again when they do (seeCalls).
func (s *remoteSession) matchCallLocked(req *interaction.Request) {
	if req.Tool == nil || !strings.HasPrefix(req.Tool.ToolCallID, "approval-") {
		return
	}
	for i := len(s.calls) - 1; i >= 0; i-- {
		c := s.calls[i]
		if c.Name == req.Tool.ToolName && (req.Tool.Args == nil || sameJSON(c.Arguments, req.Tool.Args)) {
			req.Tool.ToolCallID, req.Tool.Args = c.ID, c.Arguments
			return
		}
	}
}

// seeCalls records the tool calls of messages and matches the approvals
// waiting for them; s.mu is held.
func (s *remoteSession) seeCallsLocked(msgs []*llm.Message) {
	for _, m := range msgs {
		for _, c := range m.Content {
			if c.Type == llm.ContentToolCall {
				s.calls = append(s.calls, c)
			}
		}
	}
	if len(s.calls) > 64 {
		s.calls = slices.Clone(s.calls[len(s.calls)-64:])
	}
	for id, req := range s.asks {
		s.matchCallLocked(&req)
		s.asks[id] = req
	}
}

func sameJSON(a, b json.RawMessage) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}
