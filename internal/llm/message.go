// Package llm holds the provider-neutral vocabulary of agentd's model layer:
// messages and content blocks as pi serialises them, usage and cost, the
// streaming event sequence of one assistant message, the Provider interface
// every wire API implements, and the typed error those providers return.
package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// API names a wire protocol spoken by a provider.
type API string

// The wire APIs agentd speaks. The strings match pi's so model and session
// files are interchangeable.
const (
	APIAnthropicMessages API = "anthropic-messages"
	APIOpenAICompletions API = "openai-completions"
	APIOpenAIResponses   API = "openai-responses"
	APIFaux              API = "faux"
)

// Role is who authored a message.
type Role string

// Message roles, as in pi. The first three are what models see; the
// others are the agent-level kinds pi records in sessions and sends to
// clients (its AgentMessage union), which the agent turns into user
// messages before a request.
const (
	RoleUser              Role = "user"
	RoleAssistant         Role = "assistant"
	RoleToolResult        Role = "toolResult"
	RoleBashExecution     Role = "bashExecution"
	RoleCustom            Role = "custom"
	RoleBranchSummary     Role = "branchSummary"
	RoleCompactionSummary Role = "compactionSummary"
)

// StopReason says why an assistant message ended.
type StopReason string

// Stop reasons, as in pi.
const (
	StopStop    StopReason = "stop"
	StopLength  StopReason = "length"
	StopToolUse StopReason = "toolUse"
	StopError   StopReason = "error"
	StopAborted StopReason = "aborted"
)

// ContentType discriminates Content blocks.
type ContentType string

// Content block kinds.
const (
	ContentText     ContentType = "text"
	ContentThinking ContentType = "thinking"
	ContentImage    ContentType = "image"
	ContentToolCall ContentType = "toolCall"
)

// Content is one block of a message. It is a flat union rather than an
// interface so that messages can be built, copied and appended to without
// allocation per block; MarshalJSON writes only the fields of its Type, in
// pi's field order.
type Content struct {
	Type ContentType

	// text
	Text          string
	TextSignature string

	// thinking. For redacted thinking the opaque payload is in
	// ThinkingSignature and Redacted is set.
	Thinking          string
	ThinkingSignature string
	Redacted          bool

	// image
	Data     string // base64
	MimeType string

	// toolCall. Arguments is always a JSON object ("{}" when empty); it is
	// kept as raw bytes so key order survives and tools decode it into
	// their own typed parameters.
	ID               string
	Name             string
	Arguments        json.RawMessage
	ThoughtSignature string
}

// Text returns a text block.
func Text(s string) Content { return Content{Type: ContentText, Text: s} }

// Image returns an image block from base64 data.
func Image(data, mimeType string) Content {
	return Content{Type: ContentImage, Data: data, MimeType: mimeType}
}

// ToolCall returns a tool-call block.
func ToolCall(id, name string, args json.RawMessage) Content {
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	return Content{Type: ContentToolCall, ID: id, Name: name, Arguments: args}
}

// Usage counts tokens for one model response and what they cost in dollars.
type Usage struct {
	Input       int64 `json:"input"`
	Output      int64 `json:"output"`
	CacheRead   int64 `json:"cacheRead"`
	CacheWrite  int64 `json:"cacheWrite"`
	TotalTokens int64 `json:"totalTokens"`
	Cost        Cost  `json:"cost"`
}

// Cost is Usage priced in dollars.
type Cost struct {
	Input      float64 `json:"input"`
	Output     float64 `json:"output"`
	CacheRead  float64 `json:"cacheRead"`
	CacheWrite float64 `json:"cacheWrite"`
	Total      float64 `json:"total"`
}

// Add accumulates o into u.
func (u *Usage) Add(o Usage) {
	u.Input += o.Input
	u.Output += o.Output
	u.CacheRead += o.CacheRead
	u.CacheWrite += o.CacheWrite
	u.TotalTokens += o.TotalTokens
	u.Cost.Input += o.Cost.Input
	u.Cost.Output += o.Cost.Output
	u.Cost.CacheRead += o.Cost.CacheRead
	u.Cost.CacheWrite += o.Cost.CacheWrite
	u.Cost.Total += o.Cost.Total
}

// Message is one message of pi's AgentMessage union: user, assistant or
// tool result (what models see), or a user-run bash command, a custom
// message, a branch or compaction summary. Like Content it is a flat union
// keyed by Role; fields that do not belong to the role are ignored when
// encoding.
type Message struct {
	Role      Role
	Content   []Content
	Timestamp int64 // Unix milliseconds

	// assistant
	API          API
	Provider     string
	Model        string
	Usage        Usage
	StopReason   StopReason
	ErrorMessage string
	ResponseID   string

	// toolResult (Details also for custom)
	ToolCallID string
	ToolName   string
	Details    json.RawMessage
	IsError    bool

	// bashExecution
	Command            string
	Output             string
	ExitCode           *int // nil when the command did not exit (cancelled)
	Cancelled          bool
	Truncated          bool
	FullOutputPath     string
	ExcludeFromContext bool

	// custom
	CustomType string
	Display    bool

	// branchSummary, compactionSummary
	Summary      string
	FromID       string
	TokensBefore int64
}

// Clone returns a deep copy of m, safe to keep after the stream that built
// m moves on.
func (m *Message) Clone() *Message {
	c := *m
	c.Content = make([]Content, len(m.Content))
	copy(c.Content, m.Content)
	for i := range c.Content {
		if a := c.Content[i].Arguments; a != nil {
			c.Content[i].Arguments = append(json.RawMessage(nil), a...)
		}
	}
	if m.Details != nil {
		c.Details = append(json.RawMessage(nil), m.Details...)
	}
	if m.ExitCode != nil {
		code := *m.ExitCode
		c.ExitCode = &code
	}
	return &c
}

// IsLLM reports whether the message is one a model can be sent as is
// (user, assistant or tool result).
func (m *Message) IsLLM() bool {
	return m.Role == RoleUser || m.Role == RoleAssistant || m.Role == RoleToolResult
}

// TextContent concatenates the text blocks of m.
func (m *Message) TextContent() string {
	var b []byte
	for i := range m.Content {
		if m.Content[i].Type == ContentText {
			b = append(b, m.Content[i].Text...)
		}
	}
	return string(b)
}

// ToolCalls returns the tool-call blocks of m.
func (m *Message) ToolCalls() []Content {
	var out []Content
	for _, c := range m.Content {
		if c.Type == ContentToolCall {
			out = append(out, c)
		}
	}
	return out
}

// MarshalJSON writes c in pi's shape for its type.
func (c Content) MarshalJSON() ([]byte, error) {
	return c.appendJSON(make([]byte, 0, 64+len(c.Text)+len(c.Thinking)+len(c.Data)+len(c.Arguments)))
}

func (c *Content) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"type":`...)
	b = appendString(b, string(c.Type))
	switch c.Type {
	case ContentText:
		b = append(b, `,"text":`...)
		b = appendString(b, c.Text)
		if c.TextSignature != "" {
			b = append(b, `,"textSignature":`...)
			b = appendString(b, c.TextSignature)
		}
	case ContentThinking:
		b = append(b, `,"thinking":`...)
		b = appendString(b, c.Thinking)
		if c.ThinkingSignature != "" {
			b = append(b, `,"thinkingSignature":`...)
			b = appendString(b, c.ThinkingSignature)
		}
		if c.Redacted {
			b = append(b, `,"redacted":true`...)
		}
	case ContentImage:
		b = append(b, `,"data":`...)
		b = appendString(b, c.Data)
		b = append(b, `,"mimeType":`...)
		b = appendString(b, c.MimeType)
	case ContentToolCall:
		b = append(b, `,"id":`...)
		b = appendString(b, c.ID)
		b = append(b, `,"name":`...)
		b = appendString(b, c.Name)
		b = append(b, `,"arguments":`...)
		if len(c.Arguments) == 0 {
			b = append(b, `{}`...)
		} else {
			b = append(b, c.Arguments...)
		}
		if c.ThoughtSignature != "" {
			b = append(b, `,"thoughtSignature":`...)
			b = appendString(b, c.ThoughtSignature)
		}
	default:
		return nil, fmt.Errorf("llm: cannot encode content of type %q", c.Type)
	}
	return append(b, '}'), nil
}

type contentJSON struct {
	Type              ContentType     `json:"type"`
	Text              string          `json:"text"`
	TextSignature     string          `json:"textSignature"`
	Thinking          string          `json:"thinking"`
	ThinkingSignature string          `json:"thinkingSignature"`
	Redacted          bool            `json:"redacted"`
	Data              string          `json:"data"`
	MimeType          string          `json:"mimeType"`
	ID                string          `json:"id"`
	Name              string          `json:"name"`
	Arguments         json.RawMessage `json:"arguments"`
	ThoughtSignature  string          `json:"thoughtSignature"`
}

// UnmarshalJSON reads any of pi's content shapes.
func (c *Content) UnmarshalJSON(data []byte) error {
	var j contentJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	switch j.Type {
	case ContentText, ContentThinking, ContentImage:
	case ContentToolCall:
		if len(j.Arguments) == 0 || bytes.Equal(j.Arguments, []byte("null")) {
			j.Arguments = json.RawMessage("{}")
		} else if j.Arguments[0] != '{' {
			return fmt.Errorf("llm: toolCall arguments must be a JSON object")
		}
	case "":
		return fmt.Errorf("llm: content block without a type")
	default:
		return fmt.Errorf("llm: unknown content type %q", j.Type)
	}
	*c = Content(j)
	return nil
}

// MarshalJSON writes m in pi's shape and field order for its role.
func (m Message) MarshalJSON() ([]byte, error) {
	return m.AppendJSON(make([]byte, 0, 256))
}

// AppendJSON appends the JSON encoding of m to b. Faces that stream many
// partial messages use it to reuse one buffer.
func (m *Message) AppendJSON(b []byte) ([]byte, error) {
	var err error
	b = append(b, `{"role":`...)
	b = appendString(b, string(m.Role))
	switch m.Role {
	case RoleUser:
		if b, err = m.appendContent(b); err != nil {
			return nil, err
		}
		b = appendTimestamp(b, m.Timestamp)
	case RoleAssistant:
		if b, err = m.appendContent(b); err != nil {
			return nil, err
		}
		b = append(b, `,"api":`...)
		b = appendString(b, string(m.API))
		b = append(b, `,"provider":`...)
		b = appendString(b, m.Provider)
		b = append(b, `,"model":`...)
		b = appendString(b, m.Model)
		b = append(b, `,"usage":`...)
		b = m.Usage.appendJSON(b)
		b = append(b, `,"stopReason":`...)
		b = appendString(b, string(m.StopReason))
		b = appendTimestamp(b, m.Timestamp)
		if m.ResponseID != "" {
			b = append(b, `,"responseId":`...)
			b = appendString(b, m.ResponseID)
		}
		if m.ErrorMessage != "" {
			b = append(b, `,"errorMessage":`...)
			b = appendString(b, m.ErrorMessage)
		}
	case RoleToolResult:
		b = append(b, `,"toolCallId":`...)
		b = appendString(b, m.ToolCallID)
		b = append(b, `,"toolName":`...)
		b = appendString(b, m.ToolName)
		if b, err = m.appendContent(b); err != nil {
			return nil, err
		}
		if len(m.Details) > 0 {
			b = append(b, `,"details":`...)
			b = append(b, m.Details...)
		}
		b = append(b, `,"isError":`...)
		b = strconv.AppendBool(b, m.IsError)
		b = appendTimestamp(b, m.Timestamp)
	case RoleBashExecution:
		b = append(b, `,"command":`...)
		b = appendString(b, m.Command)
		b = append(b, `,"output":`...)
		b = appendString(b, m.Output)
		if m.ExitCode != nil {
			b = append(b, `,"exitCode":`...)
			b = strconv.AppendInt(b, int64(*m.ExitCode), 10)
		}
		b = append(b, `,"cancelled":`...)
		b = strconv.AppendBool(b, m.Cancelled)
		b = append(b, `,"truncated":`...)
		b = strconv.AppendBool(b, m.Truncated)
		if m.FullOutputPath != "" {
			b = append(b, `,"fullOutputPath":`...)
			b = appendString(b, m.FullOutputPath)
		}
		if m.ExcludeFromContext {
			b = append(b, `,"excludeFromContext":true`...)
		}
		b = appendTimestamp(b, m.Timestamp)
	case RoleCustom:
		b = append(b, `,"customType":`...)
		b = appendString(b, m.CustomType)
		if b, err = m.appendContent(b); err != nil {
			return nil, err
		}
		b = append(b, `,"display":`...)
		b = strconv.AppendBool(b, m.Display)
		if len(m.Details) > 0 {
			b = append(b, `,"details":`...)
			b = append(b, m.Details...)
		}
		b = appendTimestamp(b, m.Timestamp)
	case RoleBranchSummary:
		b = append(b, `,"summary":`...)
		b = appendString(b, m.Summary)
		b = append(b, `,"fromId":`...)
		b = appendString(b, m.FromID)
		b = appendTimestamp(b, m.Timestamp)
	case RoleCompactionSummary:
		b = append(b, `,"summary":`...)
		b = appendString(b, m.Summary)
		b = append(b, `,"tokensBefore":`...)
		b = strconv.AppendInt(b, m.TokensBefore, 10)
		b = appendTimestamp(b, m.Timestamp)
	default:
		return nil, fmt.Errorf("llm: cannot encode message with role %q", m.Role)
	}
	return append(b, '}'), nil
}

func (m *Message) appendContent(b []byte) ([]byte, error) {
	b = append(b, `,"content":[`...)
	for i := range m.Content {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = m.Content[i].appendJSON(b); err != nil {
			return nil, err
		}
	}
	return append(b, ']'), nil
}

func appendTimestamp(b []byte, ts int64) []byte {
	b = append(b, `,"timestamp":`...)
	return strconv.AppendInt(b, ts, 10)
}

func (u *Usage) appendJSON(b []byte) []byte {
	b = append(b, `{"input":`...)
	b = strconv.AppendInt(b, u.Input, 10)
	b = append(b, `,"output":`...)
	b = strconv.AppendInt(b, u.Output, 10)
	b = append(b, `,"cacheRead":`...)
	b = strconv.AppendInt(b, u.CacheRead, 10)
	b = append(b, `,"cacheWrite":`...)
	b = strconv.AppendInt(b, u.CacheWrite, 10)
	b = append(b, `,"totalTokens":`...)
	b = strconv.AppendInt(b, u.TotalTokens, 10)
	b = append(b, `,"cost":{"input":`...)
	b = appendFloat(b, u.Cost.Input)
	b = append(b, `,"output":`...)
	b = appendFloat(b, u.Cost.Output)
	b = append(b, `,"cacheRead":`...)
	b = appendFloat(b, u.Cost.CacheRead)
	b = append(b, `,"cacheWrite":`...)
	b = appendFloat(b, u.Cost.CacheWrite)
	b = append(b, `,"total":`...)
	b = appendFloat(b, u.Cost.Total)
	return append(b, `}}`...)
}

// appendFloat formats like JavaScript's Number#toString, so costs read the
// same as pi's: plain decimals from 1e-7 up to 1e21, exponent form outside.
func appendFloat(b []byte, f float64) []byte {
	if f == float64(int64(f)) && f < 1e21 && f > -1e21 {
		return strconv.AppendInt(b, int64(f), 10)
	}
	if a := math.Abs(f); a >= 1e-7 && a < 1e21 {
		return strconv.AppendFloat(b, f, 'f', -1, 64)
	}
	// Go writes 1e-08 and 1e+21; JavaScript writes 1e-8 and 1e+21.
	start := len(b)
	b = strconv.AppendFloat(b, f, 'e', -1, 64)
	if i := bytes.IndexByte(b[start:], 'e'); i >= 0 {
		i += start + 2 // past "e" and the sign
		for i < len(b)-1 && b[i] == '0' {
			b = append(b[:i], b[i+1:]...)
		}
	}
	return b
}

type messageJSON struct {
	Role         Role            `json:"role"`
	Content      json.RawMessage `json:"content"`
	Timestamp    int64           `json:"timestamp"`
	API          API             `json:"api"`
	Provider     string          `json:"provider"`
	Model        string          `json:"model"`
	Usage        Usage           `json:"usage"`
	StopReason   StopReason      `json:"stopReason"`
	ErrorMessage string          `json:"errorMessage"`
	ResponseID   string          `json:"responseId"`
	ToolCallID   string          `json:"toolCallId"`
	ToolName     string          `json:"toolName"`
	Details      json.RawMessage `json:"details"`
	IsError      bool            `json:"isError"`

	Command            string `json:"command"`
	Output             string `json:"output"`
	ExitCode           *int   `json:"exitCode"`
	Cancelled          bool   `json:"cancelled"`
	Truncated          bool   `json:"truncated"`
	FullOutputPath     string `json:"fullOutputPath"`
	ExcludeFromContext bool   `json:"excludeFromContext"`
	CustomType         string `json:"customType"`
	Display            bool   `json:"display"`
	Summary            string `json:"summary"`
	FromID             string `json:"fromId"`
	TokensBefore       int64  `json:"tokensBefore"`
}

// UnmarshalJSON reads a message in pi's shape. User content may be a plain
// string, as pi allows; it becomes one text block.
func (m *Message) UnmarshalJSON(data []byte) error {
	var j messageJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	switch j.Role {
	case RoleUser, RoleAssistant, RoleToolResult, RoleBashExecution, RoleCustom, RoleBranchSummary, RoleCompactionSummary:
	case "hookMessage": // pi session v2 name of custom
		j.Role = RoleCustom
	case "":
		return fmt.Errorf("llm: message without a role")
	default:
		return fmt.Errorf("llm: unknown message role %q", j.Role)
	}
	var content []Content
	if len(j.Content) > 0 && j.Content[0] == '"' {
		var s string
		if err := json.Unmarshal(j.Content, &s); err != nil {
			return err
		}
		content = []Content{Text(s)}
	} else if len(j.Content) > 0 && !bytes.Equal(j.Content, []byte("null")) {
		if err := json.Unmarshal(j.Content, &content); err != nil {
			return fmt.Errorf("llm: message content: %w", err)
		}
	}
	if bytes.Equal(j.Details, []byte("null")) {
		j.Details = nil
	}
	*m = Message{
		Role: j.Role, Content: content, Timestamp: j.Timestamp,
		API: j.API, Provider: j.Provider, Model: j.Model, Usage: j.Usage,
		StopReason: j.StopReason, ErrorMessage: j.ErrorMessage, ResponseID: j.ResponseID,
		ToolCallID: j.ToolCallID, ToolName: j.ToolName, Details: j.Details, IsError: j.IsError,
		Command: j.Command, Output: j.Output, ExitCode: j.ExitCode, Cancelled: j.Cancelled, Truncated: j.Truncated,
		FullOutputPath: j.FullOutputPath, ExcludeFromContext: j.ExcludeFromContext,
		CustomType: j.CustomType, Display: j.Display, Summary: j.Summary, FromID: j.FromID, TokensBefore: j.TokensBefore,
	}
	return nil
}

// appendString appends s as a JSON string. Like JSON.stringify it leaves
// <, > and & alone; unlike it, it escapes U+2028 and U+2029 so that no
// line-oriented reader can split a frame inside a string. Invalid UTF-8
// becomes U+FFFD.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0x80 {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := decodeRune(s[i:])
		if r == 0xFFFD && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
