package wiremock

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// anthropicWire renders scripts as the Anthropic Messages API streams
// them: message_start, a ping, one content_block_start / _delta… / _stop
// run per block (thinking, redacted thinking, text, then each tool call),
// message_delta with the stop reason and the final usage, message_stop.
// An in-stream error replaces message_delta and message_stop with an
// "event: error" frame. Field order is the API's.
type anthropicWire struct{}

type (
	antUsage struct {
		InputTokens              int64 `json:"input_tokens"`
		CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
		OutputTokens             int64 `json:"output_tokens"`
	}
	antMessage struct {
		ID           string   `json:"id"`
		Type         string   `json:"type"`
		Role         string   `json:"role"`
		Model        string   `json:"model"`
		Content      []any    `json:"content"`
		StopReason   *string  `json:"stop_reason"`
		StopSequence *string  `json:"stop_sequence"`
		Usage        antUsage `json:"usage"`
	}
	antMessageStart struct {
		Type    string     `json:"type"`
		Message antMessage `json:"message"`
	}
	antBlockStart struct {
		Type         string   `json:"type"`
		Index        int      `json:"index"`
		ContentBlock antBlock `json:"content_block"`
	}
	// antBlock is a content block as content_block_start opens it.
	antBlock struct {
		Type      string    `json:"type"`
		ID        string    `json:"id,omitempty"`
		Name      string    `json:"name,omitempty"`
		Input     *struct{} `json:"input,omitempty"`
		Text      *string   `json:"text,omitempty"`
		Thinking  *string   `json:"thinking,omitempty"`
		Signature *string   `json:"signature,omitempty"`
		Data      string    `json:"data,omitempty"`
	}
	antBlockDelta struct {
		Type  string   `json:"type"`
		Index int      `json:"index"`
		Delta antDelta `json:"delta"`
	}
	antDelta struct {
		Type        string  `json:"type"`
		Text        *string `json:"text,omitempty"`
		Thinking    *string `json:"thinking,omitempty"`
		Signature   *string `json:"signature,omitempty"`
		PartialJSON *string `json:"partial_json,omitempty"`
	}
	antBlockStop struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}
	antMessageDelta struct {
		Type  string `json:"type"`
		Delta struct {
			StopReason   string  `json:"stop_reason"`
			StopSequence *string `json:"stop_sequence"`
		} `json:"delta"`
		Usage antUsage `json:"usage"`
	}
	antError struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
		RequestID string `json:"request_id,omitempty"`
	}
)

// Frames implements Wire. The server writes each frame at once and sleeps
// Script.Delay between frames, so the frames follow the API's timing: one
// frame per content delta, with the events that open and close blocks
// (and message_start before the first) sent together with the next delta,
// and message_delta + message_stop (or the error event) as the last frame.
// Delay, CutAfter, MalformedAfter and HangAfter therefore count deltas.
func (anthropicWire) Frames(s *Script, r *Request) []string {
	var u Usage
	if s.Usage != nil {
		u = *s.Usage
	}
	usage := antUsage{InputTokens: u.Input, CacheCreationInputTokens: u.CacheWrite, CacheReadInputTokens: u.CacheRead, OutputTokens: u.Output}
	model, _ := r.JSON["model"].(string)
	frames := make([]string, 0, 2+len(s.Thinking)+len(s.Text)+2*len(s.ToolCalls))
	var pending strings.Builder

	// message_start reports the input side; its output_tokens is the
	// API's small placeholder, the real count comes in message_delta.
	start := antMessageStart{Type: "message_start", Message: antMessage{
		ID: s.ResponseID, Type: "message", Role: "assistant", Model: model, Content: []any{}, Usage: usage,
	}}
	start.Message.Usage.OutputTokens = min(u.Output, 1)
	pending.WriteString(SSE("message_start", start))
	pending.WriteString(SSE("ping", `{"type": "ping"}`))

	index := 0
	block := func(cb antBlock, deltas []antDelta) {
		pending.WriteString(SSE("content_block_start", antBlockStart{Type: "content_block_start", Index: index, ContentBlock: cb}))
		for _, d := range deltas {
			pending.WriteString(SSE("content_block_delta", antBlockDelta{Type: "content_block_delta", Index: index, Delta: d}))
			if d.PartialJSON != nil && *d.PartialJSON == "" {
				continue // carries nothing: it goes out with the next one
			}
			frames = append(frames, pending.String())
			pending.Reset()
		}
		pending.WriteString(SSE("content_block_stop", antBlockStop{Type: "content_block_stop", Index: index}))
		index++
	}
	empty := ""
	if len(s.Thinking) > 0 || s.ThinkingSignature != "" {
		deltas := make([]antDelta, 0, len(s.Thinking)+1)
		for i := range s.Thinking {
			deltas = append(deltas, antDelta{Type: "thinking_delta", Thinking: &s.Thinking[i]})
		}
		if s.ThinkingSignature != "" {
			deltas = append(deltas, antDelta{Type: "signature_delta", Signature: &s.ThinkingSignature})
		}
		block(antBlock{Type: "thinking", Thinking: &empty, Signature: &empty}, deltas)
	}
	if s.RedactedThinking != "" {
		block(antBlock{Type: "redacted_thinking", Data: s.RedactedThinking}, nil)
	}
	if len(s.Text) > 0 {
		deltas := make([]antDelta, len(s.Text))
		for i := range s.Text {
			deltas[i] = antDelta{Type: "text_delta", Text: &s.Text[i]}
		}
		block(antBlock{Type: "text", Text: &empty}, deltas)
	}
	for i, tc := range s.ToolCalls {
		id := tc.ID
		if id == "" {
			id = "toolu_mock_" + strconv.Itoa(i)
		}
		// The API opens the arguments of every tool call with an empty
		// partial_json.
		deltas := make([]antDelta, 0, len(tc.Args)+1)
		deltas = append(deltas, antDelta{Type: "input_json_delta", PartialJSON: &empty})
		for j := range tc.Args {
			deltas = append(deltas, antDelta{Type: "input_json_delta", PartialJSON: &tc.Args[j]})
		}
		block(antBlock{Type: "tool_use", ID: id, Name: tc.Name, Input: &struct{}{}}, deltas)
	}

	if s.StreamError != nil {
		pending.WriteString(SSE("error", anthropicError(s.StreamError.Type, s.StreamError.Message, "")))
		return append(frames, pending.String())
	}
	md := antMessageDelta{Type: "message_delta", Usage: usage}
	md.Delta.StopReason = anthropicStopReason(s.StopReason())
	pending.WriteString(SSE("message_delta", md))
	pending.WriteString(SSE("message_stop", `{"type":"message_stop"}`))
	return append(frames, pending.String())
}

// anthropicStopReason maps agentd's stop reasons to the API's; anything
// else ("refusal", "pause_turn", …) is passed through as written.
func anthropicStopReason(stop string) string {
	switch stop {
	case "stop":
		return "end_turn"
	case "length":
		return "max_tokens"
	case "toolUse":
		return "tool_use"
	}
	return stop
}

// ErrorBody implements Wire.
func (anthropicWire) ErrorBody(s *Script) []byte {
	typ := s.ErrorType
	if typ == "" {
		typ = anthropicErrorType(s.Status)
	}
	msg := s.ErrorMessage
	if msg == "" {
		msg = http.StatusText(s.Status)
	}
	b, _ := json.Marshal(anthropicError(typ, msg, "req_"+s.ResponseID))
	return b
}

// anthropicErrorType is the error type the API sends with a status. A 413
// is left generic: scripts that want "request_too_large" say so.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	return "api_error"
}

// anthropicError is the API's error object. HTTP error answers carry the
// request id; in-stream error events do not.
func anthropicError(typ, msg, requestID string) antError {
	e := antError{Type: "error", RequestID: requestID}
	e.Error.Type = typ
	e.Error.Message = msg
	return e
}
