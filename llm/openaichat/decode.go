package openaichat

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/agentd-dev/agentd/llm"
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
	sse   *sseReader
	whole []byte // a non-streamed answer, replayed by Next
	ended bool   // [DONE] seen
	gotID bool

	kind  blockKind
	cur   int // content index of the open block, -1 when none
	tools []toolState
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
	event, data, err := d.sse.next()
	if err != nil {
		return err
	}
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

// chunk decodes one chat.completion.chunk. The JSON is converted to a
// string once; gjson then hands out the values as substrings of it, and
// what outlives the chunk (ids, names, deltas) is copied out of it.
func (d *decoder) chunk(b *llm.Builder, errorEvent bool, data []byte) error {
	if !gjson.ValidBytes(data) {
		if err := syntaxError(data); err != nil {
			return err
		}
	}
	var choice streamChoice
	var usage, errv gjson.Result
	gjson.Parse(string(data)).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "id":
			if !d.gotID && v.Type == gjson.String && v.Str != "" {
				d.gotID = true
				// Cloned: the message outlives the chunk the id is a
				// slice of.
				b.SetResponseID(strings.Clone(v.Str))
			}
		case "choices":
			choice = firstStreamChoice(v)
		case "usage":
			usage = v
		case "error":
			errv = v
		}
		return true
	})
	if errv.Exists() && errv.Type != gjson.Null {
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
	if usage.IsObject() {
		b.SetUsage(parseUsage(usage))
	}
	return nil
}

// completion replays a whole chat.completion, sent by a server that
// ignored "stream": true, as if it had been streamed in one chunk each:
// choices[0].message stands where a delta would be.
func (d *decoder) completion(b *llm.Builder, body []byte) error {
	root := gjson.Parse(string(body))
	if id := root.Get("id"); id.Type == gjson.String && id.Str != "" {
		b.SetResponseID(strings.Clone(id.Str))
	}
	choice := firstChoice(root.Get("choices"))
	if msg := choice.Get("message"); msg.IsObject() {
		d.delta(b, msg)
	}
	if u := root.Get("usage"); u.IsObject() {
		b.SetUsage(parseUsage(u))
	}
	reason := choice.Get("finish_reason").String()
	if reason == "" {
		reason = "stop"
	}
	return d.finishReason(b, reason)
}

// syntaxError reports why data is not JSON, as an error wrapping
// *json.SyntaxError so the stream calls it a malformed chunk.
func syntaxError(data []byte) error {
	var v any
	err := json.Unmarshal(data, &v)
	if err == nil {
		return nil
	}
	if len(data) > 120 {
		data = append(data[:120:120], "…"...)
	}
	return fmt.Errorf("chunk %q: %w", data, err)
}

// firstChoice returns the choice with index 0 (or the first, from servers
// that send no index); other choices only exist when n > 1 is requested,
// which agentd never does.
func firstChoice(choices gjson.Result) gjson.Result {
	var first gjson.Result
	choices.ForEach(func(_, c gjson.Result) bool {
		if idx := c.Get("index"); !idx.Exists() || idx.Int() == 0 {
			first = c
			return false
		}
		return true
	})
	return first
}

// streamChoice is what a chunk's choice brings.
type streamChoice struct {
	delta, finish gjson.Result
	found         bool
}

// firstStreamChoice is firstChoice for a chunk, reading each choice once:
// its index, delta and finish_reason in one pass (a chunk is decoded for
// every token, and each pass over it costs).
func firstStreamChoice(choices gjson.Result) streamChoice {
	var first streamChoice
	choices.ForEach(func(_, c gjson.Result) bool {
		var sc streamChoice
		zero := true
		c.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "index":
				zero = v.Int() == 0
			case "delta":
				sc.delta = v
			case "finish_reason":
				sc.finish = v
			}
			return true
		})
		if zero {
			sc.found = true
			first = sc
			return false
		}
		return true
	})
	return first
}

func (d *decoder) choice(b *llm.Builder, c streamChoice) error {
	delta, finish := c.delta, c.finish
	if delta.IsObject() {
		d.delta(b, delta)
	}
	if finish.Type == gjson.String && finish.Str != "" {
		return d.finishReason(b, finish.Str)
	}
	return nil
}

// delta applies one choices[0].delta: reasoning first (a server that
// sends reasoning and content in one chunk has finished reasoning), then
// text, a refusal (shown as text), tool calls, and OpenRouter's encrypted
// reasoning details.
func (d *decoder) delta(b *llm.Builder, v gjson.Result) {
	var content, refusal, toolCalls, details, reasoning gjson.Result
	var field string
	rank := 4
	v.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "content":
			content = v
		case "refusal":
			refusal = v
		case "tool_calls":
			toolCalls = v
		case "reasoning_details":
			details = v
		case fieldReasoningContent, fieldReasoning, fieldReasoningText:
			if v.Type != gjson.String || v.Str == "" {
				break
			}
			if r, f := reasoningRank(k.Str); r < rank {
				rank, field, reasoning = r, f, v
			}
		}
		return true
	})
	if field != "" {
		d.thinking(b, field, own(reasoning))
	}
	if content.Type == gjson.String && content.Str != "" {
		d.text(b, own(content))
	}
	if refusal.Type == gjson.String && refusal.Str != "" {
		d.text(b, own(refusal))
	}
	if toolCalls.IsArray() {
		toolCalls.ForEach(func(_, tc gjson.Result) bool {
			d.toolCall(b, tc)
			return true
		})
	}
	if details.IsArray() {
		d.reasoningDetails(b, details)
	}
}

// own returns the string value v as a string of its own. gjson hands out
// a value without escapes as a slice of the chunk, which would keep the
// whole chunk alive for as long as anyone keeps the delta (an event log,
// a client's queue); a value with escapes it has already unescaped into
// new memory, always shorter than the quoted original minus its quotes.
func own(v gjson.Result) string {
	if len(v.Raw) == len(v.Str)+2 {
		return strings.Clone(v.Str)
	}
	return v.Str
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
func (d *decoder) toolCall(b *llm.Builder, tc gjson.Result) {
	idx := int64(-1)
	var id, name, args string
	tc.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "index":
			if v.Type == gjson.Number {
				idx = v.Int()
			}
		case "id":
			if v.Type == gjson.String {
				id = v.Str
			}
		case "function":
			v.ForEach(func(k, v gjson.Result) bool {
				switch k.Str {
				case "name":
					if v.Type == gjson.String {
						name = v.Str
					}
				case "arguments":
					switch {
					case v.Type == gjson.String:
						args = own(v)
					case v.IsObject():
						args = strings.Clone(v.Raw)
					}
				}
				return true
			})
		}
		return true
	})
	t := d.lookupTool(idx)
	if t == nil || (id != "" && !t.generated && id != t.id) {
		d.endBlock(b)
		// id and name are cloned where they are kept: the message
		// outlives the chunks they are slices of.
		st := toolState{wire: idx, id: strings.Clone(id), named: name != ""}
		if id == "" {
			st.id, st.generated = newCallID(), true
		}
		st.content = b.ToolCallStart(st.id, strings.Clone(name))
		d.tools = append(d.tools, st)
		d.kind, d.cur = toolBlock, st.content
		t = &d.tools[len(d.tools)-1]
	} else {
		if id != "" && t.generated {
			t.id, t.generated = strings.Clone(id), false
			b.SetToolCallID(t.content, t.id, "")
		}
		if name != "" && !t.named {
			t.named = true
			b.SetToolCallID(t.content, "", strings.Clone(name))
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
func (d *decoder) reasoningDetails(b *llm.Builder, details gjson.Result) {
	details.ForEach(func(_, det gjson.Result) bool {
		if det.Get("type").Str != "reasoning.encrypted" || det.Get("data").Str == "" {
			return true
		}
		id := det.Get("id").Str
		for i := range d.tools {
			if id != "" && d.tools[i].id == id {
				b.SetThoughtSignature(d.tools[i].content, strings.Clone(det.Raw))
			}
		}
		return true
	})
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
func parseUsage(u gjson.Result) llm.Usage {
	prompt := u.Get("prompt_tokens").Int()
	cached := u.Get("prompt_tokens_details.cached_tokens").Int()
	if cached == 0 {
		cached = u.Get("prompt_cache_hit_tokens").Int() // DeepSeek
	}
	written := u.Get("prompt_tokens_details.cache_write_tokens").Int()
	input := prompt - cached - written
	if input < 0 {
		input = 0
	}
	return llm.Usage{Input: input, Output: u.Get("completion_tokens").Int(), CacheRead: cached, CacheWrite: written}
}
