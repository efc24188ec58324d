package wiremock

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// responsesWire renders scripts as the OpenAI Responses API streams them
// (POST /v1/responses with "stream": true): one "event: <type>" frame per
// semantic event, each data object led by its "type" and a running
// "sequence_number", items announced by response.output_item.added and
// closed by response.output_item.done, and the stream ended by
// response.completed, response.incomplete or response.failed. There is no
// "[DONE]" terminator on this API.
//
// Script usage is in agentd's terms: Usage.Input is the uncached part of
// the prompt, so the mock reports input_tokens = Input + CacheRead with
// input_tokens_details.cached_tokens = CacheRead, and output_tokens =
// Output with Reasoning as output_tokens_details.reasoning_tokens.
//
// Stop "length" ends with response.incomplete (reason max_output_tokens),
// Stop "content_filter" with response.incomplete (reason content_filter).
// A StreamError is sent as the top-level "error" event followed by
// response.failed.
type responsesWire struct{}

// responsesCreatedAt is a fixed created_at so recorded streams are stable.
const responsesCreatedAt = 1741487325

// Frames implements Wire.
func (responsesWire) Frames(s *Script, r *Request) []string {
	w := responsesWriter{s: s, req: r.JSON}
	w.render()
	return w.frames
}

// ErrorBody implements Wire. OpenAI answers errors with
// {"error":{"message","type","param","code"}}.
func (responsesWire) ErrorBody(s *Script) []byte {
	msg := s.ErrorMessage
	if msg == "" {
		msg = responsesDefaultErrorMessage(s.Status)
	}
	errType, code := responsesErrorTypeCode(s.Status, s.ErrorType)
	body := respObj{{"error", respObj{
		{"message", msg},
		{"type", errType},
		{"param", nil},
		{"code", code},
	}}}
	return respMarshal(body)
}

// responsesErrorTypeCode splits a script's ErrorType into OpenAI's error
// "type" (a category such as invalid_request_error) and "code" (a specific
// reason such as context_length_exceeded).
func responsesErrorTypeCode(status int, scripted string) (errType string, code any) {
	switch {
	case scripted == "insufficient_quota":
		return scripted, scripted
	case strings.HasSuffix(scripted, "_error") || scripted == "requests" || scripted == "tokens":
		return scripted, nil
	case scripted != "":
		code = scripted
	case status == http.StatusUnauthorized:
		code = "invalid_api_key"
	case status == http.StatusNotFound:
		code = "model_not_found"
	case status == http.StatusTooManyRequests:
		code = "rate_limit_exceeded"
	}
	switch {
	case status == http.StatusTooManyRequests:
		errType = "requests"
	case status == http.StatusForbidden:
		errType = "permission_error"
	case status >= 500:
		errType = "server_error"
	default:
		errType = "invalid_request_error"
	}
	return errType, code
}

func responsesDefaultErrorMessage(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys."
	case http.StatusNotFound:
		return "The model `gpt-unknown` does not exist or you do not have access to it."
	case http.StatusTooManyRequests:
		return "Rate limit reached for requests"
	case http.StatusInternalServerError:
		return "The server had an error while processing your request. Sorry about that!"
	}
	if t := http.StatusText(status); t != "" {
		return t
	}
	return "request failed"
}

// responsesWriter accumulates the frames of one response.
type responsesWriter struct {
	s      *Script
	req    map[string]any
	frames []string
	seq    int
	output []any // finished output items, for the terminal response object
}

// idSuffix makes item ids from the response id, as OpenAI's item ids
// share no prefix with it but are unique per response.
func (w *responsesWriter) idSuffix() string {
	return strings.TrimPrefix(w.s.ResponseID, "resp_")
}

// emit appends one frame. fields follow "type" and "sequence_number", the
// order in which OpenAI writes them.
func (w *responsesWriter) emit(typ string, fields ...respKV) {
	obj := make(respObj, 0, len(fields)+2)
	obj = append(obj, respKV{"type", typ}, respKV{"sequence_number", w.seq})
	obj = append(obj, fields...)
	w.seq++
	w.frames = append(w.frames, "event: "+typ+"\ndata: "+string(respMarshal(obj))+"\n\n")
}

// obfuscation imitates the random padding OpenAI adds to delta events so
// that their sizes do not leak token lengths; it is deterministic here so
// recorded streams stay stable.
func (w *responsesWriter) obfuscation() string {
	const alphabet = "aZ3kQ9xLm2TbV7wRc5NyE1pHd8GsJ4uF6oK0iY"
	n := 4 + w.seq%9
	start := (w.seq * 7) % len(alphabet)
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[(start+i)%len(alphabet)]
	}
	return string(b)
}

func (w *responsesWriter) render() {
	s := w.s
	w.emit("response.created", respKV{"response", w.response("in_progress", nil, nil, nil)})
	w.emit("response.in_progress", respKV{"response", w.response("in_progress", nil, nil, nil)})

	idx := 0
	if len(s.Thinking) > 0 || s.ThinkingSignature != "" {
		w.reasoning(idx)
		idx++
	}
	if len(s.Text) > 0 {
		w.message(idx)
		idx++
	}
	for i := range s.ToolCalls {
		w.functionCall(idx, i)
		idx++
	}

	if e := s.StreamError; e != nil {
		w.emit("error",
			respKV{"code", e.Type},
			respKV{"message", e.Message},
			respKV{"param", nil},
		)
		failure := respObj{{"code", e.Type}, {"message", e.Message}}
		w.emit("response.failed", respKV{"response", w.response("failed", failure, nil, w.usage())})
		return
	}
	switch s.StopReason() {
	case "length":
		w.emit("response.incomplete", respKV{"response",
			w.response("incomplete", nil, respObj{{"reason", "max_output_tokens"}}, w.usage())})
	case "content_filter":
		w.emit("response.incomplete", respKV{"response",
			w.response("incomplete", nil, respObj{{"reason", "content_filter"}}, w.usage())})
	default:
		w.emit("response.completed", respKV{"response", w.response("completed", nil, nil, w.usage())})
	}
}

func (w *responsesWriter) itemStatus() string {
	switch w.s.StopReason() {
	case "length", "content_filter":
		return "incomplete"
	}
	return "completed"
}

func (w *responsesWriter) reasoning(idx int) {
	s := w.s
	id := "rs_" + w.idSuffix()
	w.emit("response.output_item.added",
		respKV{"output_index", idx},
		respKV{"item", respObj{{"id", id}, {"type", "reasoning"}, {"summary", []any{}}}},
	)
	text := strings.Join(s.Thinking, "")
	if len(s.Thinking) > 0 {
		w.emit("response.reasoning_summary_part.added",
			respKV{"item_id", id}, respKV{"output_index", idx}, respKV{"summary_index", 0},
			respKV{"part", respObj{{"type", "summary_text"}, {"text", ""}}},
		)
		for _, d := range s.Thinking {
			w.emit("response.reasoning_summary_text.delta",
				respKV{"item_id", id}, respKV{"output_index", idx}, respKV{"summary_index", 0},
				respKV{"delta", d}, respKV{"obfuscation", w.obfuscation()},
			)
		}
		w.emit("response.reasoning_summary_text.done",
			respKV{"item_id", id}, respKV{"output_index", idx}, respKV{"summary_index", 0},
			respKV{"text", text},
		)
		w.emit("response.reasoning_summary_part.done",
			respKV{"item_id", id}, respKV{"output_index", idx}, respKV{"summary_index", 0},
			respKV{"part", respObj{{"type", "summary_text"}, {"text", text}}},
		)
	}
	summary := []any{}
	if len(s.Thinking) > 0 {
		summary = append(summary, respObj{{"type", "summary_text"}, {"text", text}})
	}
	item := respObj{{"id", id}, {"type", "reasoning"}}
	if enc := w.encryptedContent(); enc != "" {
		item = append(item, respKV{"encrypted_content", enc})
	}
	item = append(item, respKV{"summary", summary})
	w.emit("response.output_item.done", respKV{"output_index", idx}, respKV{"item", item})
	w.output = append(w.output, item)
}

// encryptedContent is what the reasoning item carries when the request
// asked for include ["reasoning.encrypted_content"] (or the script set a
// signature to round-trip).
func (w *responsesWriter) encryptedContent() string {
	if w.s.ThinkingSignature != "" {
		return w.s.ThinkingSignature
	}
	inc, _ := w.req["include"].([]any)
	for _, v := range inc {
		if v == "reasoning.encrypted_content" {
			return "gAAAAA" + base64.StdEncoding.EncodeToString([]byte("encrypted reasoning of "+w.s.ResponseID))
		}
	}
	return ""
}

func (w *responsesWriter) message(idx int) {
	s := w.s
	id := "msg_" + w.idSuffix()
	w.emit("response.output_item.added",
		respKV{"output_index", idx},
		respKV{"item", respObj{{"id", id}, {"type", "message"}, {"status", "in_progress"}, {"content", []any{}}, {"role", "assistant"}}},
	)
	w.emit("response.content_part.added",
		respKV{"item_id", id}, respKV{"output_index", idx}, respKV{"content_index", 0},
		respKV{"part", respOutputText("")},
	)
	for _, d := range s.Text {
		w.emit("response.output_text.delta",
			respKV{"item_id", id}, respKV{"output_index", idx}, respKV{"content_index", 0},
			respKV{"delta", d}, respKV{"logprobs", []any{}}, respKV{"obfuscation", w.obfuscation()},
		)
	}
	text := strings.Join(s.Text, "")
	w.emit("response.output_text.done",
		respKV{"item_id", id}, respKV{"output_index", idx}, respKV{"content_index", 0},
		respKV{"text", text}, respKV{"logprobs", []any{}},
	)
	w.emit("response.content_part.done",
		respKV{"item_id", id}, respKV{"output_index", idx}, respKV{"content_index", 0},
		respKV{"part", respOutputText(text)},
	)
	item := respObj{{"id", id}, {"type", "message"}, {"status", w.itemStatus()}, {"content", []any{respOutputText(text)}}, {"role", "assistant"}}
	w.emit("response.output_item.done", respKV{"output_index", idx}, respKV{"item", item})
	w.output = append(w.output, item)
}

func respOutputText(text string) respObj {
	return respObj{{"type", "output_text"}, {"annotations", []any{}}, {"logprobs", []any{}}, {"text", text}}
}

func (w *responsesWriter) functionCall(idx, n int) {
	tc := w.s.ToolCalls[n]
	id := "fc_" + w.idSuffix() + "_" + strconv.Itoa(n)
	callID := tc.ID
	if callID == "" {
		callID = "call_" + w.idSuffix() + "_" + strconv.Itoa(n)
	}
	w.emit("response.output_item.added",
		respKV{"output_index", idx},
		respKV{"item", respObj{{"id", id}, {"type", "function_call"}, {"status", "in_progress"}, {"arguments", ""}, {"call_id", callID}, {"name", tc.Name}}},
	)
	for _, d := range tc.Args {
		w.emit("response.function_call_arguments.delta",
			respKV{"item_id", id}, respKV{"output_index", idx},
			respKV{"delta", d}, respKV{"obfuscation", w.obfuscation()},
		)
	}
	args := strings.Join(tc.Args, "")
	w.emit("response.function_call_arguments.done",
		respKV{"item_id", id}, respKV{"output_index", idx}, respKV{"arguments", args},
	)
	item := respObj{{"id", id}, {"type", "function_call"}, {"status", w.itemStatus()}, {"arguments", args}, {"call_id", callID}, {"name", tc.Name}}
	w.emit("response.output_item.done", respKV{"output_index", idx}, respKV{"item", item})
	w.output = append(w.output, item)
}

func (w *responsesWriter) usage() respObj {
	var u Usage
	if w.s.Usage != nil {
		u = *w.s.Usage
	}
	input := u.Input + u.CacheRead
	return respObj{
		{"input_tokens", input},
		{"input_tokens_details", respObj{{"cached_tokens", u.CacheRead}}},
		{"output_tokens", u.Output},
		{"output_tokens_details", respObj{{"reasoning_tokens", u.Reasoning}}},
		{"total_tokens", input + u.Output},
	}
}

// response is the response object carried by the lifecycle events. The
// request's settings are echoed back, as the API does.
func (w *responsesWriter) response(status string, failure, incomplete, usage respObj) respObj {
	req := w.req
	echo := func(key string, def any) any {
		if v, ok := req[key]; ok {
			return v
		}
		return def
	}
	reasoning := respObj{{"effort", nil}, {"summary", nil}}
	if r, ok := req["reasoning"].(map[string]any); ok {
		reasoning = respObj{{"effort", r["effort"]}, {"summary", r["summary"]}}
	}
	output := []any{}
	if status != "in_progress" {
		output = append(output, w.output...)
	}
	var errField, incField, usageField any
	if failure != nil {
		errField = failure
	}
	if incomplete != nil {
		incField = incomplete
	}
	if usage != nil {
		usageField = usage
	}
	return respObj{
		{"id", w.s.ResponseID},
		{"object", "response"},
		{"created_at", responsesCreatedAt},
		{"status", status},
		{"background", false},
		{"error", errField},
		{"incomplete_details", incField},
		{"instructions", echo("instructions", nil)},
		{"max_output_tokens", echo("max_output_tokens", nil)},
		{"max_tool_calls", nil},
		{"model", echo("model", "gpt-mock")},
		{"output", output},
		{"parallel_tool_calls", echo("parallel_tool_calls", true)},
		{"previous_response_id", nil},
		{"prompt_cache_key", echo("prompt_cache_key", nil)},
		{"reasoning", reasoning},
		{"safety_identifier", nil},
		{"service_tier", "default"},
		{"store", echo("store", true)},
		{"temperature", echo("temperature", 1)},
		{"text", respObj{{"format", respObj{{"type", "text"}}}, {"verbosity", "medium"}}},
		{"tool_choice", "auto"},
		{"tools", echo("tools", []any{})},
		{"top_logprobs", 0},
		{"top_p", 1},
		{"truncation", "disabled"},
		{"usage", usageField},
		{"user", nil},
		{"metadata", respObj{}},
	}
}

// respKV and respObj build JSON objects whose keys keep the order the
// real API writes them in, which maps would not.
type respKV struct {
	k string
	v any
}

type respObj []respKV

// MarshalJSON implements json.Marshaler.
func (o respObj) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, kv := range o {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, err := respEncode(kv.k)
		if err != nil {
			return nil, err
		}
		buf.Write(k)
		buf.WriteByte(':')
		v, err := respEncode(kv.v)
		if err != nil {
			return nil, err
		}
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// respEncode encodes like the API does: UTF-8 and <, >, & written as is.
func respEncode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func respMarshal(v any) []byte {
	b, err := respEncode(v)
	if err != nil {
		panic("llmtest: cannot encode responses frame: " + err.Error())
	}
	return b
}
