package openairesponses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentd-dev/agentd/internal/llm"
)

// noResult is the output sent for a tool call whose result never arrived:
// the API rejects a function_call without a function_call_output.
const noResult = "No result provided"

// buildParams turns an llm.Context into a Responses request; Open sets
// Stream when it sends it.
func buildParams(m *llm.Model, c *llm.Context, o *llm.StreamOptions) (*responseRequest, error) {
	compat := m.CompatOrDefault()
	store := llm.Flag(compat.SupportsStore, true)
	reasoning := m.Reasoning && llm.Flag(compat.SupportsReasoningEffort, true)

	maxTokens := o.MaxTokens
	if maxTokens <= 0 {
		maxTokens = llm.DefaultMaxTokens(m)
	}
	p := &responseRequest{
		Model:           m.ID,
		MaxOutputTokens: maxTokens,
	}
	if store {
		// Nothing is kept server-side: history is replayed in full, with
		// reasoning carried as encrypted_content.
		p.Store = new(false)
	}
	if reasoning {
		if effort := llm.ReasoningEffort(m.ClampThinking(o.Thinking)); effort != "" {
			p.Reasoning = &reasoningConfig{Effort: effort, Summary: "auto"}
		}
		// Asked for even when thinking is off: the model may still reason,
		// and a reasoning item can only be replayed (with store=false) if
		// it carries its encrypted content.
		if store {
			p.Include = []string{"reasoning.encrypted_content"}
		}
	}
	if o.Temperature != nil && !m.Reasoning {
		// Reasoning models reject sampling parameters.
		p.Temperature = new(*o.Temperature)
	}
	if o.SessionID != "" && isOpenAI(m.BaseURL) {
		p.PromptCacheKey = o.SessionID
	}

	conv := converter{model: m, replayNeedsEncrypted: store}
	input, err := conv.convert(c)
	if err != nil {
		return p, err
	}
	p.Input = input

	if len(c.Tools) > 0 {
		strict := llm.Flag(compat.SupportsStrictMode, true)
		p.Tools = make([]*functionTool, 0, len(c.Tools))
		for i := range c.Tools {
			ft, err := newFunctionTool(&c.Tools[i], strict)
			if err != nil {
				return p, err
			}
			p.Tools = append(p.Tools, ft)
		}
	}
	return p, nil
}

// functionTool maps a tool to a function tool. The schema is sent as the
// caller wrote it (key order included), not re-encoded through a map.
func newFunctionTool(t *llm.Tool, strict bool) (*functionTool, error) {
	schema := bytes.TrimSpace(t.Parameters)
	if len(schema) == 0 || bytes.Equal(schema, []byte("null")) {
		schema = []byte(`{"type":"object","properties":{}}`)
	}
	if schema[0] != '{' || !json.Valid(schema) {
		return nil, fmt.Errorf("tool %q: parameters are not a JSON object schema", t.Name)
	}
	ft := &functionTool{Name: t.Name, Description: t.Description, Type: "function", Parameters: schema}
	if strict {
		// The Responses API makes function tools strict unless told
		// otherwise, and strict mode rejects the optional properties that
		// agent tool schemas use.
		ft.Strict = new(false)
	}
	return ft, nil
}

// isOpenAI reports whether baseURL is OpenAI's own API, the only server
// known to accept prompt_cache_key.
func isOpenAI(baseURL string) bool {
	u, err := url.Parse(baseURL)
	if err != nil {
		return false
	}
	h := u.Hostname()
	return h == "api.openai.com" || strings.HasSuffix(h, ".api.openai.com")
}

// call states while pairing tool calls with their results.
const (
	callPending = iota + 1
	callAnswered
)

// converter turns agentd history into Responses input items.
type converter struct {
	model *llm.Model
	// replayNeedsEncrypted: with store=false, a reasoning item the server
	// did not give encrypted content for cannot be replayed.
	replayNeedsEncrypted bool

	items []any // the input items: *easyMessage, *outputMessage, *functionCall, *functionCallOutput or a reasoning item's json.RawMessage
	// callIDs maps a tool call's id as stored in history to the call_id
	// sent; calls holds their pairing state by stored id.
	callIDs map[string]string
	calls   map[string]int
	// pending are the stored ids of the last assistant message's calls,
	// in order.
	pending []string
	synth   int // synthetic ids handed out
}

func (c *converter) convert(ctx *llm.Context) ([]any, error) {
	c.items = make([]any, 0, len(ctx.Messages)+1)
	if ctx.SystemPrompt != "" {
		// pi's choice: the prompt is the first input message rather than
		// "instructions", as developer for reasoning models.
		role := "system"
		if c.model.Reasoning && llm.Flag(c.model.CompatOrDefault().SupportsDeveloperRole, true) {
			role = "developer"
		}
		c.items = append(c.items, &easyMessage{Content: ctx.SystemPrompt, Role: role})
	}
	for i := range ctx.Messages {
		msg := &ctx.Messages[i]
		switch msg.Role {
		case llm.RoleUser:
			c.closeCalls()
			c.user(msg.Content)
		case llm.RoleAssistant:
			c.closeCalls()
			// An errored or aborted turn is incomplete (a reasoning item
			// without its output, half-streamed calls): the model resumes
			// from the last complete state instead.
			if msg.StopReason == llm.StopError || msg.StopReason == llm.StopAborted {
				continue
			}
			c.assistant(msg)
		case llm.RoleToolResult:
			c.toolResult(msg)
		default:
			return nil, fmt.Errorf("message %d: unknown role %q", i, msg.Role)
		}
	}
	c.closeCalls()
	return c.items, nil
}

// closeCalls answers the calls of the last assistant message that got no
// result, before anything else is said.
func (c *converter) closeCalls() {
	for _, id := range c.pending {
		if c.calls[id] != callPending {
			continue
		}
		c.calls[id] = callAnswered
		c.items = append(c.items, functionOutput(c.callIDs[id], noResult))
	}
	c.pending = c.pending[:0]
}

func functionOutput(callID, output string) *functionCallOutput {
	return &functionCallOutput{Output: output, CallID: callID, Type: "function_call_output"}
}

func (c *converter) user(content []llm.Content) {
	parts := make([]any, 0, len(content))
	for i := range content {
		switch b := &content[i]; b.Type {
		case llm.ContentText:
			parts = append(parts, inputText(b.Text))
		case llm.ContentImage:
			if c.model.SupportsImages() {
				parts = append(parts, inputImage(b))
			}
		}
	}
	if len(parts) == 0 {
		return
	}
	c.items = append(c.items, userMessage(parts))
}

func userMessage(parts []any) *easyMessage {
	return &easyMessage{Content: parts, Role: "user"}
}

func inputText(s string) *inputTextPart {
	return &inputTextPart{Text: s, Type: "input_text"}
}

func inputImage(b *llm.Content) *inputImagePart {
	return &inputImagePart{Detail: "auto", ImageURL: "data:" + b.MimeType + ";base64," + b.Data, Type: "input_image"}
}

func (c *converter) assistant(msg *llm.Message) {
	m := c.model
	sameProvider := msg.Provider == m.Provider && msg.API == m.API
	// Reasoning items, message ids and function_call item ids are only
	// meaningful to the model that produced them.
	sameModel := sameProvider && msg.Model == m.ID
	skippedReasoning := false
	for i := range msg.Content {
		b := &msg.Content[i]
		switch b.Type {
		case llm.ContentThinking:
			switch {
			case sameModel:
				if item, ok := c.reasoningItem(b.ThinkingSignature); ok {
					c.items = append(c.items, item)
				} else {
					skippedReasoning = true
				}
			case b.Redacted || strings.TrimSpace(b.Thinking) == "":
			default:
				c.outputText(b.Thinking, "", "")
			}
		case llm.ContentText:
			if b.Text == "" {
				continue
			}
			var id, phase string
			if sameModel {
				id, phase = parseTextSignature(b.TextSignature)
			}
			c.outputText(b.Text, id, phase)
		case llm.ContentToolCall:
			c.functionCall(b, sameProvider, sameModel && !skippedReasoning)
		}
	}
}

// reasoningItem replays a reasoning item stored verbatim as a thinking
// signature.
func (c *converter) reasoningItem(sig string) (json.RawMessage, bool) {
	raw := []byte(sig)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, false
	}
	var head struct {
		Type             string `json:"type"`
		EncryptedContent string `json:"encrypted_content"`
	}
	if err := json.Unmarshal(raw, &head); err != nil || head.Type != "reasoning" {
		return nil, false
	}
	if c.replayNeedsEncrypted && head.EncryptedContent == "" {
		return nil, false
	}
	return json.RawMessage(raw), true
}

// outputText adds an assistant message item. id is the server's message id
// when it may be reused; otherwise a stable synthetic one is made up (the
// item type requires an id).
func (c *converter) outputText(text, id, phase string) {
	if !strings.HasPrefix(id, "msg") || len(id) > 64 {
		c.synth++
		id = "msg_" + strconv.Itoa(c.synth)
	}
	c.items = append(c.items, &outputMessage{
		ID:      id,
		Content: []outputTextPart{{Annotations: []any{}, Text: text, Type: "output_text"}},
		Status:  "completed",
		Phase:   phase,
		Role:    "assistant",
		Type:    "message",
	})
}

func (c *converter) functionCall(b *llm.Content, sameProvider, keepItemID bool) {
	callID, itemID := splitToolCallID(b.ID)
	if !sameProvider {
		callID = sanitizeCallID(callID)
	}
	if callID == "" {
		c.synth++
		callID = "call_" + strconv.Itoa(c.synth)
	}
	args := "{}"
	if len(b.Arguments) > 0 {
		args = string(b.Arguments)
	}
	fc := &functionCall{Arguments: args, CallID: callID, Name: b.Name, Type: "function_call"}
	if keepItemID && strings.HasPrefix(itemID, "fc") {
		fc.ID = itemID
	}
	c.items = append(c.items, fc)
	if c.callIDs == nil {
		c.callIDs = make(map[string]string, 4)
		c.calls = make(map[string]int, 4)
	}
	c.callIDs[b.ID] = callID
	c.calls[b.ID] = callPending
	c.pending = append(c.pending, b.ID)
}

// toolResult adds a function_call_output. A result whose call is not in
// the request (its assistant turn was dropped, or it was answered already)
// is left out: the API rejects outputs without their call.
func (c *converter) toolResult(msg *llm.Message) {
	if c.calls[msg.ToolCallID] != callPending {
		return
	}
	c.calls[msg.ToolCallID] = callAnswered
	var text strings.Builder
	images := 0
	for i := range msg.Content {
		switch b := &msg.Content[i]; b.Type {
		case llm.ContentText:
			if text.Len() > 0 {
				text.WriteByte('\n')
			}
			text.WriteString(b.Text)
		case llm.ContentImage:
			images++
		}
	}
	out := text.String()
	if out == "" && images > 0 {
		out = "(see attached image)"
	}
	// The API has no error flag on function_call_output; the tool's own
	// text says what went wrong, as in pi.
	c.items = append(c.items, functionOutput(c.callIDs[msg.ToolCallID], out))
	if images == 0 || !c.model.SupportsImages() {
		return
	}
	// function_call_output takes text only, so images follow as a user
	// message.
	parts := make([]any, 0, images+1)
	parts = append(parts, inputText("Attached image(s) from tool result:"))
	for i := range msg.Content {
		if b := &msg.Content[i]; b.Type == llm.ContentImage {
			parts = append(parts, inputImage(b))
		}
	}
	c.items = append(c.items, userMessage(parts))
}

// splitToolCallID splits agentd's "<call_id>|<item_id>" tool-call id.
func splitToolCallID(id string) (callID, itemID string) {
	callID, itemID, _ = strings.Cut(id, "|")
	return callID, itemID
}

// joinToolCallID is the id a streamed function call gets: the call_id the
// result must quote, and the item id that lets the same model pair the
// call with its reasoning on replay.
func joinToolCallID(callID, itemID string) string {
	if itemID == "" {
		return callID
	}
	return callID + "|" + itemID
}

// sanitizeCallID makes another provider's tool-call id acceptable as a
// call_id: letters, digits, '_' and '-', at most 64 bytes.
func sanitizeCallID(id string) string {
	clean := true
	for i := 0; i < len(id); i++ {
		if !idByte(id[i]) {
			clean = false
			break
		}
	}
	if clean && len(id) <= 64 {
		return id
	}
	b := make([]byte, 0, min(len(id), 64))
	for i := 0; i < len(id) && len(b) < 64; i++ {
		if idByte(id[i]) {
			b = append(b, id[i])
		} else {
			b = append(b, '_')
		}
	}
	return string(b)
}

func idByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// textSignature is pi's versioned text signature: the message item id and
// its phase (commentary or final_answer) on models that label them.
type textSignature struct {
	V     int    `json:"v"`
	ID    string `json:"id"`
	Phase string `json:"phase,omitempty"`
}

// parseTextSignature reads a text block's signature: pi's {"v":1,...}
// form or a bare message id.
func parseTextSignature(sig string) (id, phase string) {
	if strings.HasPrefix(sig, "{") {
		var ts textSignature
		if err := json.Unmarshal([]byte(sig), &ts); err == nil && ts.V == 1 && ts.ID != "" {
			if ts.Phase != "commentary" && ts.Phase != "final_answer" {
				ts.Phase = ""
			}
			return ts.ID, ts.Phase
		}
	}
	return sig, ""
}

// encodeTextSignature stores a message item id as a text signature: the
// bare id, or pi's versioned form when there is a phase to keep.
func encodeTextSignature(id, phase string) string {
	if phase == "" {
		return id
	}
	b, err := json.Marshal(textSignature{V: 1, ID: id, Phase: phase})
	if err != nil {
		return id
	}
	return string(b)
}
