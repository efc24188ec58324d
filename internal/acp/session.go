package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/mcp"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/tool"
)

// acpSession is one agentd session open on the connection.
type acpSession struct {
	a   *Agent
	id  string
	cwd string
	s   conversation
	// remoteUnavailable are the editor's MCP servers that failed to
	// start on agentd serve (a bridged session), for the editor.
	remoteUnavailable []tool.Unavailable
	// local is s when it is a session of this process (not bridged):
	// tools can be added to it.
	local *session.Session
	// policy is the sandbox the session's tools run under, which the
	// editor's fs and terminal are held to.
	policy sandbox.Policy
	// untrusted is the project's MCP configuration nobody trusted as
	// it is, to ask the editor about once the session is open.
	untrusted *mcp.Project

	// ctx lives as long as the session is open here; the permission
	// requests sent to the client are made under it.
	ctx   context.Context
	stop  context.CancelFunc
	unsub func()
	wg    sync.WaitGroup // permission requests in flight

	mu     sync.Mutex
	turn   *turn
	asking map[string]context.CancelFunc // interaction id → its request to the client
	denied map[string]bool               // tools rejected always
	// terminals are the editor's terminals of the bash calls running
	// there, by tool call id, kept in the call's content when it ends.
	terminals map[string]string
	closed    bool
	// window and cost feed usage_update: the model's context window and
	// the session's cost so far.
	window int64
	cost   float64
	// cfg reads and changes the session's mode, model and thinking
	// level; view is what the client was last shown of them.
	cfg  configurable
	view settingsView
	// builtins are the names of the built-in commands, from the last
	// available_commands_update.
	builtins []string
}

// turn is one session/prompt waiting for its run to end.
type turn struct {
	done      chan struct{}
	cancelled bool
	outcome   session.Outcome
	// The last assistant message's ending.
	stop    llm.StopReason
	errKind llm.ErrorKind
	errMsg  string
}

func (ss *acpSession) listen() { ss.unsub = ss.s.Subscribe(ss.onEvent) }

func (ss *acpSession) update(u any) {
	ss.a.conn.notify("session/update", sessionNotification{SessionID: ss.id, Update: u})
}

// prompt runs one turn and answers with its stop reason once every
// update of the run was queued.
func (a *Agent) prompt(ctx context.Context, params json.RawMessage) (any, error) {
	var p promptParams
	if err := decodeParams("session/prompt", params, &p); err != nil {
		return nil, err
	}
	ss, err := a.session("session/prompt", p.SessionID)
	if err != nil {
		return nil, err
	}
	if p.Prompt == nil {
		return nil, invalidParams("session/prompt", "prompt is required")
	}
	msg, err := userMessage(p.Prompt)
	if err != nil {
		return nil, err
	}
	if ran, err := ss.runBuiltin(ctx, msg.TextContent()); ran {
		if err != nil {
			return nil, err
		}
		return promptResult{StopReason: StopEndTurn}, nil
	}
	t := &turn{done: make(chan struct{})}
	ss.mu.Lock()
	if ss.closed {
		ss.mu.Unlock()
		return nil, &Error{Code: CodeResourceNotFound, Message: "Session " + ss.id + " was closed"}
	}
	if ss.turn != nil {
		ss.mu.Unlock()
		return nil, fault.New(fault.Busy, "A prompt is already running in session "+ss.id+": wait for its response or send session/cancel")
	}
	ss.turn = t
	ss.mu.Unlock()
	mark := ss.checkpointMark()
	if err := ss.s.Prompt(msg, session.BehaviorNone); err != nil {
		ss.mu.Lock()
		if ss.turn == t {
			ss.turn = nil
		}
		ss.mu.Unlock()
		return nil, err
	}
	select {
	case <-t.done:
	case <-ctx.Done():
		ss.cancel()
		<-t.done
	}
	ss.sendChanges(mark)
	return t.result()
}

func (t *turn) result() (any, error) {
	switch {
	case t.cancelled || t.outcome == session.OutcomeCancelled || t.stop == llm.StopAborted:
		return promptResult{StopReason: StopCancelled}, nil
	case t.stop == llm.StopLength:
		return promptResult{StopReason: StopMaxTokens}, nil
	case t.stop == llm.StopError && t.errKind == agent.KindRunLimit:
		return promptResult{StopReason: StopMaxTurnRequests}, nil
	case t.stop == llm.StopError && refused(t.errMsg):
		return promptResult{StopReason: StopRefusal}, nil
	case t.stop == llm.StopError:
		return nil, &Error{Code: CodeInternalError, Message: t.errMsg}
	}
	return promptResult{StopReason: StopEndTurn}, nil
}

// refused tells a refusal from other errors. The providers report one as
// an error message that says so (llm has no kind of its own for it).
func refused(msg string) bool {
	return strings.Contains(msg, "refused to answer")
}

// userMessage turns a prompt's content blocks into the user message.
func userMessage(blocks []contentBlock) (*llm.Message, error) {
	m := &llm.Message{Role: llm.RoleUser}
	for i, b := range blocks {
		switch b.Type {
		case "text":
			m.Content = append(m.Content, llm.Text(b.Text))
		case "image":
			if b.Data == "" || b.MimeType == "" {
				return nil, invalidParams("session/prompt", "prompt[%d]: an image needs data and mimeType", i)
			}
			m.Content = append(m.Content, llm.Image(b.Data, b.MimeType))
		case "resource_link":
			name := b.Name
			if name == "" {
				name = b.URI
			}
			m.Content = append(m.Content, llm.Text(fmt.Sprintf("[@%s](%s)", name, b.URI)))
		case "resource":
			if b.Resource == nil {
				return nil, invalidParams("session/prompt", "prompt[%d]: a resource block needs resource", i)
			}
			if b.Resource.Text == "" && b.Resource.Blob != "" {
				return nil, invalidParams("session/prompt", "prompt[%d]: binary resources are not supported", i)
			}
			m.Content = append(m.Content, llm.Text(fmt.Sprintf("<context ref=%q>\n%s\n</context>", b.Resource.URI, b.Resource.Text)))
		case "audio":
			return nil, invalidParams("session/prompt", "prompt[%d]: audio is not supported (promptCapabilities.audio is false)", i)
		default:
			return nil, invalidParams("session/prompt", "prompt[%d]: unknown content type %q", i, b.Type)
		}
	}
	if len(m.Content) == 0 {
		return nil, invalidParams("session/prompt", "prompt is empty")
	}
	return m, nil
}

// cancel ends the turn in progress with cancelled: every permission
// request still open is settled and the run is aborted.
func (ss *acpSession) cancel() {
	ss.mu.Lock()
	if ss.turn != nil {
		ss.turn.cancelled = true
	}
	for _, c := range ss.asking {
		c()
	}
	ss.mu.Unlock()
	ss.s.Abort()
}

// close ends the session here: the run is aborted, the client's
// permission requests are given up, the session and its MCP servers are
// closed.
func (ss *acpSession) close() {
	ss.mu.Lock()
	if ss.closed {
		ss.mu.Unlock()
		return
	}
	ss.closed = true
	if ss.turn != nil {
		ss.turn.cancelled = true
	}
	ss.mu.Unlock()
	// The session stops recording before its calls are cancelled: a
	// cancelled call would otherwise be written down as settled.
	if err := ss.s.Close(); err != nil {
		ss.a.log.Warn("closing session", "session", ss.id, "err", err)
	}
	ss.stop()
	ss.wg.Wait()
	if ss.unsub != nil {
		ss.unsub()
	}
	ss.finish("")
}

func (ss *acpSession) setTerminal(callID, term string) {
	ss.mu.Lock()
	ss.terminals[callID] = term
	ss.mu.Unlock()
}

// finish ends the turn in progress, if any.
func (ss *acpSession) finish(o session.Outcome) {
	ss.mu.Lock()
	t := ss.turn
	ss.turn = nil
	ss.mu.Unlock()
	if t != nil {
		if o != "" {
			t.outcome = o
		}
		close(t.done)
	}
}

// onEvent turns session events into session/update notifications. It
// runs under the session's emit lock: it only encodes and queues, and
// hands whatever waits on the client to a goroutine.
func (ss *acpSession) onEvent(ev session.Event) {
	ss.settingsEvent(ev)
	switch ev.Type {
	case session.EventStateChanged:
		if ev.Outcome != "" && ev.State == session.StateIdle {
			ss.finish(ev.Outcome)
		}
	case session.EventInteractionRequested:
		ss.startAsk(ev.Interaction.Request)
	case session.EventInteractionResolved:
		// Answered elsewhere or timed out: stop waiting for the client.
		ss.mu.Lock()
		if c := ss.asking[ev.Interaction.Request.ID]; c != nil {
			c()
		}
		ss.mu.Unlock()
	case session.EventTodoUpdated:
		ss.update(plan(ev.Todo))
	case session.EventModelChanged:
		if ev.Model != nil {
			ss.mu.Lock()
			ss.window = ev.Model.ContextWindow
			ss.mu.Unlock()
		}
	}
	if ev.Agent == nil {
		return
	}
	ae := ev.Agent
	switch ae.Type {
	case agent.EventMessageUpdate:
		if ae.Update == nil || ae.Update.Delta == "" {
			return
		}
		switch ae.Update.Type {
		case llm.EventTextDelta:
			ss.update(chunkUpdate{SessionUpdate: "agent_message_chunk", Content: contentBlock{Type: "text", Text: ae.Update.Delta}})
		case llm.EventThinkingDelta:
			ss.update(chunkUpdate{SessionUpdate: "agent_thought_chunk", Content: contentBlock{Type: "text", Text: ae.Update.Delta}})
		}
	case agent.EventMessageEnd:
		m := ae.Message
		if m == nil || m.Role != llm.RoleAssistant {
			return
		}
		ss.mu.Lock()
		if t := ss.turn; t != nil {
			t.stop, t.errMsg, t.errKind = m.StopReason, m.ErrorMessage, ""
			if ae.Err != nil {
				t.errKind = ae.Err.Kind
			}
		}
		ss.cost += m.Usage.Cost.Total
		u := usageUpdate{SessionUpdate: "usage_update", Used: m.Usage.Input + m.Usage.Output + m.Usage.CacheRead + m.Usage.CacheWrite,
			Size: ss.window, Cost: &cost{Amount: ss.cost, Currency: "USD"}}
		ss.mu.Unlock()
		if u.Used > 0 {
			ss.update(u)
		}
	case agent.EventToolExecutionStart:
		ss.update(startCall(ss.cwd, ae.ToolCallID, ae.ToolName, ae.Args))
	case agent.EventToolExecutionUpdate:
		if ae.Partial != nil {
			ss.update(toolCall{SessionUpdate: "tool_call_update", ToolCallID: ae.ToolCallID, Status: "in_progress",
				Content: resultContent(ae.Partial.Content)})
		}
	case agent.EventToolExecutionEnd:
		var content []llm.Content
		if ae.Result != nil {
			content = ae.Result.Content
		}
		u := endCall(ss.cwd, ae.ToolCallID, ae.ToolName, ae.Args, content, ae.IsError)
		ss.mu.Lock()
		if term, ok := ss.terminals[ae.ToolCallID]; ok {
			delete(ss.terminals, ae.ToolCallID)
			u.Content = append([]toolCallContent{{Type: "terminal", TerminalID: term}}, u.Content...)
		}
		ss.mu.Unlock()
		ss.update(u)
	}
}

// startAsk puts req to the client on a goroutine of its own, once.
func (ss *acpSession) startAsk(req interaction.Request) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if _, asked := ss.asking[req.ID]; ss.closed || asked {
		return
	}
	ctx, cancel := context.WithCancel(ss.ctx)
	ss.asking[req.ID] = cancel
	ss.wg.Add(1)
	go ss.ask(ctx, req)
}

// ask puts a pending interaction to the client: an approval as
// session/request_permission, a yes/no or a choice the same way; a line
// of text, a text to edit or a form as elicitation/create when the
// client takes it (elicit.go), otherwise answered cancelled.
func (ss *acpSession) ask(ctx context.Context, req interaction.Request) {
	defer ss.wg.Done()
	defer func() {
		ss.mu.Lock()
		if c := ss.asking[req.ID]; c != nil {
			c()
			delete(ss.asking, req.ID)
		}
		ss.mu.Unlock()
	}()
	var resp interaction.Response
	switch req.Kind {
	case interaction.KindApproval:
		resp = ss.approve(ctx, req)
	case interaction.KindConfirm, interaction.KindSelect:
		resp = ss.question(ctx, req)
	case interaction.KindInput, interaction.KindEditor, interaction.KindForm:
		if !ss.a.canElicit() {
			resp = interaction.Response{Cancelled: true}
			break
		}
		resp = ss.elicit(ctx, req)
	default:
		resp = interaction.Response{Cancelled: true}
	}
	if err := ss.s.Answer(req.ID, resp); err != nil && !errors.Is(err, interaction.ErrAlreadyResolved) && !errors.Is(err, interaction.ErrNotFound) && !errors.Is(err, session.ErrClosed) {
		ss.a.log.Warn("answering an interaction", "session", ss.id, "id", req.ID, "err", err)
	}
}

var approvalOptions = []permissionOption{
	{OptionID: AllowOnce, Name: "Allow", Kind: AllowOnce},
	{OptionID: AllowAlways, Name: "Always allow", Kind: AllowAlways},
	{OptionID: RejectOnce, Name: "Reject", Kind: RejectOnce},
	{OptionID: RejectAlways, Name: "Always reject", Kind: RejectAlways},
}

// rejectedAlways is what the model reads when the user rejected every
// call of a tool.
const rejectedAlways = "The user rejected every call of this tool for the rest of the session."

func (ss *acpSession) approve(ctx context.Context, req interaction.Request) interaction.Response {
	if req.Tool == nil {
		return interaction.Response{Cancelled: true}
	}
	name := req.Tool.ToolName
	ss.mu.Lock()
	denied := ss.denied[name]
	ss.mu.Unlock()
	if denied {
		return interaction.Response{Verdict: interaction.VerdictReject, Feedback: rejectedAlways}
	}
	tc := startCall(ss.cwd, req.Tool.ToolCallID, name, req.Tool.Args)
	tc.SessionUpdate = ""
	var res permissionResult
	err := ss.a.conn.call(ctx, "session/request_permission", permissionParams{SessionID: ss.id, ToolCall: tc, Options: approvalOptions}, &res)
	if err != nil {
		if ctx.Err() == nil {
			ss.a.log.Warn("session/request_permission", "session", ss.id, "err", err)
		}
		return interaction.Response{Cancelled: true}
	}
	if res.Outcome.Outcome != "selected" {
		return interaction.Response{Cancelled: true}
	}
	switch res.Outcome.OptionID {
	case AllowOnce:
		return interaction.Response{Verdict: interaction.VerdictApprove}
	case AllowAlways:
		return interaction.Response{Verdict: interaction.VerdictAlways}
	case RejectAlways:
		ss.mu.Lock()
		ss.denied[name] = true
		ss.mu.Unlock()
		return interaction.Response{Verdict: interaction.VerdictReject, Feedback: rejectedAlways}
	}
	return interaction.Response{Verdict: interaction.VerdictReject, Feedback: "The user rejected this call."}
}

// question asks a confirm or a select through a permission request whose
// options are the answers.
func (ss *acpSession) question(ctx context.Context, req interaction.Request) interaction.Response {
	var opts []permissionOption
	if req.Kind == interaction.KindConfirm {
		opts = []permissionOption{{OptionID: "yes", Name: "Yes", Kind: AllowOnce}, {OptionID: "no", Name: "No", Kind: RejectOnce}}
	} else {
		for i, o := range req.Options {
			opts = append(opts, permissionOption{OptionID: fmt.Sprintf("option-%d", i), Name: o, Kind: AllowOnce})
		}
	}
	title := req.Title
	if req.Message != "" {
		title = strings.TrimSpace(title + "\n" + req.Message)
	}
	callID := "question-" + req.ID
	if req.Tool != nil {
		callID = req.Tool.ToolCallID
	}
	var res permissionResult
	err := ss.a.conn.call(ctx, "session/request_permission", permissionParams{SessionID: ss.id,
		ToolCall: toolCall{ToolCallID: callID, Title: title, Kind: "other"}, Options: opts}, &res)
	if err != nil || res.Outcome.Outcome != "selected" {
		return interaction.Response{Cancelled: true}
	}
	if req.Kind == interaction.KindConfirm {
		return interaction.Response{Confirmed: res.Outcome.OptionID == "yes"}
	}
	for i, o := range req.Options {
		if res.Outcome.OptionID == fmt.Sprintf("option-%d", i) {
			return interaction.Response{Value: o}
		}
	}
	return interaction.Response{Cancelled: true}
}

// replay sends a loaded session's conversation as session/update
// notifications, as session/load asks.
func (ss *acpSession) replay() {
	type call struct {
		name string
		args json.RawMessage
	}
	calls := map[string]call{}
	for _, m := range ss.s.Messages() {
		switch m.Role {
		case llm.RoleUser:
			for _, c := range m.Content {
				switch c.Type {
				case llm.ContentText:
					ss.update(chunkUpdate{SessionUpdate: "user_message_chunk", Content: contentBlock{Type: "text", Text: c.Text}})
				case llm.ContentImage:
					ss.update(chunkUpdate{SessionUpdate: "user_message_chunk", Content: contentBlock{Type: "image", Data: c.Data, MimeType: c.MimeType}})
				}
			}
		case llm.RoleAssistant:
			for _, c := range m.Content {
				switch c.Type {
				case llm.ContentText:
					ss.update(chunkUpdate{SessionUpdate: "agent_message_chunk", Content: contentBlock{Type: "text", Text: c.Text}})
				case llm.ContentThinking:
					if c.Thinking != "" {
						ss.update(chunkUpdate{SessionUpdate: "agent_thought_chunk", Content: contentBlock{Type: "text", Text: c.Thinking}})
					}
				case llm.ContentToolCall:
					calls[c.ID] = call{c.Name, c.Arguments}
					ss.update(startCall(ss.cwd, c.ID, c.Name, c.Arguments))
				}
			}
		case llm.RoleToolResult:
			c := calls[m.ToolCallID]
			ss.update(endCall(ss.cwd, m.ToolCallID, c.name, c.args, m.Content, m.IsError))
		}
	}
	if snap := ss.s.Todo(); len(snap.Items) > 0 {
		ss.update(plan(&snap))
	}
}
