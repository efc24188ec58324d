package openairesponses

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/agentd-dev/agentd/internal/llm"
)

// decoder is the llm.Decoder of one Responses stream.
type decoder struct {
	hc      *http.Client
	params  *responseRequest
	header  http.Header
	base    string
	openErr *llm.Error // the request could not be built

	body io.ReadCloser
	sse  *llm.SSEReader
	name []byte // event name of the current frame
	data []byte // data of the current frame
	js   frameDecoder
	ev   wireEvent

	items []itemState // by output_index
	last  int         // output index of the item opened last, -1 for none
	done  bool        // the wire stream is over ([DONE])
}

// Open implements llm.Decoder.
func (d *decoder) Open(ctx context.Context) error {
	if d.openErr != nil {
		return d.openErr
	}
	d.params.Stream = true
	req := llm.StreamRequest{
		Base:        d.base,
		Path:        "responses",
		Header:      d.header,
		Body:        d.params,
		AnswerError: answerError,
		ErrPrefix:   "openai-responses",
	}
	resp, err := req.Open(ctx, d.hc)
	if err != nil {
		return err
	}
	d.body = resp.Body
	d.sse = llm.NewSSEReader(resp.Body)
	d.sse.KeepAlives = true
	d.last = -1
	return nil
}

// Close implements llm.Decoder.
func (d *decoder) Close() error {
	return llm.CloseBody(&d.body)
}

// Next implements llm.Decoder: it reads one event and maps it.
func (d *decoder) Next(b *llm.Builder) error {
	if d.done {
		return io.EOF
	}
	for {
		f, err := d.readEvent()
		if err != nil {
			return err
		}
		switch f {
		case frameEnd:
			return io.EOF
		case frameKeepAlive:
			// Returning lets the stream see the server is alive (its idle
			// timer restarts): proxies such as OpenRouter send comments
			// while a model thinks for minutes.
			return nil
		}
		if len(d.data) == 0 {
			continue
		}
		b.Chunk()
		// Not part of this API, but some compatible servers end with it.
		if string(d.data) == "[DONE]" {
			d.done = true
			return io.EOF
		}
		return d.handle(b)
	}
}

// What readEvent found.
type frame uint8

const (
	frameEnd       frame = iota // the clean end of the body
	frameEvent                  // an event, in d.name and d.data
	frameKeepAlive              // a comment between events
)

// readEvent reads the next event-stream frame into d.name and d.data,
// which stay valid until the next call.
func (d *decoder) readEvent() (frame, error) {
	ev, err := d.sse.Next()
	switch {
	case errors.Is(err, io.EOF):
		return frameEnd, nil
	case err != nil:
		return frameEnd, err
	case ev.KeepAlive:
		return frameKeepAlive, nil
	}
	d.name, d.data = ev.Name, ev.Data
	return frameEvent, nil
}

// item kinds, by the output item type that opened them.
type itemKind uint8

const (
	kindNone itemKind = iota
	kindReasoning
	kindMessage
	kindCall
)

// itemState tracks one output item and the content block it became.
type itemState struct {
	kind     itemKind
	open     bool
	streamed bool   // deltas arrived, so the done item's text is not needed
	block    int    // content index in the message
	summary  int    // reasoning summary part the last delta belonged to
	id       string // a function call's "<call_id>|<item_id>"
	// implicit: opened by a delta because the server sent no
	// output_item.added; no output_item.done will close it either.
	implicit bool
}

const maxOutputIndex = 1 << 12

// item returns the open item of kind at output index idx. Servers that
// omit or misnumber output_index get the item opened last, if it is of
// that kind.
func (d *decoder) item(idx int, kind itemKind) *itemState {
	if idx >= 0 && idx < len(d.items) && d.items[idx].open && d.items[idx].kind == kind {
		return &d.items[idx]
	}
	if d.last >= 0 && d.items[d.last].open && d.items[d.last].kind == kind {
		return &d.items[d.last]
	}
	return nil
}

// startItem records a new item at output index idx, ending whatever was
// still open there.
func (d *decoder) startItem(b *llm.Builder, idx int, kind itemKind, block int, id string) *itemState {
	if idx < 0 || idx >= maxOutputIndex {
		idx = len(d.items)
	}
	for len(d.items) <= idx {
		d.items = append(d.items, itemState{})
	}
	st := &d.items[idx]
	if st.open {
		b.End(st.block)
	}
	*st = itemState{kind: kind, open: true, block: block, id: id}
	d.last = idx
	return st
}

// ensure returns the open item of kind at idx, opening one when the server
// skipped response.output_item.added.
func (d *decoder) ensure(b *llm.Builder, idx int, kind itemKind) *itemState {
	if st := d.item(idx, kind); st != nil {
		return st
	}
	// A server that announces no items will not close them: the previous
	// implicit item ends when the next one starts.
	for i := range d.items {
		if st := &d.items[i]; st.open && st.implicit {
			d.endItem(b, st)
		}
	}
	var block int
	switch kind {
	case kindReasoning:
		block = b.ThinkingStart()
	case kindMessage:
		block = b.TextStart()
	default:
		return nil
	}
	st := d.startItem(b, idx, kind, block, "")
	st.implicit = true
	return st
}

func (d *decoder) endItem(b *llm.Builder, st *itemState) {
	b.End(st.block)
	st.open = false
}

// handle maps one event to builder calls.
func (d *decoder) handle(b *llm.Builder) error {
	ev := &d.ev
	if err := d.js.decode(d.data, ev); err != nil {
		return fmt.Errorf("openai-responses: bad %q event: %w", d.name, err)
	}
	if ev.Type == evUnknown && len(d.name) > 0 {
		ev.Type = parseEventType(d.name)
	}
	if b.Finished() {
		return nil // nothing after the terminal event changes the message
	}
	switch ev.Type {
	case evSummaryTextDelta:
		st := d.ensure(b, ev.OutputIndex, kindReasoning)
		d.summaryPart(b, st, ev.SummaryIndex)
		b.ThinkingDelta(st.block, ev.Delta)
		st.streamed = st.streamed || ev.Delta != ""
	case evReasoningTextDelta:
		st := d.ensure(b, ev.OutputIndex, kindReasoning)
		b.ThinkingDelta(st.block, ev.Delta)
		st.streamed = st.streamed || ev.Delta != ""
	case evTextDelta, evRefusalDelta:
		st := d.ensure(b, ev.OutputIndex, kindMessage)
		b.TextDelta(st.block, ev.Delta)
		st.streamed = st.streamed || ev.Delta != ""
	case evArgsDelta:
		if st := d.item(ev.OutputIndex, kindCall); st != nil {
			b.ToolCallDelta(st.block, ev.Delta)
			st.streamed = st.streamed || ev.Delta != ""
		}
	case evArgsDone:
		if st := d.item(ev.OutputIndex, kindCall); st != nil && !st.streamed && ev.Arguments != "" {
			b.ToolCallDelta(st.block, ev.Arguments)
			st.streamed = true
		}
	case evSummaryPartAdded:
		d.summaryPart(b, d.ensure(b, ev.OutputIndex, kindReasoning), ev.SummaryIndex)
	case evItemAdded:
		return d.itemAdded(b)
	case evItemDone:
		return d.itemDone(b)
	case evCreated:
		if ev.Response != nil {
			b.SetResponseID(ev.Response.ID)
		}
	case evCompleted:
		return d.finish(b, ev.Response, "")
	case evIncomplete:
		return d.finish(b, ev.Response, "incomplete")
	case evFailed:
		r := ev.Response
		if r == nil {
			r = &wireResponse{}
		}
		d.setUsage(b, r)
		return failure(r)
	case evError:
		e := ev.Error
		if e == nil {
			e = &wireError{Message: ev.Message, Code: ev.Code}
		}
		return streamError(e)
	}
	return nil
}

// summaryPart separates reasoning summary parts with a blank line, as pi
// joins them, so the streamed thinking equals the finished one.
func (d *decoder) summaryPart(b *llm.Builder, st *itemState, part int) {
	if st.streamed && part != st.summary {
		b.ThinkingDelta(st.block, "\n\n")
	}
	st.summary = part
}

func (d *decoder) decodeItem() (*wireItem, error) {
	var it wireItem
	if len(d.ev.Item) == 0 {
		return &it, nil
	}
	if err := json.Unmarshal(d.ev.Item, &it); err != nil {
		return nil, fmt.Errorf("openai-responses: bad output item: %w", err)
	}
	return &it, nil
}

func (d *decoder) itemAdded(b *llm.Builder) error {
	it, err := d.decodeItem()
	if err != nil {
		return err
	}
	idx := d.ev.OutputIndex
	switch it.Type {
	case "reasoning":
		d.startItem(b, idx, kindReasoning, b.ThinkingStart(), it.ID)
	case "message":
		d.startItem(b, idx, kindMessage, b.TextStart(), it.ID)
	case "function_call":
		id := joinToolCallID(it.CallID, it.ID)
		st := d.startItem(b, idx, kindCall, b.ToolCallStart(id, it.Name), id)
		if it.Arguments != "" {
			b.ToolCallDelta(st.block, it.Arguments)
			st.streamed = true
		}
	}
	return nil
}

func (d *decoder) itemDone(b *llm.Builder) error {
	it, err := d.decodeItem()
	if err != nil {
		return err
	}
	idx := d.ev.OutputIndex
	switch it.Type {
	case "reasoning":
		st := d.ensure(b, idx, kindReasoning)
		if !st.streamed {
			b.ThinkingDelta(st.block, it.thinking())
		}
		// pi keeps the whole item, encrypted_content included, so the
		// same model can be handed its reasoning back.
		var sig bytes.Buffer
		if err := json.Compact(&sig, d.ev.Item); err == nil {
			b.SetThinkingSignature(st.block, sig.String(), false)
		}
		d.endItem(b, st)
	case "message":
		st := d.ensure(b, idx, kindMessage)
		if !st.streamed {
			b.TextDelta(st.block, it.text())
		}
		if it.ID != "" {
			b.SetTextSignature(st.block, encodeTextSignature(it.ID, it.Phase))
		}
		d.endItem(b, st)
	case "function_call":
		id := joinToolCallID(it.CallID, it.ID)
		st := d.item(idx, kindCall)
		if st == nil {
			st = d.startItem(b, idx, kindCall, b.ToolCallStart(id, it.Name), id)
		} else if it.CallID != "" && id != st.id {
			// Some servers only know the ids once the call is complete.
			b.SetToolCallID(st.block, id, it.Name)
		}
		if !st.streamed && it.Arguments != "" {
			b.ToolCallDelta(st.block, it.Arguments)
		}
		d.endItem(b, st)
	}
	return nil
}

// finish handles the terminal response of a completed or incomplete
// stream. status is the response status the event implies, when the
// event's name says more than a server's response object might.
func (d *decoder) finish(b *llm.Builder, r *wireResponse, status string) error {
	if r == nil {
		r = &wireResponse{}
	}
	if status == "" {
		status = r.Status
	}
	d.setUsage(b, r)
	switch status {
	case "failed", "cancelled":
		return failure(r)
	case "incomplete":
		reason := ""
		if r.IncompleteDetails != nil {
			reason = r.IncompleteDetails.Reason
		}
		if reason == "content_filter" {
			return &llm.Error{Kind: llm.ErrBadRequest, Message: "the response was stopped by the content filter (incomplete: content_filter)"}
		}
		b.Finish(llm.StopLength)
	default:
		b.Finish(llm.StopStop)
	}
	return nil
}

// failure is the error of a failed response.
func failure(r *wireResponse) error {
	if r.Error != nil && (r.Error.Message != "" || r.Error.kind() != "") {
		return streamError(r.Error)
	}
	if r.IncompleteDetails != nil && r.IncompleteDetails.Reason != "" {
		return llm.StreamError("", "incomplete: "+r.IncompleteDetails.Reason)
	}
	if r.Status == "cancelled" {
		return llm.StreamError("", "the response was cancelled")
	}
	return llm.StreamError("", "the response failed without error details")
}

func (d *decoder) setUsage(b *llm.Builder, r *wireResponse) {
	u := r.Usage
	if u == nil {
		return
	}
	cached := u.InputTokensDetails.CachedTokens
	// input_tokens counts the cached prefix too; agentd, like pi, counts
	// only the uncached part as input.
	b.SetUsage(llm.Usage{
		Input:     max(u.InputTokens-cached, 0),
		Output:    u.OutputTokens,
		CacheRead: cached,
	})
}

// eventType is the "type" of an event, decoded without allocating.
type eventType uint8

const (
	evUnknown eventType = iota
	evCreated
	evItemAdded
	evItemDone
	evSummaryPartAdded
	evSummaryTextDelta
	evReasoningTextDelta
	evTextDelta
	evRefusalDelta
	evArgsDelta
	evArgsDone
	evCompleted
	evIncomplete
	evFailed
	evError
)

func parseEventType(b []byte) eventType {
	switch string(b) {
	case "response.output_text.delta":
		return evTextDelta
	case "response.function_call_arguments.delta":
		return evArgsDelta
	case "response.reasoning_summary_text.delta":
		return evSummaryTextDelta
	case "response.reasoning_text.delta":
		return evReasoningTextDelta
	case "response.refusal.delta":
		return evRefusalDelta
	case "response.function_call_arguments.done":
		return evArgsDone
	case "response.output_item.added":
		return evItemAdded
	case "response.output_item.done":
		return evItemDone
	case "response.reasoning_summary_part.added":
		return evSummaryPartAdded
	case "response.created", "response.in_progress", "response.queued":
		return evCreated
	case "response.completed", "response.done":
		return evCompleted
	case "response.incomplete":
		return evIncomplete
	case "response.failed":
		return evFailed
	case "error":
		return evError
	}
	return evUnknown
}

// UnmarshalJSON implements json.Unmarshaler.
func (t *eventType) UnmarshalJSON(b []byte) error {
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' && bytes.IndexByte(b, '\\') < 0 {
		*t = parseEventType(b[1 : len(b)-1])
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		*t = evUnknown
		return nil
	}
	*t = parseEventType([]byte(s))
	return nil
}

// wireEvent holds the fields of every event type this decoder maps; fields
// an event does not carry are skipped by the JSON decoder without cost.
type wireEvent struct {
	Type         eventType       `json:"type"`
	OutputIndex  int             `json:"output_index"`
	SummaryIndex int             `json:"summary_index"`
	Delta        string          `json:"delta"`
	Arguments    string          `json:"arguments"`
	Item         json.RawMessage `json:"item"`
	Response     *wireResponse   `json:"response"`
	// error event: flat per the API reference, nested in some servers.
	Code    looseString `json:"code"`
	Message looseString `json:"message"`
	Error   *wireError  `json:"error"`
}

type wireResponse struct {
	ID                string     `json:"id"`
	Status            string     `json:"status"`
	Usage             *wireUsage `json:"usage"`
	Error             *wireError `json:"error"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
}

type wireUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens int64 `json:"output_tokens"`
}

// wireItem is an output item: reasoning, message or function_call.
type wireItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Phase     string `json:"phase"`
	Summary   []struct {
		Text string `json:"text"`
	} `json:"summary"`
	Content []struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	} `json:"content"`
}

// thinking is a finished reasoning item's text: its summary parts, or
// the raw reasoning text that open-weight models report instead.
func (it *wireItem) thinking() string {
	var parts []string
	for _, s := range it.Summary {
		if s.Text != "" {
			parts = append(parts, s.Text)
		}
	}
	if len(parts) == 0 {
		for _, c := range it.Content {
			if c.Type == "reasoning_text" && c.Text != "" {
				parts = append(parts, c.Text)
			}
		}
	}
	return strings.Join(parts, "\n\n")
}

// text is a finished message item's text.
func (it *wireItem) text() string {
	var sb strings.Builder
	for _, c := range it.Content {
		switch c.Type {
		case "output_text":
			sb.WriteString(c.Text)
		case "refusal":
			sb.WriteString(c.Refusal)
		}
	}
	return sb.String()
}

// frameDecoder decodes one event's JSON at a time through a long-lived
// json.Decoder. json.Unmarshal builds a new decode state, syntax-checker
// stack and error context for every call, four allocations per event that
// a decoder reuses; the results are the same.
type frameDecoder struct {
	src frameReader
	dec *json.Decoder
}

// frameReader hands the decoder one frame's data.
type frameReader struct {
	b         []byte
	delivered int64
}

func (r *frameReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	r.delivered += int64(n)
	return n, nil
}

// decode decodes data, which must hold exactly one JSON value, into ev.
func (f *frameDecoder) decode(data []byte, ev *wireEvent) error {
	// Keep the item buffer: json reuses a RawMessage's capacity.
	item := ev.Item[:0]
	*ev = wireEvent{Item: item}
	if f.dec == nil {
		f.src = frameReader{}
		f.dec = json.NewDecoder(&f.src)
	}
	f.src.b = data
	err := f.dec.Decode(ev)
	if err == nil {
		// What the decoder has not scanned must be white space: a frame
		// holds one value.
		unscanned := int(f.src.delivered-f.dec.InputOffset()) + len(f.src.b)
		if unscanned <= len(data) && len(bytes.TrimSpace(data[len(data)-unscanned:])) == 0 {
			f.src.b = nil
			return nil
		}
	}
	// Decoder errors are sticky, and for a cut-off value it reports
	// io.ErrUnexpectedEOF rather than a *json.SyntaxError: start over, and
	// let json.Unmarshal describe what is wrong.
	f.dec = nil
	*ev = wireEvent{}
	if uerr := json.Unmarshal(data, ev); uerr != nil {
		return uerr
	}
	return err
}
