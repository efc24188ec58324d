package anthropic

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/agentd-dev/agentd/internal/llm"
)

// decoder is the wire half of one streamed request.
//
// Each event is decoded into the few fields read below, not into a typed
// union of every event the API has: the SDK's reflective decoding of that
// union cost about three times the CPU and twice the allocations. Every
// event, ping included, returns from Next, so a server that only sends
// keep-alives does not trip the idle timeout.
type decoder struct {
	p *Provider
	m *llm.Model
	c *llm.Context
	o *llm.StreamOptions

	body   io.ReadCloser
	sse    *llm.SSEReader
	ev     wireEvent
	blocks map[int64]*block // by the wire's content-block index
	stop   string
	detail stopDetails
}

// wireEvent holds the fields of every stream event the decoder reads.
// Field names are the Messages API's.
type wireEvent struct {
	Type    string `json:"type"`
	Index   int64  `json:"index"`
	Message struct {
		ID    string    `json:"id"`
		Usage wireUsage `json:"usage"`
	} `json:"message"`
	ContentBlock struct {
		Type      string          `json:"type"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
		Text      string          `json:"text"`
		Thinking  string          `json:"thinking"`
		Signature string          `json:"signature"`
		Data      string          `json:"data"`
	} `json:"content_block"`
	Delta struct {
		Type        string       `json:"type"`
		Text        string       `json:"text"`
		Thinking    string       `json:"thinking"`
		Signature   string       `json:"signature"`
		PartialJSON string       `json:"partial_json"`
		StopReason  string       `json:"stop_reason"`
		StopDetails *stopDetails `json:"stop_details"`
	} `json:"delta"`
	Usage wireUsage      `json:"usage"`
	Error apiErrorObject `json:"error"`
}

// wireUsage is usage as message_start and message_delta report it; nil
// means the event did not include the count.
type wireUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
}

// stopDetails explains a refusal.
type stopDetails struct {
	Category    string `json:"category"`
	Explanation string `json:"explanation"`
}

// apiErrorObject is the error of an HTTP error answer and of an
// "event: error" frame: {"type":"error","error":{"type":…,"message":…}}.
type apiErrorObject struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// block is one content block of the answer as the wire numbers it.
type block struct {
	i   int    // index in the message's content
	sig string // thinking signature so far
	// tool_use: the input sent with content_block_start, used when no
	// input_json_delta follows (some compatible servers send it whole).
	input  json.RawMessage
	deltas bool
}

// Open builds the request and sends it.
func (d *decoder) Open(ctx context.Context) error {
	params, err := buildParams(d.m, d.c, d.o)
	if err != nil {
		return &llm.Error{Kind: llm.ErrBadRequest, Message: "invalid request: " + err.Error(), Err: err}
	}
	req := llm.StreamRequest{
		Base:        cmp.Or(d.m.BaseURL, DefaultBaseURL),
		Path:        "v1/messages",
		Header:      requestHeader(d.m, d.o),
		Body:        params,
		AnswerError: apiError,
	}
	resp, err := req.Open(ctx, d.p.hc)
	if err != nil {
		return err
	}
	d.body = resp.Body
	d.sse = llm.NewSSEReader(resp.Body)
	return nil
}

// Close releases the response body.
func (d *decoder) Close() error {
	return llm.CloseBody(&d.body)
}

// Next reads one event.
func (d *decoder) Next(b *llm.Builder) error {
	frame, err := d.sse.Next()
	if err != nil {
		return err
	}
	b.Chunk()
	if string(frame.Name) == "ping" || len(frame.Data) == 0 {
		return nil
	}
	ev := &d.ev
	*ev = wireEvent{}
	if err := json.Unmarshal(frame.Data, ev); err != nil {
		return &llm.Error{Kind: llm.ErrStream, Message: "the provider sent a malformed chunk: " + err.Error(), Err: err}
	}
	if string(frame.Name) == "error" || ev.Type == "error" {
		return llm.StreamError(ev.Error.Type, ev.Error.Message)
	}
	switch ev.Type {
	case "message_start":
		b.SetResponseID(ev.Message.ID)
		b.SetUsage(ev.Message.Usage.apply(llm.Usage{}))
	case "content_block_start":
		d.blockStart(b)
	case "content_block_delta":
		d.blockDelta(b)
	case "content_block_stop":
		d.blockStop(b)
	case "message_delta":
		b.SetUsage(ev.Usage.apply(b.Usage()))
		if ev.Delta.StopReason != "" {
			d.stop = ev.Delta.StopReason
			if ev.Delta.StopDetails != nil {
				d.detail = *ev.Delta.StopDetails
			}
		}
		if d.stop == "refusal" {
			return refusal(d.detail)
		}
	case "message_stop":
		b.Finish(stopReason(d.stop))
	}
	return nil
}

func (d *decoder) blockStart(b *llm.Builder) {
	cb := &d.ev.ContentBlock
	var bl *block
	switch cb.Type {
	case "text":
		bl = &block{i: b.TextStart()}
		b.TextDelta(bl.i, cb.Text)
	case "thinking":
		bl = &block{i: b.ThinkingStart(), sig: cb.Signature}
		b.ThinkingDelta(bl.i, cb.Thinking)
		if bl.sig != "" {
			b.SetThinkingSignature(bl.i, bl.sig, false)
		}
	case "redacted_thinking":
		bl = &block{i: b.ThinkingStart()}
		b.SetThinkingSignature(bl.i, cb.Data, true)
		b.ThinkingDelta(bl.i, "[Reasoning redacted]")
	case "tool_use":
		bl = &block{i: b.ToolCallStart(cb.ID, cb.Name), input: cb.Input}
	default:
		// Server tools and their results run on Anthropic's side; they
		// are not part of the transcript.
		return
	}
	if d.blocks == nil {
		d.blocks = make(map[int64]*block, 4)
	}
	d.blocks[d.ev.Index] = bl
}

func (d *decoder) blockDelta(b *llm.Builder) {
	bl := d.blocks[d.ev.Index]
	if bl == nil {
		return
	}
	delta := &d.ev.Delta
	switch delta.Type {
	case "text_delta":
		b.TextDelta(bl.i, delta.Text)
	case "thinking_delta":
		b.ThinkingDelta(bl.i, delta.Thinking)
	case "signature_delta":
		bl.sig += delta.Signature
		b.SetThinkingSignature(bl.i, bl.sig, false)
	case "input_json_delta":
		bl.deltas = true
		if delta.PartialJSON != "" {
			b.ToolCallDelta(bl.i, delta.PartialJSON)
		}
	}
}

func (d *decoder) blockStop(b *llm.Builder) {
	bl := d.blocks[d.ev.Index]
	if bl == nil {
		return
	}
	delete(d.blocks, d.ev.Index)
	if !bl.deltas && len(bl.input) > 0 {
		if in := string(bl.input); in != "{}" && in != "null" {
			b.ToolCallDelta(bl.i, in)
		}
	}
	b.End(bl.i)
}

// apply returns u with the counts w reports. In message_delta the output
// count is cumulative and the input counts, when sent, are final; a zero
// there is not taken over the count message_start gave.
func (w *wireUsage) apply(u llm.Usage) llm.Usage {
	if w.OutputTokens != nil {
		u.Output = *w.OutputTokens
	}
	if w.InputTokens != nil && *w.InputTokens > 0 {
		u.Input = *w.InputTokens
	}
	if w.CacheReadInputTokens != nil && *w.CacheReadInputTokens > 0 {
		u.CacheRead = *w.CacheReadInputTokens
	}
	if w.CacheCreationInputTokens != nil && *w.CacheCreationInputTokens > 0 {
		u.CacheWrite = *w.CacheCreationInputTokens
	}
	return u
}

// stopReason maps Anthropic's stop reason to agentd's.
func stopReason(r string) llm.StopReason {
	switch r {
	case "max_tokens", "model_context_window_exceeded":
		return llm.StopLength
	case "tool_use":
		return llm.StopToolUse
	}
	// end_turn, stop_sequence, pause_turn, and none at all.
	return llm.StopStop
}

// refusal is the error that ends a message the model declined to write.
func refusal(d stopDetails) *llm.Error {
	msg := "the model refused to answer this request"
	if d.Category != "" {
		msg += " (" + d.Category + ")"
	}
	if d.Explanation != "" {
		msg += ": " + d.Explanation
	}
	return &llm.Error{Kind: llm.ErrBadRequest, Message: msg}
}

// maxErrorBody bounds how much of an HTTP error answer is read: enough
// for any real error message, not enough for a misrouted download to
// matter.
const maxErrorBody = 1 << 20

// apiError turns an HTTP error answer into an *llm.Error with the API's
// own message and type ({"type":"error","error":{"type","message"}}).
func apiError(resp *http.Response) error {
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_ = resp.Body.Close()
	if err != nil {
		// The answer was cut off: as when the SDK read it, the failed read
		// is the error, for the stream to classify.
		return fmt.Errorf("reading the error answer: %w", err)
	}
	var body struct {
		Error apiErrorObject `json:"error"`
	}
	if json.Unmarshal(raw, &body) != nil || body.Error.Message == "" {
		body.Error.Message = plainMessage(string(raw))
	}
	return llm.HTTPError(resp.StatusCode, resp.Header, body.Error.Type, body.Error.Message, llm.StatusError(resp))
}

// plainMessage is the text of an error answer that is not the API's JSON,
// such as a proxy's: short plain text is kept, anything else (an HTML
// page) gives way to the status text.
func plainMessage(body string) string {
	body = strings.TrimSpace(body)
	if len(body) > 200 || strings.HasPrefix(body, "<") || strings.HasPrefix(body, "{") {
		return ""
	}
	return body
}
