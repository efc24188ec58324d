package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/tool"
)

// run is one pass of the loop, from agent_start to agent_end.
type run struct {
	a     *Agent
	cfg   Config
	ctx   context.Context
	added []*llm.Message
}

// push appends to the shared conversation and to what this run added.
func (r *run) push(m *llm.Message) {
	r.a.mu.Lock()
	r.a.messages = append(r.a.messages, m)
	r.a.mu.Unlock()
	r.added = append(r.added, m)
}

// loop runs the turns of one run. resume, when set, is the assistant
// message ending the conversation whose tool calls (calls) have not run
// yet: the first turn runs them instead of asking the model.
func (r *run) loop(prompts []*llm.Message, resume *llm.Message, calls []llm.Content) []*llm.Message {
	a := r.a
	a.send(Event{Type: EventAgentStart})
	a.send(Event{Type: EventTurnStart})
	for _, p := range prompts {
		if p.Timestamp == 0 {
			p.Timestamp = now()
		}
		a.send(Event{Type: EventMessageStart, Message: p})
		r.push(p)
		a.send(Event{Type: EventMessageEnd, Message: p})
	}
	firstTurn := true
	if resume != nil {
		results := r.executeTools(calls)
		a.send(Event{Type: EventTurnEnd, Message: resume, ToolResults: results})
		if le := r.overLimit(calls, results); le != nil {
			r.stop(le)
			return r.added
		}
		firstTurn = false
	}
	pending := a.takeQueued(&a.steering, r.cfg.SteeringMode)
	for {
		moreTools := true
		for moreTools || len(pending) > 0 {
			if !firstTurn {
				a.send(Event{Type: EventTurnStart})
			}
			firstTurn = false
			if len(pending) > 0 {
				a.sendQueue()
			}
			for _, p := range pending {
				a.send(Event{Type: EventMessageStart, Message: p})
				r.push(p)
				a.send(Event{Type: EventMessageEnd, Message: p})
			}
			pending = nil

			msg := r.stream()
			if msg.StopReason == llm.StopError || msg.StopReason == llm.StopAborted {
				a.send(Event{Type: EventTurnEnd, Message: msg})
				a.send(Event{Type: EventAgentEnd, Messages: r.added})
				return r.added
			}
			var results []*llm.Message
			calls := msg.ToolCalls()
			moreTools = len(calls) > 0
			if moreTools {
				results = r.executeTools(calls)
			}
			a.send(Event{Type: EventTurnEnd, Message: msg, ToolResults: results})
			if le := r.overLimit(calls, results); le != nil {
				// Queued messages stay queued for the next prompt.
				r.stop(le)
				return r.added
			}
			pending = a.takeQueued(&a.steering, r.cfg.SteeringMode)
		}
		if follow := a.takeQueued(&a.followUp, r.cfg.FollowUpMode); len(follow) > 0 {
			pending = follow
			continue
		}
		break
	}
	a.send(Event{Type: EventAgentEnd, Messages: r.added})
	return r.added
}

// stream asks the model for the next assistant message and emits it as
// it arrives.
func (r *run) stream() *llm.Message {
	a := r.a
	cfg := r.cfg
	a.mu.Lock()
	convo := ToLLM(a.messages)
	a.mu.Unlock()
	a.turns++
	specs := make([]llm.Tool, len(cfg.Tools))
	for i, t := range cfg.Tools {
		specs[i] = t.Spec()
	}
	req := &llm.Context{SystemPrompt: cfg.SystemPrompt, Messages: convo, Tools: specs}

	var opts llm.StreamOptions
	if cfg.Options != nil {
		var err error
		if opts, err = cfg.Options(r.ctx, cfg.Model); err != nil {
			return r.failed(err)
		}
	}
	opts.Thinking = cfg.Thinking
	s := cfg.Stream(r.ctx, cfg.Model, req, &opts)
	defer s.Close()
	var msg *llm.Message
	for s.Next() {
		ev := s.Event()
		switch ev.Type {
		case llm.EventStart:
			// The message joins the conversation when it ends, as in pi:
			// while it streams, get_state and get_messages do not show it.
			msg = s.Partial()
			a.send(Event{Type: EventMessageStart, Message: msg})
		case llm.EventDone, llm.EventError:
			// The final message is the partial one, completed in place.
		default:
			a.send(Event{Type: EventMessageUpdate, Message: s.Partial(), Update: &ev})
		}
	}
	if msg == nil { // a stream always starts; this is defence only
		msg = s.Result()
		a.send(Event{Type: EventMessageStart, Message: msg})
	}
	// The partial message lives inside the stream; keep a standalone copy
	// so the conversation does not pin the stream's buffers.
	final := msg.Clone()
	r.push(final)
	a.send(Event{Type: EventMessageEnd, Message: final, Err: s.Err()})
	return final
}

// failed records an assistant message for a request that could not even
// be sent (no credentials, say).
func (r *run) failed(err error) *llm.Message {
	e, ok := llm.AsError(err)
	if !ok {
		e = &llm.Error{Kind: llm.ErrAuth, Message: err.Error(), Err: err}
	}
	return r.errorMessage(e)
}

// errorMessage records and emits an assistant message that ends the run
// with e, without asking the model.
func (r *run) errorMessage(e *llm.Error) *llm.Message {
	m := r.cfg.Model
	msg := &llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{}, API: m.API, Provider: m.Provider, Model: m.ID,
		StopReason: llm.StopError, ErrorMessage: e.Error(), Timestamp: now()}
	if r.ctx.Err() != nil {
		msg.StopReason, msg.ErrorMessage = llm.StopAborted, "Request was aborted."
	}
	r.push(msg)
	r.a.send(Event{Type: EventMessageStart, Message: msg})
	r.a.send(Event{Type: EventMessageEnd, Message: msg, Err: e})
	return msg
}

// overLimit checks, after a turn's tool calls have run, whether the run
// must end instead of asking the model again: the same call failed
// MaxSameToolFailures times in a row, or MaxTurns turns are done. An
// abort is left to the next request, which ends aborted.
func (r *run) overLimit(calls []llm.Content, results []*llm.Message) *LimitError {
	if len(calls) == 0 || r.ctx.Err() != nil {
		return nil
	}
	a := r.a
	if maxFail := limit(r.cfg.MaxSameToolFailures, DefaultMaxSameToolFailures); maxFail > 0 {
		for i, c := range calls {
			if !results[i].IsError {
				a.failedSig, a.failedN = "", 0
				continue
			}
			args := canonicalArgs(c.Arguments)
			if sig := c.Name + "\x00" + args; sig == a.failedSig {
				a.failedN++
			} else {
				a.failedSig, a.failedN = sig, 1
			}
			if a.failedN >= maxFail {
				return &LimitError{ErrRepeatedToolFailure, fmt.Sprintf(
					"Run stopped: the tool call %s %s failed %d times in a row with the same arguments. Prompt again to continue.",
					c.Name, preview(args, 200), a.failedN)}
			}
		}
	}
	if maxTurns := limit(r.cfg.MaxTurns, DefaultMaxTurns); maxTurns > 0 && a.turns >= maxTurns {
		return &LimitError{ErrTurnLimit, fmt.Sprintf(
			"Run stopped after %d turns, the limit for one prompt, while the model was still calling tools. Prompt again to continue.", a.turns)}
	}
	return nil
}

// stop ends the run with a turn whose assistant message is the error le,
// as a failed model request would: clients see stopReason "error" and the
// reason in errorMessage, and the run's outcome is a failure.
func (r *run) stop(le *LimitError) {
	r.a.send(Event{Type: EventTurnStart})
	msg := r.errorMessage(&llm.Error{Kind: KindRunLimit, Message: le.Message, Err: le})
	r.a.send(Event{Type: EventTurnEnd, Message: msg})
	r.a.send(Event{Type: EventAgentEnd, Messages: r.added})
}

// canonicalArgs is a call's arguments re-encoded with sorted keys and no
// spaces, so that the same call written twice compares equal.
func canonicalArgs(raw json.RawMessage) string {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return string(raw)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return string(raw)
	}
	return string(b)
}

// preview cuts s to at most n bytes, on a rune boundary, marking the cut.
func preview(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// executeTools runs the calls of one assistant message: each is announced
// and checked in call order, the approved ones run in parallel (or in
// sequence), and the results are recorded in call order whatever order
// they finish in.
func (r *run) executeTools(calls []llm.Content) []*llm.Message {
	a := r.a
	results := make([]tool.Result, len(calls))
	errs := make([]bool, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		call := tool.Call{ID: c.ID, Name: c.Name, Args: c.Arguments}
		a.send(Event{Type: EventToolExecutionStart, ToolCallID: c.ID, ToolName: c.Name, Args: c.Arguments})
		if r.ctx.Err() != nil {
			// Aborted: the calls not yet started neither ask nor run,
			// whatever the policy says, so nothing starts after an abort.
			results[i] = notRun(r.ctx)
			errs[i] = true
			r.endTool(call, &results[i], 0)
			continue
		}
		t := r.find(c.Name)
		if t == nil {
			results[i] = tool.Errorf("Tool %s not found", c.Name)
			errs[i] = true
			r.endTool(call, &results[i], 0)
			continue
		}
		if r.cfg.BeforeToolCall != nil {
			d := r.cfg.BeforeToolCall(r.ctx, call)
			if !d.Run {
				if d.Result != nil {
					results[i] = *d.Result
				} else {
					results[i] = tool.Errorf("Tool execution was blocked")
				}
				if r.ctx.Err() != nil && d.Result == nil {
					results[i] = tool.Errorf("Tool call aborted")
				}
				results[i].IsError = true
				errs[i] = true
				r.endTool(call, &results[i], 0)
				continue
			}
			if d.Args != nil {
				call.Args = d.Args
			}
		}
		exec := func(i int, call tool.Call) {
			start := time.Now()
			res := r.execute(t, call)
			results[i] = res
			errs[i] = res.IsError
			r.endTool(call, &results[i], time.Since(start))
		}
		if r.cfg.Sequential {
			exec(i, call)
			continue
		}
		wg.Add(1)
		go func(i int, call tool.Call) {
			defer wg.Done()
			exec(i, call)
		}(i, call)
	}
	wg.Wait()

	msgs := make([]*llm.Message, len(calls))
	for i, c := range calls {
		m := &llm.Message{Role: llm.RoleToolResult, ToolCallID: c.ID, ToolName: c.Name,
			Content: results[i].Content, Details: details(results[i].Details), IsError: errs[i], Timestamp: now()}
		if m.Content == nil {
			m.Content = []llm.Content{}
		}
		a.send(Event{Type: EventMessageStart, Message: m})
		r.push(m)
		a.send(Event{Type: EventMessageEnd, Message: m})
		msgs[i] = m
	}
	return msgs
}

func (r *run) find(name string) tool.Tool {
	for _, t := range r.cfg.Tools {
		if t.Spec().Name == name {
			return t
		}
	}
	return nil
}

// execute runs one tool, turning a panic into an error result: a broken
// tool must not take the server down.
func (r *run) execute(t tool.Tool, call tool.Call) (res tool.Result) {
	defer func() {
		if p := recover(); p != nil {
			res = tool.Errorf("Tool %s failed: %v", call.Name, p)
		}
	}()
	update := func(partial tool.Result) {
		r.a.send(Event{Type: EventToolExecutionUpdate, ToolCallID: call.ID, ToolName: call.Name, Args: call.Args, Partial: &partial})
	}
	return t.Execute(r.ctx, call, update)
}

func (r *run) endTool(call tool.Call, res *tool.Result, d time.Duration) {
	r.a.send(Event{Type: EventToolExecutionEnd, ToolCallID: call.ID, ToolName: call.Name, Args: call.Args, Result: res, IsError: res.IsError, Duration: d})
}

// notRun is the result of a call an abort kept from starting; the
// cancellation's cause, when the canceller gave one, says why.
func notRun(ctx context.Context) tool.Result {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return tool.Errorf("Tool call not run: %v", cause)
	}
	return tool.Errorf("Tool call aborted before it ran")
}

// details encodes a tool's details for the transcript.
func details(d any) json.RawMessage {
	switch v := d.(type) {
	case nil:
		return nil
	case json.RawMessage:
		return v
	}
	b, err := json.Marshal(d)
	if err != nil {
		return json.RawMessage(fmt.Sprintf(`{"error":%q}`, "details not encodable: "+err.Error()))
	}
	return b
}
