package acp

import (
	"context"
	"strings"

	"github.com/agentd-dev/agentd/internal/interaction"
)

// The questions ACP's permission request cannot carry (a line of text, a
// text to edit, a form) go to a client that advertises form elicitation
// as elicitation/create in form mode: the question becomes a flat schema,
// the answer its content. Without it they are answered dismissed.

// elicitationCaps is clientCapabilities.elicitation: a mode is supported
// only when its object is present and not null.
type elicitationCaps struct {
	Form *struct{} `json:"form"`
	URL  *struct{} `json:"url"`
}

type elicitParams struct {
	SessionID       string       `json:"sessionId"`
	ToolCallID      string       `json:"toolCallId,omitempty"`
	Mode            string       `json:"mode"`
	Message         string       `json:"message"`
	RequestedSchema elicitSchema `json:"requestedSchema"`
}

type elicitSchema struct {
	Type       string                    `json:"type"`
	Title      string                    `json:"title,omitempty"`
	Properties map[string]elicitProperty `json:"properties"`
	Required   []string                  `json:"required,omitempty"`
}

type elicitProperty struct {
	Type        string   `json:"type"`
	Title       string   `json:"title,omitempty"`
	Description string   `json:"description,omitempty"`
	Default     any      `json:"default,omitempty"`
	Enum        []string `json:"enum,omitempty"`
}

type elicitResult struct {
	Action  string         `json:"action"`
	Content map[string]any `json:"content"`
}

// canElicit tells whether the client takes form elicitations.
func (a *Agent) canElicit() bool {
	c := a.clientCaps()
	return c.Elicitation != nil && c.Elicitation.Form != nil
}

// elicitSchemaOf is the form that asks req, and the property an input's
// or an editor's answer comes in.
func elicitSchemaOf(req interaction.Request) elicitSchema {
	s := elicitSchema{Type: "object", Title: req.Title, Properties: map[string]elicitProperty{}}
	switch req.Kind {
	case interaction.KindInput:
		s.Properties["value"] = elicitProperty{Type: "string", Title: "Answer", Description: req.Placeholder}
		s.Required = []string{"value"}
	case interaction.KindEditor:
		s.Properties["value"] = elicitProperty{Type: "string", Title: "Text", Default: nonEmpty(req.Prefill)}
		s.Required = []string{"value"}
	case interaction.KindForm:
		for _, f := range req.Fields {
			p := elicitProperty{Type: string(f.Type), Title: f.Label, Description: f.Description, Default: f.Default}
			if f.Type == interaction.FieldSelect {
				p.Type, p.Enum = "string", f.Options
			}
			s.Properties[f.Name] = p
			if f.Required {
				s.Required = append(s.Required, f.Name)
			}
		}
	}
	return s
}

func nonEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// elicit asks req (input, editor or form) with elicitation/create; a
// decline, a cancel or a failed request is a dismissal.
func (ss *acpSession) elicit(ctx context.Context, req interaction.Request) interaction.Response {
	msg := strings.TrimSpace(req.Title + "\n" + req.Message)
	if msg == "" {
		msg = "The agent asks a question."
	}
	p := elicitParams{SessionID: ss.id, Mode: "form", Message: msg, RequestedSchema: elicitSchemaOf(req)}
	if req.Tool != nil {
		p.ToolCallID = req.Tool.ToolCallID
	}
	var res elicitResult
	if err := ss.a.conn.call(ctx, "elicitation/create", p, &res); err != nil {
		if ctx.Err() == nil {
			ss.a.log.Warn("elicitation/create", "session", ss.id, "err", err)
		}
		return interaction.Response{Cancelled: true}
	}
	if res.Action != "accept" {
		return interaction.Response{Cancelled: true}
	}
	if req.Kind == interaction.KindForm {
		if res.Content == nil {
			res.Content = map[string]any{}
		}
		return interaction.Response{Values: res.Content}
	}
	v, ok := res.Content["value"].(string)
	if !ok {
		return interaction.Response{Cancelled: true}
	}
	return interaction.Response{Value: v}
}
