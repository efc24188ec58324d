package wiremock

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// chatWire renders scripts as the OpenAI Chat Completions API streams them
// (POST /v1/chat/completions with "stream": true): data-only frames, each
// a chat.completion.chunk, ending with "data: [DONE]".
//
//   - The first chunk carries delta.role. A message that starts with a tool
//     call gets the role on that call's first chunk (content null), as
//     OpenAI sends it; otherwise a separate chunk with content "".
//   - Thinking is rendered as delta.reasoning_content, the field DeepSeek,
//     vLLM and llama.cpp use (OpenAI itself streams no reasoning text here).
//   - Each tool call opens with index, id, type and function.name and empty
//     arguments; its argument chunks follow with index and arguments only.
//   - The finish chunk has an empty delta and finish_reason.
//   - When the request asked for stream_options.include_usage (and the
//     script does not play a server that ignores it), every chunk carries
//     "usage": null and a last chunk with "choices": [] has the usage.
//   - A StreamError is sent as OpenRouter does mid-stream: a chunk with a
//     top-level "error" object and finish_reason "error"; the stream then
//     ends without [DONE].
type chatWire struct{}

type (
	chatChunk struct {
		ID                string           `json:"id"`
		Object            string           `json:"object"`
		Created           int64            `json:"created"`
		Model             string           `json:"model"`
		ServiceTier       string           `json:"service_tier,omitempty"`
		SystemFingerprint string           `json:"system_fingerprint,omitempty"`
		Error             *chatStreamError `json:"error,omitempty"`
		Choices           []chatChoice     `json:"choices"`
		Usage             json.RawMessage  `json:"usage,omitempty"`
		Obfuscation       string           `json:"obfuscation,omitempty"`
	}
	chatChoice struct {
		Index        int             `json:"index"`
		Delta        json.RawMessage `json:"delta"`
		Logprobs     json.RawMessage `json:"logprobs"`
		FinishReason *string         `json:"finish_reason"`
	}
	chatUsage struct {
		PromptTokens            int64                 `json:"prompt_tokens"`
		CompletionTokens        int64                 `json:"completion_tokens"`
		TotalTokens             int64                 `json:"total_tokens"`
		PromptTokensDetails     chatPromptDetails     `json:"prompt_tokens_details"`
		CompletionTokensDetails chatCompletionDetails `json:"completion_tokens_details"`
	}
	chatPromptDetails struct {
		CachedTokens     int64 `json:"cached_tokens"`
		CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
		AudioTokens      int64 `json:"audio_tokens"`
	}
	chatCompletionDetails struct {
		ReasoningTokens          int64 `json:"reasoning_tokens"`
		AudioTokens              int64 `json:"audio_tokens"`
		AcceptedPredictionTokens int64 `json:"accepted_prediction_tokens"`
		RejectedPredictionTokens int64 `json:"rejected_prediction_tokens"`
	}
	// chatErrorBody is the error object of the API's HTTP error answers.
	chatErrorBody struct {
		Message string  `json:"message"`
		Type    *string `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	// chatStreamError is the error object OpenRouter puts in a chunk when
	// a generation fails after the stream has started.
	chatStreamError struct {
		Code    *string `json:"code"`
		Message string  `json:"message"`
	}
	// chatDelta is choices[0].delta in the API's field order; nil fields
	// are left out, a RawMessage "null" is sent as null.
	chatDelta struct {
		Role             string              `json:"role,omitempty"`
		Content          json.RawMessage     `json:"content,omitempty"`
		ReasoningContent *string             `json:"reasoning_content,omitempty"`
		ToolCalls        []chatToolCallDelta `json:"tool_calls,omitempty"`
		Refusal          json.RawMessage     `json:"refusal,omitempty"`
	}
	chatToolCallDelta struct {
		Index    int               `json:"index"`
		ID       string            `json:"id,omitempty"`
		Type     string            `json:"type,omitempty"`
		Function chatFunctionDelta `json:"function"`
	}
	chatFunctionDelta struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	}
)

// chatCreated is the fixed creation time of mock chunks, so recorded
// streams are reproducible.
const chatCreated = 1735689600

// Frames implements Wire. The server writes each frame at once and sleeps
// Script.Delay between frames, so, as for the other wires, a frame is one
// content delta: a chunk that carries nothing yet (the role chunk, a tool
// call's opening chunk with its empty arguments) goes out together with
// the next delta, and the finish chunk, the usage chunk and [DONE] (or
// the error chunk) are the last frame. Delay, CutAfter, MalformedAfter
// and HangAfter therefore count deltas.
func (chatWire) Frames(s *Script, r *Request) []string {
	model := "gpt-4o-mini"
	if r != nil {
		if m, ok := r.JSON["model"].(string); ok && m != "" {
			model = m
		}
	}
	includeUsage := !s.NoUsageInStream && r != nil && chatRequestsUsage(r.JSON)
	frames := make([]string, 0, 2+len(s.Thinking)+len(s.Text)+2*len(s.ToolCalls))
	var pending strings.Builder
	n := 0 // chunks written, for the obfuscation padding
	header := func() chatChunk {
		n++
		return chatChunk{
			ID: s.ResponseID, Object: "chat.completion.chunk", Created: chatCreated, Model: model,
			ServiceTier: "default", SystemFingerprint: "fp_mock0c4a1d", Obfuscation: chatObfuscation(n),
		}
	}
	// chunk queues one chunk; flush ends the frame with it.
	chunk := func(delta chatDelta, finish *string, flush bool) {
		c := header()
		c.Choices = []chatChoice{{Index: 0, Delta: chatJSON(delta), Logprobs: json.RawMessage("null"), FinishReason: finish}}
		if includeUsage {
			c.Usage = json.RawMessage("null")
		}
		pending.WriteString(SSE("", string(chatJSON(c))))
		if flush {
			frames = append(frames, pending.String())
			pending.Reset()
		}
	}

	roleSent := false
	role := func() {
		if !roleSent {
			roleSent = true
			chunk(chatDelta{Role: "assistant", Content: json.RawMessage(`""`), Refusal: json.RawMessage("null")}, nil, false)
		}
	}
	for i := range s.Thinking {
		role()
		chunk(chatDelta{Content: json.RawMessage("null"), ReasoningContent: &s.Thinking[i]}, nil, true)
	}
	for _, t := range s.Text {
		role()
		chunk(chatDelta{Content: chatJSON(t)}, nil, true)
	}
	for i, tc := range s.ToolCalls {
		id := tc.ID
		if id == "" {
			id = "call_mock" + strconv.Itoa(i)
		}
		first := chatDelta{ToolCalls: []chatToolCallDelta{{Index: i, ID: id, Type: "function", Function: chatFunctionDelta{Name: tc.Name}}}}
		if !roleSent {
			roleSent = true
			first.Role, first.Content, first.Refusal = "assistant", json.RawMessage("null"), json.RawMessage("null")
		}
		chunk(first, nil, false)
		for _, a := range tc.Args {
			chunk(chatDelta{ToolCalls: []chatToolCallDelta{{Index: i, Function: chatFunctionDelta{Arguments: a}}}}, nil, true)
		}
	}
	role()

	if se := s.StreamError; se != nil {
		finish := "error"
		c := header()
		c.ServiceTier, c.SystemFingerprint, c.Obfuscation = "", "", ""
		c.Error = &chatStreamError{Code: chatOptString(se.Type), Message: se.Message}
		c.Choices = []chatChoice{{Index: 0, Delta: json.RawMessage(`{"content":""}`), Logprobs: json.RawMessage("null"), FinishReason: &finish}}
		pending.WriteString(SSE("", string(chatJSON(c))))
		return append(frames, pending.String())
	}

	finish := chatFinishReason(s.StopReason())
	chunk(chatDelta{}, &finish, false)
	if includeUsage {
		var u Usage
		if s.Usage != nil {
			u = *s.Usage
		}
		prompt := u.Input + u.CacheRead + u.CacheWrite
		c := header()
		c.Choices = []chatChoice{}
		c.Usage = chatJSON(chatUsage{
			PromptTokens: prompt, CompletionTokens: u.Output, TotalTokens: prompt + u.Output,
			PromptTokensDetails:     chatPromptDetails{CachedTokens: u.CacheRead, CacheWriteTokens: u.CacheWrite},
			CompletionTokensDetails: chatCompletionDetails{ReasoningTokens: u.Reasoning},
		})
		pending.WriteString(SSE("", string(chatJSON(c))))
	}
	pending.WriteString("data: [DONE]\n\n")
	return append(frames, pending.String())
}

// ErrorBody implements Wire: {"error": {"message", "type", "param",
// "code"}}. OpenAI reports an overflowing prompt as type
// invalid_request_error with code context_length_exceeded; every other
// ErrorType is sent as the type, with a null code.
func (chatWire) ErrorBody(s *Script) []byte {
	e := chatErrorBody{Message: s.ErrorMessage, Type: chatOptString(s.ErrorType)}
	if s.ErrorType == "context_length_exceeded" {
		e.Type, e.Code = chatOptString("invalid_request_error"), chatOptString(s.ErrorType)
	}
	return chatJSON(struct {
		Error chatErrorBody `json:"error"`
	}{e})
}

// chatFinishReason maps agentd's stop reasons to the API's; anything else
// (content_filter, function_call) is sent as it is.
func chatFinishReason(stop string) string {
	if stop == "toolUse" {
		return "tool_calls"
	}
	return stop
}

// chatRequestsUsage reports whether a request body asked for
// stream_options.include_usage.
func chatRequestsUsage(body map[string]any) bool {
	so, _ := body["stream_options"].(map[string]any)
	v, _ := so["include_usage"].(bool)
	return v
}

// chatObfuscation imitates the random padding OpenAI adds to every chunk
// (stream_options.include_obfuscation defaults to true), deterministically.
func chatObfuscation(n int) string {
	const alphabet = "aZ3kQ9xLm2PvT7wR"
	b := make([]byte, 2+n%7)
	for i := range b {
		b[i] = alphabet[(n*7+i*3)%len(alphabet)]
	}
	return string(b)
}

func chatOptString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// chatJSON encodes v as the API does: without escaping <, > and &.
func chatJSON(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic("llmtest: cannot encode: " + err.Error())
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
