package openairesponses

import "encoding/json"

// The body of a Responses request. Fields are in the order the OpenAI SDK
// wrote them, "stream" last; TestConvertHistory's golden files hold them
// byte for byte.
type responseRequest struct {
	MaxOutputTokens int64            `json:"max_output_tokens"`
	PromptCacheKey  string           `json:"prompt_cache_key,omitempty"`
	Store           *bool            `json:"store,omitempty"`
	Temperature     *float64         `json:"temperature,omitempty"`
	Include         []string         `json:"include,omitempty"`
	Input           []any            `json:"input"`
	Model           string           `json:"model"`
	Reasoning       *reasoningConfig `json:"reasoning,omitempty"`
	Tools           []*functionTool  `json:"tools,omitempty"`
	Stream          bool             `json:"stream,omitempty"`
}

type reasoningConfig struct {
	Effort  string `json:"effort,omitempty"`
	Summary string `json:"summary,omitempty"`
}

// functionTool declares a tool; Parameters is its schema byte for byte,
// so its key order survives.
type functionTool struct {
	Strict      *bool           `json:"strict,omitempty"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Type        string          `json:"type"`
	Parameters  json.RawMessage `json:"parameters"`
}

// easyMessage is a system, developer or user message; Content is a string
// or a list of *inputTextPart and *inputImagePart.
type easyMessage struct {
	Content any    `json:"content"`
	Role    string `json:"role"`
}

type inputTextPart struct {
	Text string `json:"text"`
	Type string `json:"type"`
}

type inputImagePart struct {
	Detail   string `json:"detail"`
	ImageURL string `json:"image_url"`
	Type     string `json:"type"`
}

// outputMessage replays an assistant message item.
type outputMessage struct {
	ID      string           `json:"id"`
	Content []outputTextPart `json:"content"`
	Status  string           `json:"status"`
	Phase   string           `json:"phase,omitempty"`
	Role    string           `json:"role"`
	Type    string           `json:"type"`
}

type outputTextPart struct {
	Annotations []any  `json:"annotations"`
	Text        string `json:"text"`
	Type        string `json:"type"`
}

// functionCall replays a tool call; ID is the item id, kept only for the
// model that made it.
type functionCall struct {
	Arguments string `json:"arguments"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	ID        string `json:"id,omitempty"`
	Type      string `json:"type"`
}

type functionCallOutput struct {
	Output string `json:"output"`
	CallID string `json:"call_id"`
	Type   string `json:"type"`
}
