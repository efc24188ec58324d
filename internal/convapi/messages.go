package convapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
)

// primaryArg names, per built-in tool, the argument a person reads and
// edits as text: bash's command, write's content. The other arguments go
// in ToolUse.Args as "name=value"; a tool not listed shows its arguments
// as JSON in ToolUse.Content and takes edited JSON.
var primaryArg = map[string]string{
	"bash":  "command",
	"write": "content",
}

// pathFirst lists the tools whose path leads their args, as gptme's save
// puts the file name in args.
var pathFirst = map[string]bool{"write": true}

// toolUseOf shows a tool call to a person.
func toolUseOf(name string, args json.RawMessage) ToolUse {
	tu := ToolUse{Tool: name, Args: []string{}}
	var obj map[string]json.RawMessage
	if json.Unmarshal(args, &obj) != nil || obj == nil {
		tu.Content = string(args)
		return tu
	}
	key, ok := primaryArg[name]
	var primary string
	if ok {
		ok = json.Unmarshal(obj[key], &primary) == nil
	}
	if !ok {
		var b bytes.Buffer
		if json.Indent(&b, args, "", "  ") != nil {
			b.Reset()
			b.Write(args)
		}
		tu.Content = b.String()
		return tu
	}
	tu.Content = primary
	if pathFirst[name] {
		var p string
		if json.Unmarshal(obj["path"], &p) == nil {
			tu.Args = append(tu.Args, p)
		}
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		if k != key && !(pathFirst[name] && k == "path") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := string(obj[k])
		var s string
		if json.Unmarshal(obj[k], &s) == nil {
			v = s
		}
		tu.Args = append(tu.Args, k+"="+v)
	}
	return tu
}

// editedArgs makes the arguments of a tool call edited by a person:
// content replaces the primary text, or is the whole arguments object for
// a tool without one.
func editedArgs(name string, original json.RawMessage, content string) (json.RawMessage, error) {
	key, ok := primaryArg[name]
	var obj map[string]json.RawMessage
	if ok && json.Unmarshal(original, &obj) == nil && obj != nil {
		if _, has := obj[key]; has {
			obj[key] = marshal(content)
			return marshal(obj), nil
		}
	}
	var edited map[string]json.RawMessage
	if json.Unmarshal([]byte(content), &edited) != nil || edited == nil {
		return nil, fault.New(fault.Invalid, fmt.Sprintf("content must be a JSON object of the arguments of %s: it has no single text to edit, so the edited content replaces all its arguments", name))
	}
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(content)); err != nil {
		return nil, fault.New(fault.Invalid, "content is not valid JSON")
	}
	return b.Bytes(), nil
}

// toolID is the id clients know a tool call by: the id of its approval
// request, derived from the model's call id, so it is the same on every
// face and after a restart.
func toolID(callID string) string { return interaction.ApprovalID(callID) }

// isoTime is gptme's timestamp form (Python's isoformat with an offset).
func isoTime(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000000+00:00")
}

// parseISO reads a timestamp a client sent: RFC 3339, or gptme's
// isoformat without an offset (taken as UTC).
func parseISO(s string) (time.Time, bool) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02T15:04:05.999999999-07:00", "2006-01-02 15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// wireMessage shows one of agentd's messages in gptme's form.
func wireMessage(m *llm.Message) Message {
	out := Message{Timestamp: isoTime(m.Timestamp)}
	switch m.Role {
	case llm.RoleUser:
		out.Role = "user"
		out.Content = contentText(m.Content)
	case llm.RoleAssistant:
		out.Role = "assistant"
		out.Content, out.Metadata = assistantText(m)
	case llm.RoleToolResult:
		out.Role = "system"
		out.Content = contentText(m.Content)
		out.CallID = m.ToolCallID
		out.Metadata = &MessageMetadata{Tool: m.ToolName, IsError: m.IsError, Role: string(m.Role)}
	case llm.RoleBashExecution:
		out.Role = "system"
		out.Content = "$ " + m.Command + "\n" + m.Output
		out.Metadata = &MessageMetadata{Role: string(m.Role)}
		out.Hide = m.ExcludeFromContext
	case llm.RoleCustom:
		out.Role = "system"
		out.Content = contentText(m.Content)
		out.Hide = !m.Display
		out.Metadata = &MessageMetadata{Role: string(m.Role)}
		if m.CustomType == customSystem {
			// A system message a client added: shown as it came.
			out.Hide, out.Metadata = false, nil
		}
	case llm.RoleBranchSummary, llm.RoleCompactionSummary:
		out.Role = "system"
		out.Content = m.Summary
		out.Metadata = &MessageMetadata{Role: string(m.Role)}
	default:
		out.Role = "system"
		out.Content = contentText(m.Content)
		out.Metadata = &MessageMetadata{Role: string(m.Role)}
	}
	return out
}

// customSystem is the custom type of a "system" message a client adds:
// agentd's system prompt is its own, so the client's text goes into the
// conversation as a custom message the model reads.
const customSystem = "gptme.system"

func contentText(content []llm.Content) string {
	var b strings.Builder
	for _, c := range content {
		switch c.Type {
		case llm.ContentText:
			b.WriteString(c.Text)
		case llm.ContentImage:
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			b.WriteString("[image: " + c.MimeType + "]")
		}
	}
	return b.String()
}

// assistantText renders an assistant message as gptme's clients show it:
// thinking in <thinking> tags, the text, then each tool call as a fenced
// block (the tool and its args, then its primary text).
func assistantText(m *llm.Message) (string, *MessageMetadata) {
	var b strings.Builder
	md := &MessageMetadata{StopReason: string(m.StopReason)}
	if m.Provider != "" || m.Model != "" {
		md.Model = m.Provider + "/" + m.Model
	}
	sep := func() {
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
	}
	for _, c := range m.Content {
		switch c.Type {
		case llm.ContentThinking:
			if c.Redacted || c.Thinking == "" {
				continue
			}
			sep()
			b.WriteString("<thinking>\n" + c.Thinking + "\n</thinking>")
		case llm.ContentText:
			if c.Text == "" {
				continue
			}
			sep()
			b.WriteString(c.Text)
		case llm.ContentToolCall:
			tu := toolUseOf(c.Name, c.Arguments)
			sep()
			b.WriteString("```" + tu.Tool)
			if len(tu.Args) > 0 {
				b.WriteString(" " + strings.Join(tu.Args, " "))
			}
			b.WriteString("\n" + tu.Content + "\n```")
			md.ToolCalls = append(md.ToolCalls, ToolCall{ToolID: toolID(c.ID), CallID: c.ID, Use: tu})
		}
	}
	if m.Usage != (llm.Usage{}) {
		u := m.Usage
		md.Usage = &u
	}
	switch m.StopReason {
	case llm.StopAborted:
		md.Interrupted = true
	case llm.StopError:
		md.Error = m.ErrorMessage
	}
	return b.String(), md
}

// wireLog shows a conversation's messages.
func wireLog(msgs []*llm.Message) []Message {
	out := make([]Message, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, wireMessage(m))
	}
	return out
}

// lastError is the error of the conversation's last assistant message,
// if it failed.
func lastError(msgs []*llm.Message) *string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == llm.RoleAssistant {
			if msgs[i].StopReason == llm.StopError && msgs[i].ErrorMessage != "" {
				s := msgs[i].ErrorMessage
				return &s
			}
			return nil
		}
	}
	return nil
}

// inputMessage makes the message a client adds.
func inputMessage(role, content string, ts time.Time) *llm.Message {
	ms := ts.UnixMilli()
	if ts.IsZero() {
		ms = time.Now().UnixMilli()
	}
	switch role {
	case "assistant":
		return &llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text(content)}, Timestamp: ms, StopReason: llm.StopStop}
	case "system":
		return &llm.Message{Role: llm.RoleCustom, CustomType: customSystem, Display: true, Content: []llm.Content{llm.Text(content)}, Timestamp: ms}
	}
	return &llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text(content)}, Timestamp: ms}
}
