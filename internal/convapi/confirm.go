package convapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
)

// confirmPayload is rest.confirm's payload.
type confirmPayload struct {
	ToolID   string `json:"toolId"`
	Action   string `json:"action"`
	Content  string `json:"content,omitempty"`
	Count    int    `json:"count,omitempty"`
	Feedback string `json:"feedback,omitempty"`
	AllTools bool   `json:"allTools,omitempty"`
	// BySession: the client named its attachment (the 404 text differs).
	BySession bool `json:"bySession,omitempty"`
}

var confirmActions = map[string]string{
	"confirm": "Tool confirmed", "edit": "Tool edited", "skip": "Tool skipped", "auto": "Tool confirmed",
	"reject": "Tool rejected", "always": "Tool confirmed",
}

func (s *Server) confirm(w http.ResponseWriter, r *http.Request, p params) error {
	return s.answerCommand(w, r, p, commandRequest{name: "rest.confirm", rate: server.RateUIResponse, body: true,
		decode: func(o object) (any, string, error) { return decodeConfirm(o) }})
}

// decodeConfirm reads tool/confirm's body, and the session_id it names.
func decodeConfirm(o object) (confirmPayload, string, error) {
	var pl confirmPayload
	if err := o.only(fieldNames(ConfirmRequest{})...); err != nil {
		return pl, "", err
	}
	sid, err := o.optionalStr("session_id")
	if err != nil {
		return pl, "", err
	}
	idField := "tool_id"
	if !o.present("tool_id") && o.present("id") {
		idField = "id" // the design document's name
	}
	if pl.ToolID, err = o.requiredStr(idField); err != nil {
		return pl, "", err
	}
	if pl.Action, err = o.requiredStr("action"); err != nil {
		return pl, "", err
	}
	if _, ok := confirmActions[pl.Action]; !ok {
		return pl, "", fault.New(fault.Invalid, "Unknown action: "+clip(pl.Action, 100)+" (want confirm, edit, skip, auto, reject or always)")
	}
	switch pl.Action {
	case "edit":
		content, _, err := o.str("content")
		if err != nil || content == "" {
			return pl, "", fault.New(fault.Invalid, "content must be a non-empty string for edit action")
		}
		pl.Content = content
	case "auto":
		pl.Count = 1
		if o.present("count") {
			n, isInt := jsonInt(o["count"])
			if !isInt || n <= 0 || n > 1<<31 || string(o["count"]) == "true" {
				return pl, "", fault.New(fault.Invalid, "count must be a positive integer")
			}
			pl.Count = int(n)
		}
	case "reject":
		fb, _, err := o.str("feedback")
		if err != nil {
			return pl, "", err
		}
		if fb == "" {
			if fb, _, err = o.str("content"); err != nil {
				return pl, "", err
			}
		}
		pl.Feedback = fb
	case "always":
		if pl.AllTools, _, err = o.boolean("all_tools"); err != nil {
			return pl, "", err
		}
	}
	pl.BySession = sid != ""
	return pl, sid, nil
}

// pendingTool shows a pending approval.
func pendingTool(req interaction.Request) (PendingTool, bool) {
	if req.Kind != interaction.KindApproval || req.Tool == nil {
		return PendingTool{}, false
	}
	return PendingTool{ToolID: toolID(req.Tool.ToolCallID), ToolUse: toolUseOf(req.Tool.ToolName, req.Tool.Args)}, true
}

// findRequest finds the pending request a client names: by the id
// clients see (tool_id, elicit_id) or the engine's request id.
func findRequest(sess *session.Session, id string, kind func(interaction.Kind) bool) (interaction.Request, bool) {
	for _, req := range sess.Interactions() {
		if !kind(req.Kind) {
			continue
		}
		if req.ID == id || (req.Tool != nil && req.Kind == interaction.KindApproval && toolID(req.Tool.ToolCallID) == id) {
			return req, true
		}
	}
	return interaction.Request{}, false
}

func isApproval(k interaction.Kind) bool { return k == interaction.KindApproval }

// settled says how a request that is no longer pending ended, and false
// when it knows of no such request: a probe with an answer no request
// accepts, so a request that has just become pending is left alone.
func settled(sess *session.Session, requestID string) (string, bool) {
	err := sess.Answer(requestID, interaction.Response{Value: "\x00"})
	var re *interaction.ResolvedError
	if errors.As(err, &re) {
		how := "answered by another client"
		switch re.By {
		case interaction.ResolvedTimeout:
			how = "timed out: nobody answered in time"
		case interaction.ResolvedCancelled:
			how = "cancelled (interrupted, or the conversation moved on)"
		}
		return how, true
	}
	return "", false
}

func (s *Server) runConfirm(_ context.Context, c *call) (any, error) {
	var p confirmPayload
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	sess := c.h.Session()
	notFound := func() error {
		if p.BySession {
			return fault.New(fault.NotFound, "Tool not found: "+p.ToolID)
		}
		return fault.New(fault.NotFound, "Tool not found in any session for conversation: "+p.ToolID)
	}
	req, ok := findRequest(sess, p.ToolID, isApproval)
	if !ok {
		rid := p.ToolID
		if mapped, ok := s.codec.requests.get(p.ToolID); ok {
			rid = mapped
		}
		if how, ok := settled(sess, rid); ok {
			return nil, fault.New(fault.Conflict, "Tool "+p.ToolID+" was "+how)
		}
		return nil, notFound()
	}
	resp := interaction.Response{Verdict: interaction.VerdictApprove}
	switch p.Action {
	case "edit":
		args, err := editedArgs(req.Tool.ToolName, req.Tool.Args, p.Content)
		if err != nil {
			return nil, err
		}
		resp = interaction.Response{Verdict: interaction.VerdictEdit, Args: args}
	case "skip":
		resp = interaction.Response{Verdict: interaction.VerdictSkip}
	case "auto":
		resp = interaction.Response{Verdict: interaction.VerdictApproveNext, Count: p.Count}
	case "reject":
		resp = interaction.Response{Verdict: interaction.VerdictReject, Feedback: p.Feedback}
	case "always":
		resp = interaction.Response{Verdict: interaction.VerdictAlways, AllTools: p.AllTools}
	}
	if err := sess.Answer(req.ID, resp); err != nil {
		var re *interaction.ResolvedError
		var ve *interaction.ValidationError
		switch {
		case errors.As(err, &re):
			if how, ok := settled(sess, req.ID); ok {
				return nil, fault.New(fault.Conflict, "Tool "+p.ToolID+" was "+how)
			}
			return nil, notFound()
		case errors.Is(err, interaction.ErrNotFound):
			return nil, notFound()
		case errors.As(err, &ve):
			return nil, fault.New(fault.Invalid, "Invalid answer: "+ve.Error())
		}
		return nil, err
	}
	msg := confirmActions[p.Action]
	switch p.Action {
	case "auto":
		msg = fmt.Sprintf("Tool confirmed; the next %d tool calls run without asking", p.Count)
	case "always":
		msg = "Tool confirmed; " + req.Tool.ToolName + " runs without asking for the rest of the conversation"
		if p.AllTools {
			msg = "Tool confirmed; every tool runs without asking for the rest of the conversation"
		}
	}
	return StatusResponse{Status: "ok", Message: msg}, nil
}
