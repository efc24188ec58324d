package openairesponses

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/agentd-dev/agentd/internal/llm"
)

// errorBody is the error answer of OpenAI ({"error":{"message","type",
// "code","param"}}) and of the compatible servers that copy it loosely:
// {"error":"text"} (Ollama), {"message","type","code":400} at the top
// level (vLLM), {"detail":...} (FastAPI servers).
type errorBody struct {
	Error   json.RawMessage `json:"error"`
	Message looseString     `json:"message"`
	Type    looseString     `json:"type"`
	Code    looseString     `json:"code"`
	Detail  json.RawMessage `json:"detail"`
}

// wireError is an error object: the HTTP body's "error", a failed
// response's "error", or an error event's nested "error".
type wireError struct {
	Message looseString `json:"message"`
	Type    looseString `json:"type"`
	Code    looseString `json:"code"`
}

// answerError makes the error of an HTTP error answer. The whole answer is
// read, not only what parses as OpenAI's {"error":{...}}: compatible
// servers answer in other shapes ({"error":"..."}, {"detail":...}, plain
// text).
func answerError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_ = resp.Body.Close()
	errType, msg := parseErrorBody(body)
	return llm.HTTPError(resp.StatusCode, resp.Header, errType, msg, llm.StatusError(resp))
}

// kind is the most specific classifier the error carries: OpenAI's code
// (context_length_exceeded, rate_limit_exceeded) before its type.
func (e *wireError) kind() string {
	if e.Code != "" {
		return string(e.Code)
	}
	return string(e.Type)
}

// parseErrorBody finds the provider's own error type and message in an
// HTTP error body. Both are empty when it has none; the caller then shows
// the status text.
func parseErrorBody(body []byte) (errType, message string) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return "", ""
	}
	var eb errorBody
	if body[0] != '{' || json.Unmarshal(body, &eb) != nil {
		return "", plainMessage(body)
	}
	if len(eb.Error) > 0 {
		switch eb.Error[0] {
		case '{':
			var we wireError
			if json.Unmarshal(eb.Error, &we) == nil && we.Message != "" {
				return we.kind(), string(we.Message)
			}
		case '"':
			var s string
			if json.Unmarshal(eb.Error, &s) == nil && s != "" {
				return string(eb.Type), s
			}
		}
	}
	if eb.Message != "" {
		top := wireError{Message: eb.Message, Type: eb.Type, Code: eb.Code}
		return top.kind(), string(eb.Message)
	}
	if len(eb.Detail) > 0 {
		var s string
		if json.Unmarshal(eb.Detail, &s) == nil && s != "" {
			return "", s
		}
		return "", plainMessage(eb.Detail)
	}
	return "", plainMessage(body)
}

// plainMessage shows a body that is not a known error shape, shortened to
// what fits an error line.
func plainMessage(b []byte) string {
	const max = 300
	s := strings.TrimSpace(string(b))
	if len(s) > max {
		s = s[:max]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	return strings.Join(strings.Fields(s), " ")
}

// looseString decodes a JSON string, number or null as text: servers
// disagree on whether an error code is "rate_limit_exceeded" or 429.
type looseString string

// UnmarshalJSON implements json.Unmarshaler.
func (s *looseString) UnmarshalJSON(b []byte) error {
	switch {
	case len(b) == 0 || string(b) == "null":
		*s = ""
	case b[0] == '"':
		var v string
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		*s = looseString(v)
	case b[0] == '{' || b[0] == '[':
		*s = ""
	default:
		*s = looseString(b)
	}
	return nil
}

// streamError turns an error carried inside the stream into an llm.Error.
func streamError(e *wireError) *llm.Error {
	return llm.StreamError(e.kind(), string(e.Message))
}
