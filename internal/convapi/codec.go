package convapi

import (
	"encoding/json"
	"strconv"
	"sync"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/tool"
)

// codec encodes session events as this face's SSE frames. Each session
// event becomes zero, one or more gptme events, written as one frame
// unit: "id: <seq>\ndata: <json>\n\n" per event; when there are several,
// their ids are "<seq>.1", "<seq>.2", … (eventID), so a client resuming
// after any one of them gets exactly the ones after it.
//
// The mapping:
//
//	message_start (assistant)         generation_started
//	message_update (text delta)       generation_progress{token}, merged for a lagging client
//	message_update (thinking)         generation_progress{token} in <thinking> tags, merged likewise
//	message_end (assistant)           message_added, generation_complete (+ error when it failed)
//	message_end (any other)           message_added
//	interaction_requested (approval)  tool_pending{auto_confirm: false}
//	interaction_requested (question)  elicit_pending
//	interaction_resolved (approval, run) tool_executing
//	tool_execution_update             tool_output (the output so far; the newest supersedes)
//	tool_execution_end (it ran)       tool_complete{duration_ms, success}
//	state_changed → idle, cancelled   interrupted, run_ended{outcome}
//	state_changed → idle (a run ended) run_ended{outcome}
//	model / thinking / name changed   config_changed
//	compaction_start, compaction_end  compaction_started, compaction_ended (+ error when it failed)
//	auto_retry_start, auto_retry_end  retry_started, retry_ended
//	todo_updated                      todo_updated
//
// A tool call that runs without asking (allowed by the policy or a grant)
// has no tool_pending or tool_executing: its output, result and
// tool_complete say what happened.
type codec struct {
	requests *requestIDs
	// messages finds a loaded session's messages, for conversation_edited
	// (the event says where the conversation changed; the log is read as
	// it stands when the event is encoded, on the session's emitting
	// goroutine, so a replayed one shows the log as it is now).
	messages func(sessionID string) []*llm.Message
}

// Encode implements server.Codec.
func (cd *codec) Encode(sessionID string, ev session.Event) server.Frame {
	if a := ev.Agent; a != nil {
		return cd.agentEvent(sessionID, ev, a)
	}
	var f []byte
	switch ev.Type {
	case session.EventInteractionRequested:
		if ev.Interaction == nil {
			return server.Frame{}
		}
		r := ev.Interaction.Request
		if r.Kind == interaction.KindApproval {
			if r.Tool == nil {
				return server.Frame{}
			}
			id := toolID(r.Tool.ToolCallID)
			cd.requests.put(id, r.ID)
			f = appendEvent(f, ev.Seq, ToolPendingEvent{Type: "tool_pending", ToolID: id, ToolUse: toolUseOf(r.Tool.ToolName, r.Tool.Args)})
		} else {
			f = appendEvent(f, ev.Seq, elicitEvent(r))
		}
	case session.EventInteractionResolved:
		in := ev.Interaction
		if in == nil || in.Request.Kind != interaction.KindApproval || in.Request.Tool == nil || in.Resolution == nil {
			return server.Frame{}
		}
		if in.Resolution.By != interaction.ResolvedAnswered || !runs(in.Resolution.Response) {
			return server.Frame{}
		}
		f = appendEvent(f, ev.Seq, ToolExecutingEvent{Type: "tool_executing", ToolID: toolID(in.Request.Tool.ToolCallID)})
	case session.EventStateChanged:
		if ev.State != session.StateIdle || ev.Outcome == "" {
			return server.Frame{}
		}
		if ev.Outcome == session.OutcomeCancelled {
			f = appendEvent(f, ev.Seq, InterruptedEvent{Type: "interrupted"})
		}
		f = appendEvent(f, ev.Seq, RunEndedEvent{Type: "run_ended", Outcome: string(ev.Outcome)})
	case session.EventModelChanged:
		if ev.Model == nil {
			return server.Frame{}
		}
		f = appendEvent(f, ev.Seq, configChanged(ChatConfig{Model: ev.Model.Provider + "/" + ev.Model.ID}, "model"))
	case session.EventThinkingLevelChanged:
		f = appendEvent(f, ev.Seq, configChanged(ChatConfig{Thinking: string(ev.ThinkingLevel)}, "thinking"))
	case session.EventSessionInfoChanged:
		f = appendEvent(f, ev.Seq, configChanged(ChatConfig{Name: ev.Name}, "name"))
	case session.EventConfigChanged:
		cc := ev.Config
		if cc == nil {
			return server.Frame{}
		}
		var chat ChatConfig
		field := cc.Changed
		switch cc.Changed {
		case "tools":
			chat.Tools = append([]string{}, cc.Tools...)
		case "confirm":
			on := cc.ConfirmAll
			chat.ConfirmAll, field = &on, "confirm_all"
		case "grants":
			chat.AutoConfirm, field = autoConfirmOf(cc.Grants), "auto_confirm"
		case "mode":
			chat.Mode = cc.Mode
		default:
			return server.Frame{}
		}
		f = appendEvent(f, ev.Seq, configChanged(chat, field))
	case session.EventConversationEdited:
		var log []Message
		if cd.messages != nil {
			msgs := cd.messages(sessionID)
			if msgs == nil {
				// Run by another cluster node: this one has no log to send.
				f = appendEvent(f, ev.Seq, editedElsewhere(ev))
				break
			}
			log = wireLog(msgs)
		}
		if log == nil {
			log = []Message{}
		}
		f = appendEvent(f, ev.Seq, ConversationEditedEvent{Type: "conversation_edited", Index: ev.Index, Truncated: ev.Truncated,
			Log: log, Branches: map[string][]Message{"main": log}})
	case session.EventCompactionStart:
		f = appendEvent(f, ev.Seq, CompactionStartedEvent{Type: "compaction_started", Reason: ev.Reason})
	case session.EventCompactionEnd:
		f = appendEvent(f, ev.Seq, CompactionEndedEvent{Type: "compaction_ended", Reason: ev.Reason, Aborted: ev.Aborted, WillRetry: ev.WillRetry, Error: ev.ErrorMessage})
		if ev.ErrorMessage != "" && !ev.Aborted {
			f = appendEvent(f, ev.Seq, ErrorEvent{Type: "error", Error: ev.ErrorMessage})
		}
	case session.EventAutoRetryStart:
		f = appendEvent(f, ev.Seq, RetryStartedEvent{Type: "retry_started", Attempt: ev.Attempt, MaxAttempts: ev.MaxAttempts, DelayMs: ev.DelayMs, Error: ev.ErrorMessage})
	case session.EventAutoRetryEnd:
		f = appendEvent(f, ev.Seq, RetryEndedEvent{Type: "retry_ended", Attempt: ev.Attempt, Success: ev.Success, Error: ev.FinalError})
	case session.EventTodoUpdated:
		if ev.Todo == nil {
			return server.Frame{}
		}
		te := TodoEvent{Type: "todo_updated", Items: []TodoItem{}, Done: ev.Todo.Done, Total: ev.Todo.Total}
		for _, it := range ev.Todo.Items {
			te.Items = append(te.Items, TodoItem{ID: it.ID, Content: it.Content, Status: string(it.Status)})
		}
		f = appendEvent(f, ev.Seq, te)
	default:
		return server.Frame{}
	}
	return server.Frame{Data: numberParts(f, ev.Seq)}
}

func (cd *codec) agentEvent(sessionID string, ev session.Event, a *agent.Event) server.Frame {
	var f []byte
	switch a.Type {
	case agent.EventMessageStart:
		if a.Message == nil || a.Message.Role != llm.RoleAssistant {
			return server.Frame{}
		}
		f = appendEvent(f, ev.Seq, GenerationStartedEvent{Type: "generation_started"})
	case agent.EventMessageUpdate:
		return progressUpdate(sessionID, ev.Seq, a.Update)
	case agent.EventMessageEnd:
		m := a.Message
		if m == nil {
			return server.Frame{}
		}
		wm := wireMessage(m)
		f = appendEvent(f, ev.Seq, MessageAddedEvent{Type: "message_added", Message: wm})
		if m.Role == llm.RoleAssistant {
			f = appendEvent(f, ev.Seq, GenerationCompleteEvent{Type: "generation_complete", Message: wm})
			if m.StopReason == llm.StopError {
				msg := m.ErrorMessage
				if msg == "" {
					msg = "The model request failed"
				}
				f = appendEvent(f, ev.Seq, ErrorEvent{Type: "error", Error: msg})
			}
		}
	case agent.EventToolExecutionUpdate:
		out := resultText(a.Partial)
		if out == "" {
			// A replayed update keeps no output (the log drops it): the
			// end event has the final one.
			return server.Frame{}
		}
		return server.Frame{
			Data: appendEvent(nil, ev.Seq, ToolOutputEvent{Type: "tool_output", ToolID: toolID(a.ToolCallID), Output: out}),
			// Each update carries the whole output so far: the newest
			// supersedes the one queued before it.
			Key: server.FrameKey{Scope: sessionID, Name: "tool\x00" + a.ToolCallID},
		}
	case agent.EventToolExecutionEnd:
		if a.Result != nil && refused(a.Result.Details) {
			return server.Frame{}
		}
		f = appendEvent(f, ev.Seq, ToolCompleteEvent{Type: "tool_complete", ToolID: toolID(a.ToolCallID),
			DurationMs: float64(a.Duration.Microseconds()) / 1000, Success: !a.IsError})
	default:
		return server.Frame{}
	}
	return server.Frame{Data: numberParts(f, ev.Seq)}
}

// runs reports whether an approval's answer runs the call.
func runs(r interaction.Response) bool {
	if r.Cancelled {
		return false
	}
	switch r.Verdict {
	case interaction.VerdictApprove, interaction.VerdictEdit, interaction.VerdictApproveNext, interaction.VerdictAlways:
		return true
	}
	return false
}

// refused reports whether a tool result is the gate's refusal (the call
// did not run): its details are the gate's ApprovalDetails.
func refused(details any) bool {
	var outcome interaction.Outcome
	switch d := details.(type) {
	case interaction.ApprovalDetails:
		outcome = d.Outcome
	case *interaction.ApprovalDetails:
		if d == nil {
			return false
		}
		outcome = d.Outcome
	case json.RawMessage:
		var v struct {
			Outcome  interaction.Outcome `json:"outcome"`
			Question *string             `json:"question"`
		}
		if json.Unmarshal(d, &v) != nil || v.Question != nil {
			return false // ask_user's details have an outcome too
		}
		outcome = v.Outcome
	default:
		return false
	}
	switch outcome {
	case interaction.OutcomeDenied, interaction.OutcomeSkipped, interaction.OutcomeRejected, interaction.OutcomeTimedOut, interaction.OutcomeCancelled:
		return true
	}
	return false
}

func resultText(r *tool.Result) string {
	if r == nil {
		return ""
	}
	return contentText(r.Content)
}

// autoConfirmOf shows a session's grants.
func autoConfirmOf(g interaction.Grants) *AutoConfirm {
	return &AutoConfirm{Next: g.Next, AllTools: g.AllTools, Tools: append([]string{}, g.Tools...)}
}

func configChanged(chat ChatConfig, field string) ConfigChangedEvent {
	chat.Stream, chat.Interactive = true, true
	return ConfigChangedEvent{Type: "config_changed", Config: ConversationConfig{Chat: chat, Env: map[string]any{}}, ChangedFields: []string{field}}
}

// elicitEvent shows a question of the agent (ask_user) in gptme's
// elicitation form.
func elicitEvent(r interaction.Request) ElicitPendingEvent {
	e := ElicitPendingEvent{Type: "elicit_pending", ElicitID: r.ID, Prompt: r.Title, Description: r.Message}
	switch r.Kind {
	case interaction.KindSelect:
		e.ElicitType, e.Options = "choice", r.Options
	case interaction.KindConfirm:
		e.ElicitType = "confirmation"
	case interaction.KindEditor:
		e.ElicitType, e.Default = "text", r.Prefill
	case interaction.KindForm:
		e.ElicitType = "form"
		for _, fd := range r.Fields {
			prompt := fd.Label
			if prompt == "" {
				prompt = fd.Name
			}
			if fd.Description != "" {
				prompt += " (" + fd.Description + ")"
			}
			typ := string(fd.Type)
			switch fd.Type {
			case interaction.FieldString:
				typ = "text"
			case interaction.FieldSelect:
				typ = "choice"
			}
			e.Fields = append(e.Fields, ElicitField{Name: fd.Name, Prompt: prompt, Type: typ, Options: fd.Options, Required: fd.Required, Default: fd.Default})
		}
	default:
		e.ElicitType = "text"
		if r.Placeholder != "" && e.Description == "" {
			e.Description = r.Placeholder
		}
	}
	if e.Prompt == "" {
		e.Prompt = r.Message
		e.Description = ""
	}
	return e
}

// appendEvent appends one SSE frame holding v.
func appendEvent(b []byte, seq uint64, v any) []byte {
	return appendEventID(b, eventID{seq: seq}, v)
}

// appendEventID is appendEvent with a frame's whole id.
func appendEventID(b []byte, id eventID, v any) []byte {
	data := marshal(v)
	b = append(b, "id: "...)
	b = id.appendTo(b)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}

// Thinking streams as gptme's clients show it in a finished message:
// inside <thinking> tags, so the streamed text reads as message_added's
// content will.
const (
	thinkingOpen  = "<thinking>\n"
	thinkingClose = "\n</thinking>\n\n"
)

// progressUpdate is the generation_progress of one streamed fragment of
// text or thinking, or no frame for the rest of a stream.
func progressUpdate(sessionID string, seq uint64, u *llm.Event) server.Frame {
	if u == nil {
		return server.Frame{}
	}
	switch u.Type {
	case llm.EventThinkingStart:
		return server.Frame{Data: progressFrame(seq, thinkingOpen)}
	case llm.EventThinkingEnd:
		return server.Frame{Data: progressFrame(seq, thinkingClose)}
	case llm.EventTextDelta, llm.EventThinkingDelta:
	default:
		return server.Frame{}
	}
	if u.Delta == "" {
		return server.Frame{}
	}
	return server.Frame{
		Data: progressFrame(seq, u.Delta),
		// Consecutive fragments of one block join into one for a client
		// that has fallen behind.
		Key:   server.FrameKey{Scope: sessionID, Name: string(u.Type), Index: u.ContentIndex},
		Seq:   seq,
		Text:  u.Delta,
		Merge: mergeProgress,
		// A few fragments go out in one write; the end of the message
		// takes them along at once.
		Linger: server.StreamLinger,
	}
}

// mergeProgress is Frame.Merge for generation_progress.
func mergeProgress(_ server.FrameKey, seq uint64, text string, _ any) []byte {
	return progressFrame(seq, text)
}

// progressFrame is generation_progress, encoded by hand: it is most of
// what a stream carries.
func progressFrame(seq uint64, token string) []byte {
	b := make([]byte, 0, len(token)+64)
	b = append(b, "id: "...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `
data: {"type":"generation_progress","token":`...)
	b = llm.AppendJSONString(b, token)
	return append(b, "}\n\n"...)
}

// requestIDs remembers which interaction request a tool id stands for,
// so that an answer to a call already settled is told how it was settled
// whatever ids the engine gives its requests. Bounded: once full it
// starts over (an id forgotten is looked up among the pending ones).
type requestIDs struct {
	mu sync.Mutex
	m  map[string]string
}

const maxRequestIDs = 4096

func (r *requestIDs) put(toolID, requestID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil || len(r.m) >= maxRequestIDs {
		r.m = map[string]string{}
	}
	r.m[toolID] = requestID
}

func (r *requestIDs) get(toolID string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.m[toolID]
	return id, ok
}
