package convapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/health"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
)

// stepPayload is rest.step's payload.
type stepPayload struct {
	SessionID  string `json:"sessionId,omitempty"`
	Model      string `json:"model,omitempty"`
	AutoAlways bool   `json:"autoAlways,omitempty"`
	AutoNext   int    `json:"autoNext,omitempty"`
}

// stepAnswer is rest.step's answer: the HTTP body, and the seq the step
// started after, for the wait for its first token.
type stepAnswer struct {
	StepResponse
	Seq uint64 `json:"seq"`
}

func (s *Server) step(w http.ResponseWriter, r *http.Request, p params) error {
	var pl stepPayload
	var branch string
	sub, h, err := s.command(w, r, p, commandRequest{name: "rest.step", rate: server.RateData, body: true,
		decode: func(o object) (any, string, error) {
			var err error
			pl, branch, err = s.decodeStep(o, designPath(r))
			return &pl, pl.SessionID, err
		},
		check: func(_ *server.Hosted, at *attachment) error {
			if err := checkBranch(branch); err != nil {
				return err
			}
			if at != nil {
				// PUT's auto_confirm: always for this attachment, or a
				// count given once.
				s.att.update(at.id, func(a *attachment) {
					if a.autoAlways {
						pl.AutoAlways = true
					}
					if a.autoNext > 0 && pl.AutoNext == 0 {
						pl.AutoNext, a.autoNext = a.autoNext, 0
					}
				})
			}
			return nil
		}})
	if err != nil {
		return err
	}
	var ans stepAnswer
	if err := unmarshalInto(sub.data, &ans); err != nil {
		return err
	}
	if !sub.replayed {
		if msg, failed := s.awaitStart(r.Context(), h.Session(), ans.Seq); failed {
			return withFields(fault.New(fault.Failed, msg), map[string]any{"status": "error", "session_id": pl.SessionID})
		}
	}
	writeJSON(w, http.StatusOK, ans.StepResponse)
	return nil
}

// designPath reports whether a request came by the design document's
// /api/conversations paths rather than the shipped /api/v2 wire.
func designPath(r *http.Request) bool {
	return !strings.HasPrefix(r.URL.Path, "/api/v2/")
}

// sessionID reads the session_id that step, interrupt and rerun name.
// gptme's clients always send it, and gptme answers 400 "session_id is
// required" without it, so the /api/v2 wire requires it; the design
// document's requests have none, so on its paths it may be left out.
func sessionID(o object, design bool) (string, error) {
	if design {
		return o.optionalStrRequired("session_id")
	}
	return o.requiredStr("session_id")
}

// attachmentNamed reads the body of interrupt and rerun, whose only
// field is the attachment they name (see sessionID); request is its
// wire type.
func attachmentNamed(o object, design bool, request any) (string, error) {
	if err := o.only(fieldNames(request)...); err != nil {
		return "", err
	}
	return sessionID(o, design)
}

// decodeStep reads step's body; design tells whether the request came
// by the design document's paths (see sessionID).
func (s *Server) decodeStep(o object, design bool) (stepPayload, string, error) {
	var pl stepPayload
	if err := o.only(fieldNames(StepRequest{})...); err != nil {
		return pl, "", err
	}
	sid, err := sessionID(o, design)
	if err != nil {
		return pl, "", err
	}
	pl.SessionID = sid
	if m, _, err := o.str("model"); err != nil {
		return pl, "", err
	} else if m != "" {
		if _, err := s.findModel(m); err != nil {
			return pl, "", err
		}
		pl.Model = m
	}
	if _, _, err := o.boolean("stream"); err != nil {
		return pl, "", err
	}
	if acp, _, err := o.boolean("use_acp"); err != nil {
		return pl, "", err
	} else if acp {
		return pl, "", fault.New(fault.Invalid, "use_acp is not supported: agentd runs its own agent")
	}
	if _, _, err := o.integer("max_tokens"); err != nil {
		return pl, "", err
	}
	for _, k := range []string{"temperature", "top_p"} {
		if _, _, err := o.number(k); err != nil {
			return pl, "", err
		}
	}
	branch, err := branchOf(o)
	if err != nil {
		return pl, "", err
	}
	pl.AutoAlways, pl.AutoNext, err = o.autoConfirm()
	return pl, branch, err
}

// awaitStart waits, up to StepWait, for a step's run to show it started
// (its first token, a tool call, a question, its end) or failed early (a
// refused request, a bad key): a client learns of an early failure in the
// step's answer, as gptme's clients expect.
func (s *Server) awaitStart(ctx context.Context, sess *session.Session, after uint64) (string, bool) {
	type verdict struct {
		failed bool
		msg    string
	}
	ch := make(chan verdict, 1)
	decide := func(ev session.Event) {
		var v *verdict
		if a := ev.Agent; a != nil {
			switch {
			case a.Type == "message_update" && a.Update != nil && a.Update.Type == llm.EventTextDelta:
				v = &verdict{}
			case a.Type == "message_end" && a.Message != nil && a.Message.Role == llm.RoleAssistant:
				if a.Message.StopReason == llm.StopError {
					v = &verdict{true, a.Message.ErrorMessage}
				} else {
					v = &verdict{}
				}
			case a.Type == "tool_execution_start":
				v = &verdict{}
			}
		} else {
			switch {
			case ev.Type == session.EventInteractionRequested:
				v = &verdict{}
			case ev.Type == session.EventStateChanged && ev.State == session.StateIdle:
				if ev.Outcome == session.OutcomeFailed {
					v = &verdict{true, "Generation failed"}
				} else {
					v = &verdict{}
				}
			}
		}
		if v != nil {
			select {
			case ch <- *v:
			default:
			}
		}
	}
	missed, _, unsubscribe := sess.SubscribeAfter(after, decide)
	defer unsubscribe()
	for _, ev := range missed {
		decide(ev)
	}
	t := time.NewTimer(s.opt.StepWait)
	defer t.Stop()
	select {
	case v := <-ch:
		if v.failed && v.msg == "" {
			v.msg = "Generation failed"
		}
		return v.msg, v.failed
	case <-t.C:
	case <-ctx.Done():
	}
	return "", false
}

func (s *Server) runStep(_ context.Context, c *call) (any, error) {
	var p stepPayload
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	sess := c.h.Session()
	if sess.Running() {
		return nil, fault.New(fault.Conflict, "Generation already in progress")
	}
	if p.Model != "" {
		m, err := s.findModel(p.Model)
		if err != nil {
			return nil, err
		}
		if cur := sess.Model(); cur == nil || cur.Provider != m.Provider || cur.ID != m.ID {
			if err := sess.SetModel(m); err != nil {
				return nil, stepError(err)
			}
		}
	}
	if b := s.srv.Breakers().Provider(sess.Model().Provider); b.State() == health.StateOpen {
		return nil, fault.Errorf(fault.Unavailable, "Circuit breaker open for provider %s; retry later", sess.Model().Provider)
	}
	if !sess.ConfirmAll() {
		if err := sess.SetConfirmAll(true); err != nil {
			return nil, stepError(err)
		}
	}
	seq := sess.Seq()
	if err := sess.Step(session.StepOptions{AutoConfirm: p.AutoAlways, AutoConfirmNext: p.AutoNext}); err != nil {
		return nil, stepError(err)
	}
	return stepAnswer{StepResponse{Status: "ok", Message: "Step started", SessionID: p.SessionID}, seq}, nil
}

func stepError(err error) error {
	if fault.CodeOf(err) == fault.Busy {
		return fault.New(fault.Conflict, "Generation already in progress")
	}
	return err
}

func (s *Server) interrupt(w http.ResponseWriter, r *http.Request, p params) error {
	return s.answerCommand(w, r, p, commandRequest{name: "rest.interrupt", rate: server.RateControl, body: true,
		decode: func(o object) (any, string, error) {
			sid, err := attachmentNamed(o, designPath(r), InterruptRequest{})
			return nil, sid, err
		}})
}

func (s *Server) runInterrupt(ctx context.Context, c *call) (any, error) {
	sess := c.h.Session()
	active := sess.Running()
	for _, req := range sess.Interactions() {
		if req.Kind == interaction.KindApproval {
			active = true
		}
	}
	if !active {
		return StatusResponse{Status: "ok", Message: "Already interrupted or not generating"}, nil
	}
	// Abort returns once the run has ended: nothing of it runs after the
	// answer.
	sess.Abort()
	if err := sess.Wait(ctx); err != nil {
		return nil, fault.New(fault.Timeout, "Interrupt requested; the run has not stopped yet")
	}
	return StatusResponse{Status: "ok", Message: "Interrupted"}, nil
}

func (s *Server) rerun(w http.ResponseWriter, r *http.Request, p params) error {
	return s.answerCommand(w, r, p, commandRequest{name: "rest.rerun", rate: server.RateData, body: true,
		decode: func(o object) (any, string, error) {
			sid, err := attachmentNamed(o, designPath(r), RerunRequest{})
			return nil, sid, err
		}})
}

func (s *Server) runRerun(_ context.Context, c *call) (any, error) {
	sess := c.h.Session()
	if sess.Running() {
		return nil, fault.New(fault.Conflict, "Cannot rerun while generation is in progress")
	}
	msgs := sess.Messages()
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		// An answer an interrupt or a failure cut off before it said
		// anything is not the one to run again.
		cutOff := m.StopReason == llm.StopAborted || m.StopReason == llm.StopError
		if m.Role == llm.RoleAssistant && (len(m.Content) > 0 || !cutOff) {
			last = i
			break
		}
	}
	if last < 0 {
		return nil, fault.New(fault.Invalid, "No assistant message found")
	}
	calls := msgs[last].ToolCalls()
	if len(calls) == 0 {
		return nil, fault.New(fault.Invalid, "No tool uses found in the last assistant message")
	}
	var ids []string
	if last == len(msgs)-1 {
		// Its calls have no results yet (a restart, an interrupt): the
		// step runs them, each through confirmation.
		for _, tc := range calls {
			ids = append(ids, toolID(tc.ID))
		}
	} else {
		// The calls ran: a copy of them, with new call ids, runs again.
		am := msgs[last]
		cp := &llm.Message{Role: llm.RoleAssistant, API: am.API, Provider: am.Provider, Model: am.Model,
			StopReason: llm.StopToolUse, Timestamp: time.Now().UnixMilli()}
		suffix := "-rerun-" + newAttachmentID()[:8]
		for _, tc := range calls {
			id := tc.ID + suffix
			cp.Content = append(cp.Content, llm.ToolCall(id, tc.Name, append([]byte(nil), tc.Arguments...)))
			ids = append(ids, toolID(id))
		}
		if err := sess.Append(cp); err != nil {
			return nil, editBusy(err, "rerun")
		}
	}
	if !sess.ConfirmAll() {
		if err := sess.SetConfirmAll(true); err != nil {
			return nil, err
		}
	}
	if err := sess.Step(session.StepOptions{}); err != nil {
		return nil, editBusy(err, "rerun")
	}
	return RerunResponse{Status: "ok", Message: fmt.Sprintf("Re-running %d tool(s)", len(ids)), ToolIDs: ids}, nil
}
