// Package piwire encodes agentd's session events and messages in pi's wire
// shapes (pi's AgentSessionEvent JSON), shared by the faces that speak pi's
// protocols: pi's RPC mode sends them as they are, the pi-server protocol
// wraps them in its event envelope.
package piwire

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/tool"
)

// Marshal encodes v as JSON the way JSON.stringify does: no HTML
// escaping, no trailing newline.
func Marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return []byte(`null`)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'})
}

func AppendMessage(b []byte, m *llm.Message) []byte {
	out, err := m.AppendJSON(b)
	if err != nil {
		return append(b, "null"...)
	}
	return out
}

func AppendMessages(b []byte, ms []*llm.Message) []byte {
	b = append(b, '[')
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendMessage(b, m)
	}
	return append(b, ']')
}

func appendRaw(b []byte, key string, raw []byte) []byte {
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return append(b, raw...)
}

// appendToolResult writes an AgentToolResult: {content, details}.
func appendToolResult(b []byte, r *tool.Result) []byte {
	if r == nil {
		r = &tool.Result{}
	}
	b = append(b, `{"content":[`...)
	for i := range r.Content {
		if i > 0 {
			b = append(b, ',')
		}
		cb, err := r.Content[i].MarshalJSON()
		if err != nil {
			cb = []byte("null")
		}
		b = append(b, cb...)
	}
	b = append(b, ']')
	if r.Details != nil {
		switch d := r.Details.(type) {
		case json.RawMessage:
			b = appendRaw(b, "details", d)
		default:
			b = appendRaw(b, "details", Marshal(d))
		}
	}
	return append(b, '}')
}

func args(a json.RawMessage) []byte {
	if len(a) == 0 {
		return []byte("{}")
	}
	return a
}

// AppendEvent appends one session event as pi's event JSON to b, or
// returns nil for events pi does not have.
func AppendEvent(b []byte, ev session.Event, delta bool) []byte {
	if ev.Agent != nil {
		if m := ev.Agent.Message; m != nil && m.Role == llm.RoleBashExecution {
			return nil // pi records a user bash command without an event
		}
		return encodeAgent(b, ev.Agent, delta)
	}
	switch ev.Type {
	case session.EventCompactionStart:
		return append(b, Marshal(struct {
			Type   string `json:"type"`
			Reason string `json:"reason"`
		}{"compaction_start", ev.Reason})...)
	case session.EventCompactionEnd:
		type end struct {
			Type         string                    `json:"type"`
			Reason       string                    `json:"reason"`
			Result       *session.CompactionResult `json:"result"`
			Aborted      bool                      `json:"aborted"`
			WillRetry    bool                      `json:"willRetry"`
			ErrorMessage string                    `json:"errorMessage,omitempty"`
		}
		return append(b, Marshal(end{"compaction_end", ev.Reason, ev.Compaction, ev.Aborted, ev.WillRetry, ev.ErrorMessage})...)
	case session.EventAutoRetryStart:
		return append(b, Marshal(struct {
			Type         string `json:"type"`
			Attempt      int    `json:"attempt"`
			MaxAttempts  int    `json:"maxAttempts"`
			DelayMs      int64  `json:"delayMs"`
			ErrorMessage string `json:"errorMessage"`
		}{"auto_retry_start", ev.Attempt, ev.MaxAttempts, ev.DelayMs, ev.ErrorMessage})...)
	case session.EventAutoRetryEnd:
		return append(b, Marshal(struct {
			Type       string `json:"type"`
			Success    bool   `json:"success"`
			Attempt    int    `json:"attempt"`
			FinalError string `json:"finalError,omitempty"`
		}{"auto_retry_end", ev.Success, ev.Attempt, ev.FinalError})...)
	case session.EventSessionInfoChanged:
		return append(b, Marshal(struct {
			Type string `json:"type"`
			Name string `json:"name,omitempty"`
		}{"session_info_changed", ev.Name})...)
	case session.EventThinkingLevelChanged:
		return append(b, Marshal(struct {
			Type  string            `json:"type"`
			Level llm.ThinkingLevel `json:"level"`
		}{"thinking_level_changed", ev.ThinkingLevel})...)
	case session.EventConfigChanged:
		return appendModeChanged(b, ev)
	}
	return nil
}

func encodeAgent(b []byte, a *agent.Event, delta bool) []byte {
	typ := string(a.Type)
	b = append(b, `{"type":`...)
	b = llm.AppendJSONString(b, typ)
	switch a.Type {
	case agent.EventAgentStart, agent.EventTurnStart:
	case agent.EventAgentEnd:
		b = append(b, `,"messages":`...)
		b = AppendMessages(b, a.Messages)
	case agent.EventTurnEnd:
		b = append(b, `,"message":`...)
		b = AppendMessage(b, a.Message)
		b = append(b, `,"toolResults":`...)
		b = AppendMessages(b, a.ToolResults)
	case agent.EventMessageStart, agent.EventMessageEnd:
		b = append(b, `,"message":`...)
		b = AppendMessage(b, a.Message)
	case agent.EventMessageUpdate:
		u := a.Update
		b = append(b, `,"assistantMessageEvent":{"type":`...)
		b = llm.AppendJSONString(b, string(u.Type))
		b = append(b, `,"contentIndex":`...)
		b = strconv.AppendInt(b, int64(u.ContentIndex), 10)
		switch u.Type {
		case llm.EventTextDelta, llm.EventThinkingDelta, llm.EventToolCallDelta:
			b = append(b, `,"delta":`...)
			b = llm.AppendJSONString(b, u.Delta)
		case llm.EventTextEnd, llm.EventThinkingEnd:
			b = append(b, `,"content":`...)
			b = llm.AppendJSONString(b, u.Content)
		case llm.EventToolCallEnd:
			if u.ToolCall != nil {
				tc, _ := u.ToolCall.MarshalJSON()
				b = appendRaw(b, "toolCall", tc)
			}
		}
		if delta || a.Message == nil {
			return append(b, `}}`...)
		}
		// pi sends the partial message twice: inside the event and beside
		// it. Encode it once and copy the bytes.
		b = append(b, `,"partial":`...)
		start := len(b)
		b = AppendMessage(b, a.Message)
		msg := b[start:]
		b = append(b, `},"message":`...)
		b = append(b, msg...)
	case agent.EventToolExecutionStart:
		b = append(b, `,"toolCallId":`...)
		b = llm.AppendJSONString(b, a.ToolCallID)
		b = append(b, `,"toolName":`...)
		b = llm.AppendJSONString(b, a.ToolName)
		b = appendRaw(b, "args", args(a.Args))
	case agent.EventToolExecutionUpdate:
		b = append(b, `,"toolCallId":`...)
		b = llm.AppendJSONString(b, a.ToolCallID)
		b = append(b, `,"toolName":`...)
		b = llm.AppendJSONString(b, a.ToolName)
		b = appendRaw(b, "args", args(a.Args))
		b = append(b, `,"partialResult":`...)
		b = appendToolResult(b, a.Partial)
	case agent.EventToolExecutionEnd:
		b = append(b, `,"toolCallId":`...)
		b = llm.AppendJSONString(b, a.ToolCallID)
		b = append(b, `,"toolName":`...)
		b = llm.AppendJSONString(b, a.ToolName)
		b = append(b, `,"result":`...)
		b = appendToolResult(b, a.Result)
		b = append(b, `,"isError":`...)
		b = strconv.AppendBool(b, a.IsError)
	case agent.EventQueueUpdate:
		b = append(b, `,"steering":`...)
		b = append(b, Marshal(nonNil(a.Steering))...)
		b = append(b, `,"followUp":`...)
		b = append(b, Marshal(nonNil(a.FollowUp))...)
	}
	return append(b, '}')
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// SizeHint is about how many bytes AppendMessage writes for m, a little
// more rather than less: what a buffer that must hold it is made with, so
// that it does not grow (and copy) as the message is written. Linear in
// the number of blocks, not in the text.
func SizeHint(m *llm.Message) int {
	if m == nil {
		return 4
	}
	// The fields of every role, and an assistant's usage and cost, are
	// under 400 bytes when their numbers are long.
	n := 400 + len(m.Model) + len(m.Provider) + len(m.ResponseID) + len(m.ErrorMessage) + len(m.ToolCallID) + len(m.ToolName) +
		len(m.Details) + len(m.Command) + len(m.Output) + len(m.Summary) + len(m.CustomType) + len(m.FromID) + len(m.FullOutputPath)
	for i := range m.Content {
		c := &m.Content[i]
		n += 80 + len(c.Text) + len(c.TextSignature) + len(c.Thinking) + len(c.ThinkingSignature) + len(c.Data) + len(c.MimeType) +
			len(c.ID) + len(c.Name) + len(c.Arguments) + len(c.ThoughtSignature)
	}
	// Escapes: a newline or a quote takes two bytes; text has a few.
	return n + n/16
}
