package pirpc

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentd-dev/agentd/interaction"
	"github.com/agentd-dev/agentd/tool"
)

// The options of a tool-approval dialog. pi's extension UI has no
// approval dialog, so approvals travel as a select; a value that is not
// one of these is taken as a rejection whose text is the feedback for
// the model.
const (
	optAllow  = "Allow"
	optAlways = "Always allow this tool in this session"
	optSkip   = "Skip"
	optReject = "Reject"
)

type uiRequestFrame struct {
	Type        string   `json:"type"`
	ID          string   `json:"id"`
	Method      string   `json:"method"`
	Title       string   `json:"title,omitempty"`
	Message     string   `json:"message,omitempty"`
	Options     []string `json:"options,omitempty"`
	Placeholder string   `json:"placeholder,omitempty"`
	Prefill     string   `json:"prefill,omitempty"`
	Timeout     int64    `json:"timeout,omitempty"`
}

// uiRequest is the extension_ui_request for a pending interaction.
func uiRequest(r interaction.Request) []byte {
	f := uiRequestFrame{Type: "extension_ui_request", ID: r.ID, Title: r.Title, Message: r.Message}
	if !r.ExpiresAt.IsZero() {
		f.Timeout = max(time.Until(r.ExpiresAt).Milliseconds(), 1)
	}
	switch r.Kind {
	case interaction.KindApproval:
		f.Method = "select"
		if f.Title == "" && r.Tool != nil {
			call := tool.Call{ID: r.Tool.ToolCallID, Name: r.Tool.ToolName, Args: r.Tool.Args}
			f.Title = "Allow " + r.Tool.ToolName + "?"
			if key := interaction.KeyArgumentValue(call); key != "" {
				f.Title = fmt.Sprintf("Allow %s: %s?", r.Tool.ToolName, key)
			}
		}
		if f.Message == "" && r.Tool != nil {
			f.Message = string(r.Tool.Args)
		}
		f.Options = []string{optAllow, optAlways, optSkip, optReject}
	case interaction.KindSelect:
		f.Method, f.Options = "select", r.Options
	case interaction.KindConfirm:
		f.Method = "confirm"
	case interaction.KindInput:
		f.Method, f.Placeholder = "input", r.Placeholder
	case interaction.KindEditor:
		f.Method, f.Prefill = "editor", r.Prefill
	case interaction.KindForm:
		// A form is edited as a JSON object of its fields.
		f.Method = "editor"
		values := map[string]any{}
		for _, fl := range r.Fields {
			values[fl.Name] = fl.Default
		}
		pre, _ := json.MarshalIndent(values, "", "  ")
		f.Prefill = string(pre)
	default:
		return nil
	}
	if f.Title == "" {
		f.Title, f.Message = f.Message, ""
	}
	return marshal(f)
}

// uiResponse turns an extension_ui_response into the answer for r.
func uiResponse(r interaction.Request, c *command) (interaction.Response, error) {
	if c.Cancelled {
		return interaction.Response{Cancelled: true}, nil
	}
	switch r.Kind {
	case interaction.KindApproval:
		if c.Value == nil {
			if c.Confirmed != nil && *c.Confirmed {
				return interaction.Response{Verdict: interaction.VerdictApprove}, nil
			}
			return interaction.Response{Verdict: interaction.VerdictReject}, nil
		}
		switch *c.Value {
		case optAllow:
			return interaction.Response{Verdict: interaction.VerdictApprove}, nil
		case optAlways:
			return interaction.Response{Verdict: interaction.VerdictAlways}, nil
		case optSkip:
			return interaction.Response{Verdict: interaction.VerdictSkip}, nil
		case optReject:
			return interaction.Response{Verdict: interaction.VerdictReject}, nil
		}
		return interaction.Response{Verdict: interaction.VerdictReject, Feedback: *c.Value}, nil
	case interaction.KindConfirm:
		return interaction.Response{Confirmed: c.Confirmed != nil && *c.Confirmed}, nil
	case interaction.KindForm:
		if c.Value == nil {
			return interaction.Response{}, fmt.Errorf("a form is answered with a JSON object in value")
		}
		var values map[string]any
		if err := json.Unmarshal([]byte(*c.Value), &values); err != nil {
			return interaction.Response{}, fmt.Errorf("form answer is not a JSON object: %w", err)
		}
		return interaction.Response{Values: values}, nil
	default:
		if c.Value == nil {
			return interaction.Response{}, fmt.Errorf("answer has no value")
		}
		return interaction.Response{Value: *c.Value}, nil
	}
}
