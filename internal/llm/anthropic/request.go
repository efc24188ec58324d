package anthropic

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/agentd-dev/agentd/internal/llm"
)

// minThinkingBudget is the smallest budget_tokens the API accepts.
const minThinkingBudget = 1024

// buildParams turns a context into the body of a streaming request.
func buildParams(m *llm.Model, c *llm.Context, o *llm.StreamOptions) (*messageRequest, error) {
	p := &messageRequest{
		Model:     m.ID,
		MaxTokens: o.MaxTokens,
		Stream:    true,
	}
	if p.MaxTokens <= 0 {
		p.MaxTokens = llm.DefaultMaxTokens(m)
	}
	if c.SystemPrompt != "" {
		p.System = []textBlock{{Text: c.SystemPrompt, CacheControl: ephemeral(), Type: "text"}}
	}
	p.Messages = convertMessages(m, c.Messages)
	tools, err := convertTools(c.Tools)
	if err != nil {
		return p, err
	}
	p.Tools = tools

	thinking := applyThinking(p, m, o)
	if o.Temperature != nil && !thinking {
		// The API rejects a temperature other than 1 with thinking on.
		p.Temperature = new(*o.Temperature)
	}
	return p, nil
}

// applyThinking sets the thinking parameters for the requested level and
// reports whether thinking is on. Models with adaptive thinking take an
// effort; the others a token budget, which must be at least 1024 and
// below max_tokens, so max_tokens is raised to make room for the answer.
func applyThinking(p *messageRequest, m *llm.Model, o *llm.StreamOptions) bool {
	level := m.ClampThinking(o.Thinking)
	if level == llm.ThinkingOff {
		return false
	}
	if llm.Flag(m.CompatOrDefault().AdaptiveThinking, false) {
		// Newer models omit the thinking text unless asked for it.
		p.Thinking = &thinkingConfig{Display: "summarized", Type: "adaptive"}
		p.OutputConfig = &outputConfig{Effort: effort(level)}
		return true
	}
	maxTokens, budget, ok := thinkingBudget(p.MaxTokens, m.MaxTokens, o.ThinkingBudget(level))
	if !ok {
		return false
	}
	p.MaxTokens = maxTokens
	p.Thinking = &thinkingConfig{BudgetTokens: budget, Type: "enabled"}
	return true
}

// thinkingBudget fits a thinking budget into a request: max_tokens grows
// by the budget (up to the model's limit, modelMax, when known) and the
// budget shrinks if it would leave less than 1024 tokens for the answer,
// but never below the API's minimum of 1024. ok is false when even that
// does not fit below the model's limit.
func thinkingBudget(maxTokens, modelMax, budget int64) (int64, int64, bool) {
	maxTokens += budget
	if modelMax > 0 && maxTokens > modelMax {
		maxTokens = modelMax
	}
	if budget > maxTokens-minThinkingBudget {
		budget = maxTokens - minThinkingBudget
	}
	budget = max(budget, minThinkingBudget)
	return maxTokens, budget, budget < maxTokens
}

// effort maps a thinking level to the effort of adaptive thinking.
func effort(l llm.ThinkingLevel) string {
	switch l {
	case llm.ThinkingMinimal, llm.ThinkingLow:
		return "low"
	case llm.ThinkingMedium:
		return "medium"
	case llm.ThinkingXHigh:
		return "max"
	}
	return "high"
}

// convertTools turns tool definitions into Anthropic tools. The last one
// carries the cache breakpoint that caches the whole tool list.
func convertTools(tools []llm.Tool) ([]tool, error) {
	if len(tools) == 0 {
		return nil, nil
	}
	out := make([]tool, len(tools))
	for i, t := range tools {
		schema, err := inputSchema(t.Parameters)
		if err != nil {
			return nil, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		out[i] = tool{Name: t.Name, InputSchema: schema, Description: t.Description}
		if i == len(tools)-1 {
			out[i].CacheControl = ephemeral()
		}
	}
	return out, nil
}

// inputSchema splits a JSON Schema object into its fields, keeping every
// value as raw JSON so property order survives.
func inputSchema(raw json.RawMessage) (toolSchema, error) {
	var s toolSchema
	if len(raw) == 0 || string(raw) == "null" {
		s.Properties = json.RawMessage("{}")
		return s, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return s, fmt.Errorf("parameters are not a JSON Schema object: %w", err)
	}
	for k, v := range fields {
		switch k {
		case "type":
			// Always "object"; MarshalJSON writes it.
		case "properties":
			s.Properties = v
		case "required":
			if err := json.Unmarshal(v, &s.Required); err != nil {
				return s, fmt.Errorf("parameters: required: %w", err)
			}
		default:
			if s.ExtraFields == nil {
				s.ExtraFields = make(map[string]json.RawMessage, len(fields))
			}
			s.ExtraFields[k] = v
		}
	}
	if s.Properties == nil {
		s.Properties = json.RawMessage("{}")
	}
	return s, nil
}

// convertMessages turns the transcript into Anthropic messages:
//
//   - assistant messages that failed or were aborted are left out: they
//     are incomplete turns, and their tool calls were never run;
//   - thinking is replayed with its signature only to the model that
//     wrote it; from other models it becomes plain text;
//   - consecutive tool results share one user message; a tool call left
//     without a result gets an error result, and a result whose call is
//     not in the request is dropped, since the API rejects both;
//   - tool-call ids are made to fit the API's pattern, the same way for
//     the call and its result;
//   - the last user message carries a cache breakpoint, so the next
//     request reads the conversation so far from the cache.
func convertMessages(m *llm.Model, msgs []llm.Message) []message {
	out := make([]message, 0, len(msgs))
	var pending []string // tool-call ids of the last assistant message still without a result
	var results *message
	flush := func() {
		for _, id := range pending {
			if results == nil {
				results = &message{Role: "user"}
			}
			results.Content = append(results.Content, &toolResultBlock{
				ToolUseID: id, IsError: new(true), Content: []any{text(noResult)}, Type: "tool_result",
			})
		}
		pending = pending[:0]
		if results != nil {
			out = append(out, *results)
			results = nil
		}
	}
	for i := range msgs {
		msg := &msgs[i]
		switch msg.Role {
		case llm.RoleUser:
			flush()
			if blocks := userBlocks(m, msg.Content); len(blocks) > 0 {
				out = append(out, message{Role: "user", Content: blocks})
			}
		case llm.RoleAssistant:
			if msg.StopReason == llm.StopError || msg.StopReason == llm.StopAborted {
				continue
			}
			flush()
			blocks := assistantBlocks(m, msg)
			if len(blocks) == 0 {
				continue
			}
			for _, b := range blocks {
				if tu, ok := b.(*toolUseBlock); ok {
					pending = append(pending, tu.ID)
				}
			}
			out = append(out, message{Role: "assistant", Content: blocks})
		case llm.RoleToolResult:
			id := ToolCallID(msg.ToolCallID)
			k := indexOf(pending, id)
			if k < 0 {
				continue
			}
			pending = append(pending[:k], pending[k+1:]...)
			if results == nil {
				results = &message{Role: "user"}
			}
			results.Content = append(results.Content, toolResult(m, id, msg))
		}
	}
	flush()
	cacheLastUserMessage(out)
	return out
}

func indexOf(ids []string, id string) int {
	for i, v := range ids {
		if v == id {
			return i
		}
	}
	return -1
}

// userBlocks converts user content. Empty text is dropped (the API
// rejects it); images go to models that take them and become a note for
// the others.
func userBlocks(m *llm.Model, content []llm.Content) []any {
	blocks := make([]any, 0, len(content))
	for i := range content {
		c := &content[i]
		switch c.Type {
		case llm.ContentText:
			if c.Text != "" {
				blocks = append(blocks, text(c.Text))
			}
		case llm.ContentImage:
			if m.SupportsImages() {
				blocks = append(blocks, image(c))
			} else {
				blocks = append(blocks, text(imageOmitted))
			}
		}
	}
	return blocks
}

// Texts that stand in for content the request cannot carry.
const (
	imageOmitted = "(image omitted: this model does not take images)"
	noResult     = "No result provided"
)

func image(c *llm.Content) *imageBlock {
	return &imageBlock{Source: imageSource{Data: c.Data, MediaType: c.MimeType, Type: "base64"}, Type: "image"}
}

// assistantBlocks converts an assistant message. Signed thinking is
// replayed to the model that produced it; unsigned thinking (an aborted
// block) and thinking from other models become text, so the context is
// kept without a signature the API would reject.
func assistantBlocks(m *llm.Model, msg *llm.Message) []any {
	sameModel := msg.Provider == m.Provider && msg.API == m.API && msg.Model == m.ID
	blocks := make([]any, 0, len(msg.Content))
	for i := range msg.Content {
		c := &msg.Content[i]
		switch c.Type {
		case llm.ContentText:
			if !isBlank(c.Text) {
				blocks = append(blocks, text(c.Text))
			}
		case llm.ContentThinking:
			switch {
			case c.Redacted:
				if sameModel && c.ThinkingSignature != "" {
					blocks = append(blocks, &redactedThinkingBlock{Data: c.ThinkingSignature, Type: "redacted_thinking"})
				}
			case sameModel && c.ThinkingSignature != "":
				blocks = append(blocks, &thinkingBlock{Signature: c.ThinkingSignature, Thinking: c.Thinking, Type: "thinking"})
			case !isBlank(c.Thinking):
				blocks = append(blocks, text(c.Thinking))
			}
		case llm.ContentToolCall:
			args := c.Arguments
			if len(args) == 0 || !json.Valid(args) {
				args = json.RawMessage("{}")
			}
			blocks = append(blocks, &toolUseBlock{ID: ToolCallID(c.ID), Input: args, Name: c.Name, Type: "tool_use"})
		}
	}
	return blocks
}

// toolResultBlock converts a tool result, images included. A result with
// only images gets a short text so the model knows what it is looking at.
func toolResult(m *llm.Model, id string, msg *llm.Message) *toolResultBlock {
	tr := &toolResultBlock{ToolUseID: id, Type: "tool_result"}
	if msg.IsError {
		tr.IsError = new(true)
	}
	hasText := false
	for i := range msg.Content {
		c := &msg.Content[i]
		switch c.Type {
		case llm.ContentText:
			if c.Text != "" {
				hasText = true
				tr.Content = append(tr.Content, text(c.Text))
			}
		case llm.ContentImage:
			if m.SupportsImages() {
				tr.Content = append(tr.Content, image(c))
			} else {
				hasText = true
				tr.Content = append(tr.Content, text(imageOmitted))
			}
		}
	}
	if len(tr.Content) > 0 && !hasText {
		tr.Content = append([]any{text("(see attached image)")}, tr.Content...)
	}
	return tr
}

// cacheLastUserMessage puts a cache breakpoint on the last block of the
// last user message.
func cacheLastUserMessage(msgs []message) {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != "user" {
			continue
		}
		blocks := msgs[i].Content
		if len(blocks) == 0 {
			return
		}
		switch b := blocks[len(blocks)-1].(type) {
		case *textBlock:
			b.CacheControl = ephemeral()
		case *imageBlock:
			b.CacheControl = ephemeral()
		case *toolResultBlock:
			b.CacheControl = ephemeral()
		}
		return
	}
}

func isBlank(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
		default:
			return false
		}
	}
	return true
}

// maxToolCallID is the longest tool-use id the API accepts.
const maxToolCallID = 64

// ToolCallID returns id in the form the API accepts (^[a-zA-Z0-9_-]{1,64}$).
// Ids that already fit are kept; others (from other providers, such as
// OpenAI Responses' "call_…|fc_…") have every other character replaced
// and a hash of the original appended, so two ids never meet in one and
// a call and its result always map to the same id.
func ToolCallID(id string) string {
	if validToolCallID(id) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	const hashLen = 16
	keep := min(len(id), maxToolCallID-hashLen-1)
	b := make([]byte, 0, keep+1+hashLen)
	for i := 0; i < keep; i++ {
		if c := id[i]; isIDChar(c) {
			b = append(b, c)
		} else {
			b = append(b, '_')
		}
	}
	if len(b) > 0 {
		b = append(b, '_')
	}
	return string(hex.AppendEncode(b, sum[:hashLen/2]))
}

func validToolCallID(id string) bool {
	if id == "" || len(id) > maxToolCallID {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !isIDChar(id[i]) {
			return false
		}
	}
	return true
}

func isIDChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}
