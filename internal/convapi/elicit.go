package convapi

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/server"
)

// elicitPayload is rest.elicit's payload.
type elicitPayload struct {
	ElicitID string         `json:"elicitId"`
	Action   string         `json:"action"`
	Value    any            `json:"value,omitempty"`
	Values   map[string]any `json:"values,omitempty"`
}

func (s *Server) elicit(w http.ResponseWriter, r *http.Request, p params) error {
	return s.answerCommand(w, r, p, commandRequest{name: "rest.elicit", rate: server.RateUIResponse, body: true,
		decode: func(o object) (any, string, error) { return decodeElicit(o) }})
}

// decodeElicit reads elicit/respond's body, and the session_id it names.
func decodeElicit(o object) (elicitPayload, string, error) {
	var pl elicitPayload
	if err := o.only(fieldNames(ElicitRequest{})...); err != nil {
		return pl, "", err
	}
	if !o.present("elicit_id") || !o.present("action") {
		return pl, "", fault.New(fault.Invalid, "elicit_id and action are required")
	}
	id, _, err := o.str("elicit_id")
	if err != nil {
		return pl, "", err
	}
	switch {
	case strings.TrimSpace(id) == "":
		return pl, "", fault.New(fault.Invalid, "elicit_id must not be blank")
	case strings.TrimSpace(id) != id:
		return pl, "", fault.New(fault.Invalid, "elicit_id must not contain leading or trailing whitespace")
	}
	pl.ElicitID = id
	if pl.Action, _, err = o.str("action"); err != nil {
		return pl, "", err
	}
	if pl.Action != "accept" && pl.Action != "decline" && pl.Action != "cancel" {
		return pl, "", fault.New(fault.Invalid, "Unknown action: "+clip(pl.Action, 100)+". Must be accept, decline, or cancel")
	}
	if o.present("value") {
		if err := unmarshalInto(o["value"], &pl.Value); err != nil {
			return pl, "", fault.New(fault.Invalid, "value must be JSON")
		}
	}
	if vals, ok, err := o.obj("values", "values must be an object"); err != nil {
		return pl, "", err
	} else if ok {
		pl.Values = map[string]any{}
		for k, raw := range vals {
			var v any
			if err := unmarshalInto(raw, &v); err != nil {
				return pl, "", fault.New(fault.Invalid, "values must be an object")
			}
			pl.Values[k] = v
		}
	}
	sid, err := o.optionalStr("session_id")
	if err != nil {
		return pl, "", err
	}
	return pl, sid, nil
}

func (s *Server) runElicit(_ context.Context, c *call) (any, error) {
	var p elicitPayload
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	sess := c.h.Session()
	req, ok := findRequest(sess, p.ElicitID, func(k interaction.Kind) bool { return true })
	if !ok {
		if how, ok := settled(sess, p.ElicitID); ok {
			return nil, fault.New(fault.Conflict, "Elicitation "+p.ElicitID+" was "+how)
		}
		return nil, fault.New(fault.NotFound, "Elicitation not found: "+p.ElicitID)
	}
	if req.Kind == interaction.KindApproval {
		return nil, fault.New(fault.Invalid, p.ElicitID+" is a tool call waiting for confirmation: answer it with tool/confirm")
	}
	resp := interaction.Response{Cancelled: true}
	if p.Action == "accept" {
		var err error
		if resp, err = answerOf(req, p); err != nil {
			return nil, err
		}
	}
	if err := sess.Answer(req.ID, resp); err != nil {
		var ve *interaction.ValidationError
		switch {
		case errors.As(err, &ve):
			return nil, fault.New(fault.Invalid, "Invalid answer: "+ve.Error())
		case errors.Is(err, interaction.ErrAlreadyResolved):
			return nil, fault.New(fault.Conflict, "Elicitation "+p.ElicitID+" was already settled")
		case errors.Is(err, interaction.ErrNotFound):
			return nil, fault.New(fault.NotFound, "Elicitation not found: "+p.ElicitID)
		}
		return nil, err
	}
	done := map[string]string{"accept": "Elicitation accepted", "decline": "Elicitation declined", "cancel": "Elicitation cancelled"}
	return StatusResponse{Status: "ok", Message: done[p.Action]}, nil
}

// answerOf turns an accepted elicitation into the answer the question's
// kind takes.
func answerOf(req interaction.Request, p elicitPayload) (interaction.Response, error) {
	bad := func(msg string) (interaction.Response, error) {
		return interaction.Response{}, fault.New(fault.Invalid, msg)
	}
	switch req.Kind {
	case interaction.KindConfirm:
		switch v := p.Value.(type) {
		case bool:
			return interaction.Response{Confirmed: v}, nil
		case string:
			switch strings.ToLower(strings.TrimSpace(v)) {
			case "yes", "true", "y", "1":
				return interaction.Response{Confirmed: true}, nil
			case "no", "false", "n", "0":
				return interaction.Response{Confirmed: false}, nil
			}
		}
		return bad("value must be true or false (or \"yes\"/\"no\") for a confirmation")
	case interaction.KindForm:
		values := p.Values
		if values == nil {
			if m, ok := p.Value.(map[string]any); ok {
				values = m
			}
		}
		if values == nil {
			return bad("values must be an object of the form's fields")
		}
		return interaction.Response{Values: values}, nil
	}
	v, ok := p.Value.(string)
	if !ok {
		if list, isList := p.Value.([]any); isList && len(list) == 1 {
			v, ok = list[0].(string)
		}
	}
	if !ok {
		return bad("value must be a string")
	}
	return interaction.Response{Value: v}, nil
}
