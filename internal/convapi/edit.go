package convapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
)

// editPayload is the payload of rest.edit and rest.delete_message.
type editPayload struct {
	Index    int     `json:"index"`
	Content  *string `json:"content,omitempty"`
	Truncate bool    `json:"truncate,omitempty"`
}

func (s *Server) editMessage(w http.ResponseWriter, r *http.Request, p params) error {
	return s.answerCommand(w, r, p, commandRequest{name: "rest.edit", rate: server.RateData, body: true,
		decode: func(o object) (any, string, error) {
			pl, err := decodeEdit(o, p.index, r.URL.Query().Get("truncate") == "1")
			return pl, "", err
		}})
}

// decodeEdit reads the body of PATCH .../messages/{index}.
func decodeEdit(o object, index int, truncate bool) (editPayload, error) {
	if err := o.only(fieldNames(EditRequest{})...); err != nil {
		return editPayload{}, err
	}
	pl := editPayload{Index: index, Truncate: truncate}
	if v, ok, err := o.str("content"); err != nil {
		return pl, err
	} else if ok {
		pl.Content = &v
	}
	files, hasFiles, err := o.strings("files")
	if err != nil {
		return pl, err
	}
	if len(files) > 0 {
		return pl, fault.New(fault.Invalid, "files are not taken by an edit: add a new message with them")
	}
	if !pl.Truncate && !hasFiles && (pl.Content == nil || strings.TrimSpace(*pl.Content) == "") {
		return pl, fault.New(fault.Invalid, "content or files is required")
	}
	return pl, nil
}

func outOfRange(i, n int) error {
	return fault.New(fault.NotFound, fmt.Sprintf("Message index %d out of range (0-%d)", i, n-1))
}

func editBusy(err error, what string) error {
	if fault.CodeOf(err) == fault.Busy {
		return fault.New(fault.Conflict, "Cannot "+what+" while generation is in progress")
	}
	return err
}

// reappendable reports whether msgs can be added again after an edit
// branched the conversation (gptme keeps the messages after an edited
// one): plain user, assistant and custom messages can, a tool call and
// its result cannot (a call added again would wait for confirmation
// rather than carry its result).
func reappendable(msgs []*llm.Message) bool {
	for _, m := range msgs {
		switch m.Role {
		case llm.RoleUser, llm.RoleCustom:
		case llm.RoleAssistant:
			if len(m.ToolCalls()) > 0 {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// errKeepAfter refuses an edit that would have to carry tool calls onto
// the new branch.
var errKeepAfter = fault.New(fault.Conflict, "The messages after this one include tool calls and their results, which cannot be carried onto the edited branch: edit with ?truncate=1 (the old branch keeps them in the session file)")

// reappend adds msgs again after an edit branched the conversation; the
// old branch keeps them too.
func reappend(sess *session.Session, msgs []*llm.Message) error {
	for _, m := range msgs {
		if err := sess.Append(m.Clone()); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) runEdit(_ context.Context, c *call) (any, error) {
	var p editPayload
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	sess := c.h.Session()
	if sess.Running() {
		return nil, fault.New(fault.Conflict, "Cannot edit while generation is in progress")
	}
	msgs := sess.Messages()
	if p.Index >= len(msgs) {
		return nil, outOfRange(p.Index, len(msgs))
	}
	m := msgs[p.Index]
	changed := p.Content != nil && *p.Content != contentText(m.Content)
	switch {
	case changed && m.Role != llm.RoleUser:
		return nil, fault.New(fault.Invalid, "Can only edit user messages")
	case changed:
		if !p.Truncate && !reappendable(msgs[p.Index+1:]) {
			return nil, errKeepAfter
		}
		content := []llm.Content{llm.Text(*p.Content)}
		for _, b := range m.Content {
			if b.Type == llm.ContentImage {
				content = append(content, b)
			}
		}
		if err := sess.EditMessage(p.Index, content); err != nil {
			return nil, editBusy(err, "edit")
		}
		if !p.Truncate {
			if err := reappend(sess, msgs[p.Index+1:]); err != nil {
				return nil, editBusy(err, "edit")
			}
		}
	case p.Truncate:
		if p.Index+1 < len(msgs) {
			if err := sess.TruncateAt(p.Index + 1); err != nil {
				return nil, editBusy(err, "edit")
			}
		}
	default:
		return nil, fault.New(fault.Invalid, "No changes requested")
	}
	return s.conversationOf(c.h), nil
}

func (s *Server) deleteMessage(w http.ResponseWriter, r *http.Request, p params) error {
	return s.answerCommand(w, r, p, commandRequest{name: "rest.delete_message", rate: server.RateData,
		decode: func(object) (any, string, error) { return editPayload{Index: p.index}, "", nil }})
}

// gptmeRole is a message's role as gptme's role rules see it.
func gptmeRole(m *llm.Message) string {
	switch m.Role {
	case llm.RoleUser:
		return "user"
	case llm.RoleAssistant:
		return "assistant"
	}
	return "system"
}

func (s *Server) runDeleteMessage(_ context.Context, c *call) (any, error) {
	var p editPayload
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	sess := c.h.Session()
	if sess.Running() {
		return nil, fault.New(fault.Conflict, "Cannot delete while generation is in progress")
	}
	msgs := sess.Messages()
	if p.Index >= len(msgs) {
		return nil, outOfRange(p.Index, len(msgs))
	}
	m := msgs[p.Index]
	if m.Role == llm.RoleToolResult || (m.Role == llm.RoleAssistant && len(m.ToolCalls()) > 0) {
		return nil, fault.New(fault.Invalid, "Cannot delete a tool call or a tool result on its own: the model needs both (edit the user message before them instead)")
	}
	if gptmeRole(m) == "system" {
		// gptme's rule, on what clients see as role "system".
		return nil, fault.New(fault.Invalid, "Cannot delete system messages")
	}
	var prev, next string
	for i := p.Index - 1; i >= 0 && prev == ""; i-- {
		if r := gptmeRole(msgs[i]); r != "system" {
			prev = r
		}
	}
	for i := p.Index + 1; i < len(msgs) && next == ""; i++ {
		if r := gptmeRole(msgs[i]); r != "system" {
			next = r
		}
	}
	if !reappendable(msgs[p.Index+1:]) {
		return nil, errKeepAfter
	}
	if prev != "" && prev == next {
		return nil, fault.New(fault.Invalid, fmt.Sprintf("Deleting this message would create consecutive '%s' messages, which is not supported by LLM APIs", next))
	}
	if err := sess.TruncateAt(p.Index); err != nil {
		return nil, editBusy(err, "delete")
	}
	if err := reappend(sess, msgs[p.Index+1:]); err != nil {
		return nil, editBusy(err, "delete")
	}
	return s.conversationOf(c.h), nil
}
