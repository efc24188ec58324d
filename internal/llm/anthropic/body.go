package anthropic

import (
	"bytes"
	"encoding/json"
	"slices"
)

// The body of a Messages request. Fields are in the order the Anthropic
// SDK wrote them, "stream" last; a content block is one of the *…Block
// types below.
type messageRequest struct {
	MaxTokens    int64           `json:"max_tokens"`
	Messages     []message       `json:"messages"`
	Model        string          `json:"model"`
	Temperature  *float64        `json:"temperature,omitempty"`
	OutputConfig *outputConfig   `json:"output_config,omitempty"`
	System       []textBlock     `json:"system,omitempty"`
	Thinking     *thinkingConfig `json:"thinking,omitempty"`
	Tools        []tool          `json:"tools,omitempty"`
	Stream       bool            `json:"stream"`
}

type message struct {
	Content []any  `json:"content"`
	Role    string `json:"role"`
}

// thinkingConfig is {"type":"enabled","budget_tokens":n} or
// {"type":"adaptive","display":"summarized"}.
type thinkingConfig struct {
	BudgetTokens int64  `json:"budget_tokens,omitempty"`
	Display      string `json:"display,omitempty"`
	Type         string `json:"type"`
}

type outputConfig struct {
	Effort string `json:"effort,omitempty"`
}

// cacheControl marks a cache breakpoint: everything up to the block that
// carries it is cached.
type cacheControl struct {
	Type string `json:"type"`
}

func ephemeral() *cacheControl { return &cacheControl{Type: "ephemeral"} }

type tool struct {
	InputSchema  toolSchema    `json:"input_schema"`
	Name         string        `json:"name"`
	Description  string        `json:"description,omitempty"`
	CacheControl *cacheControl `json:"cache_control,omitempty"`
}

// toolSchema is a tool's JSON Schema: "type" is always "object", the
// other keywords are kept as the tool wrote them.
type toolSchema struct {
	Properties  json.RawMessage
	Required    []string
	ExtraFields map[string]json.RawMessage
}

// MarshalJSON writes properties, required and type, then any other
// keywords in key order.
func (s toolSchema) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"properties":`)
	b.Write(s.Properties)
	if s.Required != nil {
		req, err := json.Marshal(s.Required)
		if err != nil {
			return nil, err
		}
		b.WriteString(`,"required":`)
		b.Write(req)
	}
	b.WriteString(`,"type":"object"`)
	keys := make([]string, 0, len(s.ExtraFields))
	for k := range s.ExtraFields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		name, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		b.WriteByte(',')
		b.Write(name)
		b.WriteByte(':')
		b.Write(s.ExtraFields[k])
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

type textBlock struct {
	Text         string        `json:"text"`
	CacheControl *cacheControl `json:"cache_control,omitempty"`
	Type         string        `json:"type"`
}

func text(s string) *textBlock { return &textBlock{Text: s, Type: "text"} }

type imageBlock struct {
	Source       imageSource   `json:"source"`
	CacheControl *cacheControl `json:"cache_control,omitempty"`
	Type         string        `json:"type"`
}

type imageSource struct {
	Data      string `json:"data"`
	MediaType string `json:"media_type,omitempty"`
	Type      string `json:"type"`
}

type thinkingBlock struct {
	Signature string `json:"signature"`
	Thinking  string `json:"thinking"`
	Type      string `json:"type"`
}

type redactedThinkingBlock struct {
	Data string `json:"data"`
	Type string `json:"type"`
}

type toolUseBlock struct {
	ID    string          `json:"id"`
	Input json.RawMessage `json:"input"`
	Name  string          `json:"name"`
	Type  string          `json:"type"`
}

type toolResultBlock struct {
	ToolUseID    string        `json:"tool_use_id"`
	IsError      *bool         `json:"is_error,omitempty"`
	CacheControl *cacheControl `json:"cache_control,omitempty"`
	Content      []any         `json:"content,omitempty"`
	Type         string        `json:"type"`
}
