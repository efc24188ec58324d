package openaichat

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/agentd-dev/agentd/internal/llm"
)

// Texts the request uses where the conversation has a gap the API does not
// allow; they are pi's.
const (
	noResultText      = "No result provided"
	toolImageText     = "(see attached image)"
	toolImagesIntro   = "Attached image(s) from tool result:"
	emptyToolText     = "(no output)"
	imageOmittedText  = "(image omitted: this model does not accept images)"
	emptyToolSchema   = `{"type":"object","properties":{}}`
	maxToolCallIDSize = 40 // OpenAI rejects longer tool_call ids
)

// chatRequest is the body of a streaming Chat Completions request. Its
// fields are in the order the OpenAI SDK wrote them, "stream" last.
type chatRequest struct {
	Messages            []chatMessage  `json:"messages"`
	Model               string         `json:"model"`
	MaxCompletionTokens *int64         `json:"max_completion_tokens,omitempty"`
	MaxTokens           *int64         `json:"max_tokens,omitempty"`
	PromptCacheKey      string         `json:"prompt_cache_key,omitempty"`
	Store               *bool          `json:"store,omitempty"`
	Temperature         *float64       `json:"temperature,omitempty"`
	ReasoningEffort     string         `json:"reasoning_effort,omitempty"`
	StreamOptions       *streamOptions `json:"stream_options,omitempty"`
	Tools               []chatTool     `json:"tools,omitempty"`
	Stream              bool           `json:"stream"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chatTool is a function tool; Parameters is the tool's schema byte for
// byte, so its key order survives.
type chatTool struct {
	Function struct {
		Name        string          `json:"name"`
		Strict      *bool           `json:"strict,omitempty"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
	Type string `json:"type"`
}

// chatMessage is a message of any role. Content is a string or a list of
// parts; an assistant message with only tool calls has none. The
// reasoning fields carry a model's own reasoning back to it, in the field
// it arrived in.
type chatMessage struct {
	Content          any               `json:"content,omitempty"`
	ToolCalls        []chatToolCall    `json:"tool_calls,omitempty"`
	ToolCallID       *string           `json:"tool_call_id,omitempty"`
	Role             string            `json:"role"`
	ReasoningContent string            `json:"reasoning_content,omitempty"`
	Reasoning        string            `json:"reasoning,omitempty"`
	ReasoningText    string            `json:"reasoning_text,omitempty"`
	ReasoningDetails []json.RawMessage `json:"reasoning_details,omitempty"`
}

type chatToolCall struct {
	ID       string `json:"id"`
	Function struct {
		Arguments string `json:"arguments"`
		Name      string `json:"name"`
	} `json:"function"`
	Type string `json:"type"`
}

// chatPart is a text or image_url content part.
type chatPart struct {
	Text     *string   `json:"text,omitempty"`
	ImageURL *imageURL `json:"image_url,omitempty"`
	Type     string    `json:"type"`
}

type imageURL struct {
	URL string `json:"url"`
}

func textPart(s string) chatPart { return chatPart{Text: &s, Type: "text"} }

// buildParams maps a request onto the Chat Completions body.
func buildParams(m *llm.Model, c *llm.Context, o *llm.StreamOptions) (*chatRequest, error) {
	compat := m.CompatOrDefault()
	p := &chatRequest{
		Model:    m.ID,
		Messages: convertMessages(m, c, compat),
		Stream:   true,
	}
	maxTokens := o.MaxTokens
	if maxTokens <= 0 {
		maxTokens = llm.DefaultMaxTokens(m)
	}
	if compat.MaxTokensField == "max_tokens" {
		p.MaxTokens = &maxTokens
	} else {
		p.MaxCompletionTokens = &maxTokens
	}
	if llm.Flag(compat.SupportsUsageInStreaming, true) {
		p.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	// store defaults to false on OpenAI already; pi sends it anyway, and
	// strict compatible servers reject the unknown field, so it goes only
	// to OpenAI unless the model says otherwise.
	if llm.Flag(compat.SupportsStore, isOpenAI(m)) {
		p.Store = new(false)
	}
	if o.Temperature != nil {
		p.Temperature = new(*o.Temperature)
	}
	p.ReasoningEffort = reasoningEffort(m, o.Thinking)
	if o.SessionID != "" && isOpenAI(m) {
		p.PromptCacheKey = o.SessionID
	}
	if len(c.Tools) > 0 {
		tools, err := convertTools(c.Tools, compat)
		if err != nil {
			return p, err
		}
		p.Tools = tools
	}
	return p, nil
}

// isOpenAI reports whether the model is served by OpenAI itself, which
// takes fields (store, prompt_cache_key) that compatible servers may not.
func isOpenAI(m *llm.Model) bool {
	if m.Provider == "openai" {
		return true
	}
	u, err := url.Parse(m.BaseURL)
	return err == nil && u.Hostname() == "api.openai.com"
}

// reasoningEffort is the reasoning_effort to send: the clamped thinking
// level for reasoning models of servers that take the field, nothing when
// thinking is off (the model's default applies, as in pi).
func reasoningEffort(m *llm.Model, l llm.ThinkingLevel) string {
	if !m.Reasoning || !llm.Flag(m.CompatOrDefault().SupportsReasoningEffort, true) {
		return ""
	}
	return llm.ReasoningEffort(m.ClampThinking(l))
}

// convertTools declares the tools as functions. The parameter schema is
// passed through byte for byte (a map would reorder its keys). strict is sent as false, as pi does, where the server knows the
// field: agent tool schemas are rarely valid strict schemas.
func convertTools(tools []llm.Tool, compat llm.Compat) ([]chatTool, error) {
	strict := llm.Flag(compat.SupportsStrictMode, true)
	out := make([]chatTool, 0, len(tools))
	for _, t := range tools {
		schema := json.RawMessage(t.Parameters)
		if s := strings.TrimSpace(string(schema)); s == "" || s == "null" {
			schema = json.RawMessage(emptyToolSchema)
		} else if !json.Valid(schema) {
			return nil, fmt.Errorf("tool %q: parameters are not valid JSON", t.Name)
		}
		ct := chatTool{Type: "function"}
		ct.Function.Name, ct.Function.Description, ct.Function.Parameters = t.Name, t.Description, schema
		if strict {
			ct.Function.Strict = new(false)
		}
		out = append(out, ct)
	}
	return out, nil
}

// pendingCall is a tool call of the last assistant message sent, waiting
// for its result.
type pendingCall struct {
	id       string // normalised
	answered bool
}

// convertMessages maps the conversation onto chat messages, keeping the
// API's pairing rules whatever the history holds:
//
//   - assistant messages that ended in error or were aborted are left out
//     (they may hold half a tool call), and so are tool results that
//     answer no call of the assistant message just before them;
//   - a tool call that got no result gets a synthetic error result ("No
//     result provided") before the conversation moves on;
//   - thinking is sent back only to the model that produced it, in the
//     field it arrived in; other models' thinking becomes plain text;
//   - tool-call ids are cut to what OpenAI accepts, the same way on the
//     call and on its result.
func convertMessages(m *llm.Model, c *llm.Context, compat llm.Compat) []chatMessage {
	out := make([]chatMessage, 0, len(c.Messages)+1)
	if c.SystemPrompt != "" {
		if m.Reasoning && llm.Flag(compat.SupportsDeveloperRole, true) {
			out = append(out, chatMessage{Role: "developer", Content: c.SystemPrompt})
		} else {
			out = append(out, chatMessage{Role: "system", Content: c.SystemPrompt})
		}
	}
	images := m.SupportsImages()
	var pending []pendingCall
	flush := func() {
		for _, pc := range pending {
			if !pc.answered {
				out = append(out, toolMessage(pc.id, noResultText, true))
			}
		}
		pending = pending[:0]
	}
	msgs := c.Messages
	for i := 0; i < len(msgs); i++ {
		msg := &msgs[i]
		switch msg.Role {
		case llm.RoleUser:
			flush()
			if u, ok := userMessage(msg.Content, images); ok {
				out = append(out, u)
			}
		case llm.RoleAssistant:
			flush()
			if msg.StopReason == llm.StopError || msg.StopReason == llm.StopAborted {
				continue
			}
			a, ok := assistantMessage(m, msg)
			if !ok {
				continue
			}
			out = append(out, *a)
			for _, tc := range a.ToolCalls {
				pending = append(pending, pendingCall{id: tc.ID})
			}
		case llm.RoleToolResult:
			// A run of tool results, then (the API takes images only in
			// user messages) one user message with their images.
			var parts []chatPart
			for ; i < len(msgs) && msgs[i].Role == llm.RoleToolResult; i++ {
				tr := &msgs[i]
				id := normalizeToolCallID(tr.ToolCallID)
				k := -1
				for j := range pending {
					if pending[j].id == id && !pending[j].answered {
						k = j
						break
					}
				}
				if k < 0 {
					continue
				}
				pending[k].answered = true
				text, hasImages := toolResultText(tr.Content)
				switch {
				case text != "":
				case hasImages && images:
					text = toolImageText
				case hasImages:
					text = imageOmittedText
				default:
					text = emptyToolText
				}
				out = append(out, toolMessage(id, text, tr.IsError))
				if hasImages && images {
					for _, b := range tr.Content {
						if b.Type == llm.ContentImage {
							parts = append(parts, imagePart(b))
						}
					}
				}
			}
			i--
			if len(parts) > 0 {
				flush()
				parts = append([]chatPart{textPart(toolImagesIntro)}, parts...)
				out = append(out, chatMessage{Role: "user", Content: parts})
			}
		}
	}
	flush()
	return out
}

// userMessage maps a user message: plain string content when it is one
// text block (what every compatible server takes), parts otherwise.
// Images go only to models that take them.
func userMessage(content []llm.Content, images bool) (chatMessage, bool) {
	if len(content) == 1 && content[0].Type == llm.ContentText {
		return chatMessage{Role: "user", Content: content[0].Text}, true
	}
	parts := make([]chatPart, 0, len(content))
	dropped := false
	for _, b := range content {
		switch b.Type {
		case llm.ContentText:
			if b.Text != "" {
				parts = append(parts, textPart(b.Text))
			}
		case llm.ContentImage:
			if images {
				parts = append(parts, imagePart(b))
			} else {
				dropped = true
			}
		}
	}
	switch {
	case len(parts) == 0 && dropped:
		return chatMessage{Role: "user", Content: imageOmittedText}, true
	case len(parts) == 0:
		return chatMessage{}, false
	case len(parts) == 1 && parts[0].Text != nil:
		return chatMessage{Role: "user", Content: *parts[0].Text}, true
	}
	return chatMessage{Role: "user", Content: parts}, true
}

func imagePart(b llm.Content) chatPart {
	return chatPart{ImageURL: &imageURL{URL: "data:" + b.MimeType + ";base64," + b.Data}, Type: "image_url"}
}

// assistantMessage maps an assistant message; ok is false when nothing of
// it can be sent (no text and no tool calls).
func assistantMessage(m *llm.Model, msg *llm.Message) (*chatMessage, bool) {
	same := msg.Provider == m.Provider && msg.API == m.API && msg.Model == m.ID
	var text, reasoning []string
	var field string
	var details []json.RawMessage
	a := &chatMessage{Role: "assistant"}
	for _, b := range msg.Content {
		switch b.Type {
		case llm.ContentText:
			if strings.TrimSpace(b.Text) != "" {
				text = append(text, b.Text)
			}
		case llm.ContentThinking:
			if b.Redacted || strings.TrimSpace(b.Thinking) == "" {
				continue
			}
			if !same {
				text = append(text, b.Thinking)
				continue
			}
			// The model's own reasoning goes back in the field it came in
			// (llama.cpp needs it for gpt-oss, DeepSeek for tool loops).
			// Without a known field there is nowhere to put it.
			if f := reasoningField(b.ThinkingSignature); f != "" {
				if field == "" {
					field = f
				}
				reasoning = append(reasoning, b.Thinking)
			}
		case llm.ContentToolCall:
			args := string(b.Arguments)
			if strings.TrimSpace(args) == "" {
				args = "{}"
			}
			tc := chatToolCall{ID: normalizeToolCallID(b.ID), Type: "function"}
			tc.Function.Name, tc.Function.Arguments = b.Name, args
			a.ToolCalls = append(a.ToolCalls, tc)
			if same && b.ThoughtSignature != "" && json.Valid([]byte(b.ThoughtSignature)) {
				details = append(details, json.RawMessage(b.ThoughtSignature))
			}
		}
	}
	if len(text) == 0 && len(a.ToolCalls) == 0 {
		return nil, false
	}
	if len(text) > 0 {
		// A string, not parts: vLLM-based servers (NVIDIA NIM) and GitHub
		// Copilot reject parts in assistant messages.
		a.Content = strings.Join(text, "\n\n")
	}
	switch joined := strings.Join(reasoning, "\n"); field {
	case fieldReasoningContent:
		a.ReasoningContent = joined
	case fieldReasoning:
		a.Reasoning = joined
	case fieldReasoningText:
		a.ReasoningText = joined
	}
	a.ReasoningDetails = details
	return a, true
}

// reasoningField returns the delta field a thinking signature names, or
// "" when it names none.
func reasoningField(sig string) string {
	switch sig {
	case fieldReasoningContent, fieldReasoning, fieldReasoningText:
		return sig
	}
	return ""
}

// toolResultText joins the text of a tool result. The API has no error
// flag on tool messages, so a failed tool's output says so itself.
func toolResultText(content []llm.Content) (string, bool) {
	var sb strings.Builder
	hasImages := false
	for _, b := range content {
		switch b.Type {
		case llm.ContentText:
			if sb.Len() > 0 {
				sb.WriteByte('\n')
			}
			sb.WriteString(b.Text)
		case llm.ContentImage:
			hasImages = true
		}
	}
	return sb.String(), hasImages
}

// toolMessage is a role "tool" message. There is no is_error field in
// this API: a failed call's output is prefixed "Error: " unless it
// already says so.
func toolMessage(id, text string, isError bool) chatMessage {
	if isError && !strings.HasPrefix(strings.ToLower(text), "error") {
		text = "Error: " + text
	}
	return chatMessage{Role: "tool", Content: text, ToolCallID: &id}
}

// normalizeToolCallID makes an id from any provider acceptable here: the
// call id part of a Responses "call_id|item_id" pair, only letters,
// digits, '_' and '-', at most 40 bytes. It is applied alike to calls and
// results, so pairs still match.
func normalizeToolCallID(id string) string {
	if i := strings.IndexByte(id, '|'); i >= 0 {
		id = id[:i]
	}
	clean := true
	for i := 0; i < len(id); i++ {
		if !idByte(id[i]) {
			clean = false
			break
		}
	}
	if !clean {
		b := []byte(id)
		for i := range b {
			if !idByte(b[i]) {
				b[i] = '_'
			}
		}
		id = string(b)
	}
	if len(id) > maxToolCallIDSize {
		id = id[:maxToolCallIDSize]
	}
	return id
}

func idByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}
