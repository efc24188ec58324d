package openaichat

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"

	"github.com/valyala/fastjson"

	"github.com/agentd-dev/agentd/internal/llm"
)

// Reasoning fields compatible servers put in a delta, in the order pi
// prefers them when a server sends more than one (chutes.ai sends both
// reasoning_content and reasoning with the same text). The name is kept as
// the thinking block's signature so the text can be sent back in the same
// field.
const (
	fieldReasoningContent = "reasoning_content" // DeepSeek, vLLM, llama.cpp
	fieldReasoning        = "reasoning"         // OpenRouter, Ollama, LM Studio, vLLM ≥ 0.10
	fieldReasoningText    = "reasoning_text"
)

// blockKind is the kind of the content block the stream is writing into.
type blockKind uint8

const (
	noBlock blockKind = iota
	textBlock
	thinkingBlock
	toolBlock
)

// toolState tracks one streamed tool call.
type toolState struct {
	wire      int64  // the call's index on the wire; -1 when the server sent none
	content   int    // its index in the message content
	id        string // its id; generated when the server sent none yet
	generated bool
	named     bool
}

// decoder turns one Chat Completions event stream into Builder calls. One
// block is open at a time, as pi does it: text, thinking or a tool call;
// starting another kind (or another tool call) ends it.
type decoder struct {
	p *Provider
	m *llm.Model
	c *llm.Context
	o *llm.StreamOptions

	body  io.ReadCloser
	sse   *llm.SSEReader
	whole []byte // a non-streamed answer, replayed by Next
	ended bool   // [DONE] seen
	gotID bool

	kind  blockKind
	cur   int // content index of the open block, -1 when none
	tools []toolState
	json  fastjson.Parser // reused for every chunk
}

// Next implements llm.Decoder: it reads one event-stream event.
func (d *decoder) Next(b *llm.Builder) error {
	if d.whole != nil {
		whole := d.whole
		d.whole, d.ended = nil, true
		b.Chunk()
		return d.completion(b, whole)
	}
	if d.ended || d.sse == nil {
		return io.EOF
	}
	ev, err := d.sse.Next()
	if err != nil {
		return err
	}
	event, data := ev.Name, ev.Data
	if isDone(data) {
		d.ended = true
		// [DONE] is the server's own end of stream: one that never sent a
		// finish_reason (several compatible servers) still finished.
		if !b.Finished() {
			d.finish(b, llm.StopStop)
		}
		return io.EOF
	}
	b.Chunk()
	if len(bytes.TrimSpace(data)) == 0 {
		return nil // a keep-alive without content
	}
	return d.chunk(b, string(event) == "error", data)
}

func isDone(data []byte) bool {
	return len(data) >= 6 && string(data[:6]) == "[DONE]"
}

// chunk decodes one chat.completion.chunk. The parser copies the chunk
// into a buffer of its own that the next chunk reuses, so everything kept
// beyond this call (ids, names, deltas) is copied out as a string, and
// nothing a client or the event log holds keeps a chunk alive.
func (d *decoder) chunk(b *llm.Builder, errorEvent bool, data []byte) error {
	root, err := d.json.ParseBytes(data)
	if err != nil {
		return malformed(data, err)
	}
	var choice streamChoice
	var usage, errv *fastjson.Value
	if o, _ := root.Object(); o != nil {
		o.Visit(func(k []byte, v *fastjson.Value) {
			switch string(k) {
			case "id":
				if !d.gotID {
					if id := stringOf(v); len(id) > 0 {
						d.gotID = true
						b.SetResponseID(string(id))
					}
				}
			case "choices":
				choice = firstStreamChoice(v)
			case "usage":
				usage = v
			case "error":
				errv = v
			}
		})
	}
	if errv != nil && errv.Type() != fastjson.TypeNull {
		msg, typ := errorValue(errv)
		return llm.StreamError(typ, msg)
	}
	if errorEvent {
		// A server that names the event "error" but sends no error
		// object: its data is all there is to show.
		return llm.StreamError("", string(data))
	}
	if choice.found && !b.Finished() {
		if err := d.choice(b, choice); err != nil {
			return err
		}
	}
	// Servers differ in where usage comes: OpenAI in a last chunk without
	// choices, others on the finish chunk or (cumulatively) on every
	// chunk. The last one seen wins.
	if usage != nil && usage.Type() == fastjson.TypeObject {
		b.SetUsage(parseUsage(usage))
	}
	return nil
}

// completion replays a whole chat.completion, sent by a server that
// ignored "stream": true, as if it had been streamed in one chunk each:
// choices[0].message stands where a delta would be.
func (d *decoder) completion(b *llm.Builder, body []byte) error {
	root, err := d.json.ParseBytes(body)
	if err != nil {
		return malformed(body, err)
	}
	if id := stringOf(root.Get("id")); len(id) > 0 {
		b.SetResponseID(string(id))
	}
	choice := firstChoice(root.Get("choices"))
	if msg := choice.Get("message"); msg != nil && msg.Type() == fastjson.TypeObject {
		d.delta(b, msg)
	}
	if u := root.Get("usage"); u != nil && u.Type() == fastjson.TypeObject {
		b.SetUsage(parseUsage(u))
	}
	reason := string(stringOf(choice.Get("finish_reason")))
	if reason == "" {
		reason = "stop"
	}
	return d.finishReason(b, reason)
}

// malformed reports why data is not JSON. Where encoding/json agrees, the
// error wraps its *json.SyntaxError, which the stream calls a malformed
// chunk; the parser's own words stand where it alone refuses (nesting
// deeper than it goes).
func malformed(data []byte, cause error) error {
	var v any
	err := json.Unmarshal(data, &v)
	if len(data) > 120 {
		data = append(data[:120:120], "…"...)
	}
	if err == nil {
		err = cause
	}
	return fmt.Errorf("chunk %q: %w", data, err)
}

// stringOf returns v's text when v is a JSON string, nil otherwise (absent,
// null, another type). The bytes live in the parser's buffer: they are
// valid until the next chunk, and copied by whoever keeps them.
func stringOf(v *fastjson.Value) []byte {
	if v == nil || v.Type() != fastjson.TypeString {
		return nil
	}
	s, _ := v.StringBytes()
	return s
}

// intOf returns v as an integer when it is a JSON number (a fraction is
// cut off, as some servers write token counts as 12.0), else 0.
func intOf(v *fastjson.Value) int64 {
	if v == nil || v.Type() != fastjson.TypeNumber {
		return 0
	}
	if n, err := v.Int64(); err == nil {
		return n
	}
	f, _ := v.Float64()
	return int64(f)
}

// isZeroIndex reports whether a choice is the first: its index is 0, or
// it has none (servers that send no index).
func isZeroIndex(c *fastjson.Value) bool {
	idx := c.Get("index")
	return idx == nil || intOf(idx) == 0
}

// firstChoice returns the choice with index 0 (or the first, from servers
// that send no index); other choices only exist when n > 1 is requested,
// which agentd never does. It returns nil when there is none.
func firstChoice(choices *fastjson.Value) *fastjson.Value {
	if choices == nil || choices.Type() != fastjson.TypeArray {
		return nil
	}
	a, _ := choices.Array()
	for _, c := range a {
		if c.Type() == fastjson.TypeObject && isZeroIndex(c) {
			return c
		}
	}
	return nil
}

// streamChoice is what a chunk's choice brings.
type streamChoice struct {
	delta, finish *fastjson.Value
	found         bool
}

// firstStreamChoice is firstChoice for a chunk, with the two fields a
// chunk's choice carries.
func firstStreamChoice(choices *fastjson.Value) streamChoice {
	c := firstChoice(choices)
	if c == nil {
		return streamChoice{}
	}
	return streamChoice{delta: c.Get("delta"), finish: c.Get("finish_reason"), found: true}
}

func (d *decoder) choice(b *llm.Builder, c streamChoice) error {
	if c.delta != nil && c.delta.Type() == fastjson.TypeObject {
		d.delta(b, c.delta)
	}
	if reason := stringOf(c.finish); len(reason) > 0 {
		return d.finishReason(b, string(reason))
	}
	return nil
}

// delta applies one choices[0].delta: reasoning first (a server that
// sends reasoning and content in one chunk has finished reasoning), then
// text, a refusal (shown as text), tool calls, and OpenRouter's encrypted
// reasoning details.
func (d *decoder) delta(b *llm.Builder, v *fastjson.Value) {
	var content, refusal, reasoning []byte
	var toolCalls, details *fastjson.Value
	var field string
	rank := 4
	o, _ := v.Object()
	o.Visit(func(k []byte, v *fastjson.Value) {
		switch string(k) {
		case "content":
			content = stringOf(v)
		case "refusal":
			refusal = stringOf(v)
		case "tool_calls":
			toolCalls = v
		case "reasoning_details":
			details = v
		case fieldReasoningContent, fieldReasoning, fieldReasoningText:
			s := stringOf(v)
			if len(s) == 0 {
				break
			}
			if r, f := reasoningRank(string(k)); r < rank {
				rank, field, reasoning = r, f, s
			}
		}
	})
	if field != "" {
		d.thinking(b, field, string(reasoning))
	}
	if len(content) > 0 {
		d.text(b, string(content))
	}
	if len(refusal) > 0 {
		d.text(b, string(refusal))
	}
	if toolCalls != nil && toolCalls.Type() == fastjson.TypeArray {
		calls, _ := toolCalls.Array()
		for _, tc := range calls {
			d.toolCall(b, tc)
		}
	}
	if details != nil && details.Type() == fastjson.TypeArray {
		d.reasoningDetails(b, details)
	}
}

// reasoningRank orders the reasoning fields and returns the constant for
// the name, so the signature does not keep the chunk's memory alive.
func reasoningRank(name string) (int, string) {
	switch name {
	case fieldReasoningContent:
		return 0, fieldReasoningContent
	case fieldReasoning:
		return 1, fieldReasoning
	default:
		return 2, fieldReasoningText
	}
}

func (d *decoder) endBlock(b *llm.Builder) {
	if d.kind != noBlock {
		b.End(d.cur)
		d.kind, d.cur = noBlock, -1
	}
}

func (d *decoder) text(b *llm.Builder, s string) {
	if d.kind != textBlock {
		d.endBlock(b)
		d.kind, d.cur = textBlock, b.TextStart()
	}
	b.TextDelta(d.cur, s)
}

func (d *decoder) thinking(b *llm.Builder, field, s string) {
	if d.kind != thinkingBlock {
		d.endBlock(b)
		d.kind, d.cur = thinkingBlock, b.ThinkingStart()
		b.SetThinkingSignature(d.cur, field, false)
	}
	b.ThinkingDelta(d.cur, s)
}

// toolCall applies one entry of delta.tool_calls. Calls are told apart by
// index; id and name normally come only on a call's first entry. It copes
// with servers that send no index (the entry continues the last call
// unless it brings a new id), reuse one index for different calls (a new
// id starts a new call), send no id (one is generated, and replaced if the
// id arrives later), or send the arguments whole, even as a JSON object.
func (d *decoder) toolCall(b *llm.Builder, tc *fastjson.Value) {
	idx := int64(-1)
	var name []byte
	var args string
	if i := tc.Get("index"); i != nil && i.Type() == fastjson.TypeNumber {
		idx = intOf(i)
	}
	id := stringOf(tc.Get("id"))
	if fn := tc.Get("function"); fn != nil {
		name = stringOf(fn.Get("name"))
		switch a := fn.Get("arguments"); {
		case a == nil:
		case a.Type() == fastjson.TypeString:
			args = string(stringOf(a))
		case a.Type() == fastjson.TypeObject:
			args = string(a.MarshalTo(nil))
		}
	}
	t := d.lookupTool(idx)
	if t == nil || (len(id) > 0 && !t.generated && string(id) != t.id) {
		d.endBlock(b)
		// id and name are copied where they are kept: the parser's
		// buffer they are slices of is reused by the next chunk.
		st := toolState{wire: idx, id: string(id), named: len(name) > 0}
		if len(id) == 0 {
			st.id, st.generated = newCallID(), true
		}
		st.content = b.ToolCallStart(st.id, string(name))
		d.tools = append(d.tools, st)
		d.kind, d.cur = toolBlock, st.content
		t = &d.tools[len(d.tools)-1]
	} else {
		if len(id) > 0 && t.generated {
			t.id, t.generated = string(id), false
			b.SetToolCallID(t.content, t.id, "")
		}
		if len(name) > 0 && !t.named {
			t.named = true
			b.SetToolCallID(t.content, "", string(name))
		}
	}
	if args != "" {
		// A call that was already ended (a server interleaving the
		// arguments of parallel calls) no longer takes arguments; no
		// known server does that.
		b.ToolCallDelta(t.content, args)
	}
}

// lookupTool finds the call a tool_calls entry belongs to: the latest with
// its index or, without an index, the latest call.
func (d *decoder) lookupTool(idx int64) *toolState {
	for i := len(d.tools) - 1; i >= 0; i-- {
		if idx < 0 || d.tools[i].wire == idx {
			return &d.tools[i]
		}
	}
	return nil
}

// newCallID makes an id for a tool call the server sent without one, in
// OpenAI's shape, unique so tool results can be matched to it later.
func newCallID() string {
	return "call_" + rand.Text()[:24]
}

// reasoningDetails keeps OpenRouter's encrypted reasoning (Gemini through
// OpenRouter needs it back with the tool call it belongs to) as the tool
// call's thought signature, as pi does.
func (d *decoder) reasoningDetails(b *llm.Builder, details *fastjson.Value) {
	list, _ := details.Array()
	for _, det := range list {
		if string(stringOf(det.Get("type"))) != "reasoning.encrypted" || len(stringOf(det.Get("data"))) == 0 {
			continue
		}
		id := stringOf(det.Get("id"))
		for i := range d.tools {
			if len(id) > 0 && d.tools[i].id == string(id) {
				b.SetThoughtSignature(d.tools[i].content, string(det.MarshalTo(nil)))
			}
		}
	}
}

// finishReason maps finish_reason. Besides OpenAI's values it accepts the
// spellings compatible servers use; anything unknown is a normal stop.
func (d *decoder) finishReason(b *llm.Builder, reason string) error {
	switch reason {
	case "length", "max_tokens", "model_length":
		d.finish(b, llm.StopLength)
	case "tool_calls", "function_call", "tool_use":
		d.finish(b, llm.StopToolUse)
	case "content_filter":
		return &llm.Error{Kind: llm.ErrBadRequest, Message: "the provider's content filter stopped the response (finish_reason content_filter)"}
	case "error":
		// OpenRouter sends an error object with this; one without it
		// still means the generation failed.
		return llm.StreamError("", "the provider ended the response with finish_reason \"error\"")
	default:
		d.finish(b, llm.StopStop)
	}
	return nil
}

// finish ends the message. A toolUse finish without any tool call is a
// stop: the engine would otherwise wait for calls that do not exist. The
// builder turns stop into toolUse when calls were streamed (servers that
// say "stop" after tool calls).
func (d *decoder) finish(b *llm.Builder, reason llm.StopReason) {
	if reason == llm.StopToolUse && len(d.tools) == 0 {
		reason = llm.StopStop
	}
	d.kind, d.cur = noBlock, -1
	b.Finish(reason)
}

// parseUsage maps the usage object. prompt_tokens includes cached (and,
// where reported, cache-written) tokens; llm.Usage counts them apart.
// completion_tokens already includes reasoning tokens.
func parseUsage(u *fastjson.Value) llm.Usage {
	prompt := intOf(u.Get("prompt_tokens"))
	cached := intOf(u.Get("prompt_tokens_details", "cached_tokens"))
	if cached == 0 {
		cached = intOf(u.Get("prompt_cache_hit_tokens")) // DeepSeek
	}
	written := intOf(u.Get("prompt_tokens_details", "cache_write_tokens"))
	input := prompt - cached - written
	if input < 0 {
		input = 0
	}
	return llm.Usage{Input: input, Output: intOf(u.Get("completion_tokens")), CacheRead: cached, CacheWrite: written}
}
