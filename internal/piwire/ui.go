package piwire

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/tool"
)

// The options of a tool-approval dialog. pi's extension UI has no
// approval dialog, so approvals travel as a select; a value that is not
// one of these is taken as a rejection whose text is the feedback for
// the model.
const (
	OptAllow  = "Allow"
	OptAlways = "Always allow this tool in this session"
	OptSkip   = "Skip"
	OptReject = "Reject"
)

// Dialog is the method-specific part of an extension_ui_request: what pi's
// RPC mode and the pi-server protocol both send, around their own id field.
type Dialog struct {
	Method      string   `json:"method"`
	Title       string   `json:"title,omitempty"`
	Message     string   `json:"message,omitempty"`
	Options     []string `json:"options,omitempty"`
	Placeholder string   `json:"placeholder,omitempty"`
	Prefill     string   `json:"prefill,omitempty"`
	// Questions are the fields of an interview (a form), pi-server only.
	Questions []interaction.Field `json:"questions,omitempty"`
	Timeout   int64               `json:"timeout,omitempty"`
}

// NewDialog maps a pending interaction to a dialog. Forms become an
// interview when interview is true, else an editor over a JSON object of
// the fields (pi's RPC mode has no form dialog). ok is false for kinds
// with no dialog.
func NewDialog(r interaction.Request, interview bool) (d Dialog, ok bool) {
	d = Dialog{Title: r.Title, Message: r.Message}
	if !r.ExpiresAt.IsZero() {
		d.Timeout = max(time.Until(r.ExpiresAt).Milliseconds(), 1)
	}
	switch r.Kind {
	case interaction.KindApproval:
		d.Method = "select"
		if d.Title == "" && r.Tool != nil {
			call := tool.Call{ID: r.Tool.ToolCallID, Name: r.Tool.ToolName, Args: r.Tool.Args}
			d.Title = "Allow " + r.Tool.ToolName + "?"
			if key := interaction.KeyArgumentValue(call); key != "" {
				d.Title = fmt.Sprintf("Allow %s: %s?", r.Tool.ToolName, key)
			}
		}
		if d.Message == "" && r.Tool != nil {
			d.Message = string(r.Tool.Args)
		}
		d.Options = []string{OptAllow, OptAlways, OptSkip, OptReject}
	case interaction.KindSelect:
		d.Method, d.Options = "select", r.Options
	case interaction.KindConfirm:
		d.Method = "confirm"
	case interaction.KindInput:
		d.Method, d.Placeholder = "input", r.Placeholder
	case interaction.KindEditor:
		d.Method, d.Prefill = "editor", r.Prefill
	case interaction.KindForm:
		if interview {
			d.Method, d.Questions = "interview", r.Fields
			break
		}
		d.Method = "editor"
		values := map[string]any{}
		for _, fl := range r.Fields {
			values[fl.Name] = fl.Default
		}
		pre, _ := json.MarshalIndent(values, "", "  ")
		d.Prefill = string(pre)
	default:
		return Dialog{}, false
	}
	if d.Title == "" {
		d.Title, d.Message = d.Message, ""
	}
	return d, true
}

// Answer is a client's reply to a dialog, whichever protocol carried it.
type Answer struct {
	Value     *string
	Confirmed *bool
	Cancelled bool
	// Responses answer an interview.
	Responses map[string]any
}

// Response turns a client's answer into the answer for r.
func (a Answer) Response(r interaction.Request) (interaction.Response, error) {
	if a.Cancelled {
		return interaction.Response{Cancelled: true}, nil
	}
	switch r.Kind {
	case interaction.KindApproval:
		if a.Value == nil {
			if a.Confirmed != nil && *a.Confirmed {
				return interaction.Response{Verdict: interaction.VerdictApprove}, nil
			}
			return interaction.Response{Verdict: interaction.VerdictReject}, nil
		}
		switch *a.Value {
		case OptAllow:
			return interaction.Response{Verdict: interaction.VerdictApprove}, nil
		case OptAlways:
			return interaction.Response{Verdict: interaction.VerdictAlways}, nil
		case OptSkip:
			return interaction.Response{Verdict: interaction.VerdictSkip}, nil
		case OptReject:
			return interaction.Response{Verdict: interaction.VerdictReject}, nil
		}
		return interaction.Response{Verdict: interaction.VerdictReject, Feedback: *a.Value}, nil
	case interaction.KindConfirm:
		return interaction.Response{Confirmed: a.Confirmed != nil && *a.Confirmed}, nil
	case interaction.KindForm:
		if a.Responses != nil {
			return interaction.Response{Values: a.Responses}, nil
		}
		if a.Value == nil {
			return interaction.Response{}, fmt.Errorf("a form is answered with a JSON object in value")
		}
		var values map[string]any
		if err := json.Unmarshal([]byte(*a.Value), &values); err != nil {
			return interaction.Response{}, fmt.Errorf("form answer is not a JSON object: %w", err)
		}
		return interaction.Response{Values: values}, nil
	default:
		if a.Value == nil {
			return interaction.Response{}, fmt.Errorf("answer has no value")
		}
		return interaction.Response{Value: *a.Value}, nil
	}
}
