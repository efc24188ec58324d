package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// Decoder is the wire half of a stream: one per request, written once per
// wire API. Stream drives it from the consumer's goroutine, so a decoder
// needs no locking and no goroutine of its own.
type Decoder interface {
	// Open sends the request. A non-nil error fails the stream; an *Error
	// keeps its classification, anything else is treated as a network
	// failure.
	Open(ctx context.Context) error
	// Next reads one wire chunk and reports what it means through b. It
	// returns io.EOF when the wire stream has ended; the decoder must have
	// called b.Finish by then if the model finished normally.
	Next(b *Builder) error
	// Close releases the response body.
	Close() error
}

// errStreamIdle is the cancellation cause when a stream sends nothing for
// longer than its idle timeout.
var errStreamIdle = errors.New("stream idle timeout")

// Stream is the event sequence of one assistant message. It is pulled by
// one goroutine:
//
//	for s.Next() { ev := s.Event(); partial := s.Partial(); ... }
//	msg := s.Result()
//
// It always ends with exactly one done or error event, and Result is then
// the final message: stopReason stop/length/toolUse, or error/aborted with
// an errorMessage and whatever content had arrived.
type Stream struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	dec    Decoder
	b      Builder
	idle   time.Duration
	timer  *time.Timer

	opened bool
	ended  bool // the final event has been handed out
	cur    Event
	err    *Error
	onEnd  []func(*Error)
	// authHint is the Hint an auth failure gets (SetAuthHint).
	authHint string
}

// SetAuthHint makes an authentication failure (ErrAuth, a provider's
// 401) of this stream carry hint, so every face that shows the failed
// message says which key to check. The caller that resolved the key
// (it knows where the key came from; the provider does not) sets it
// before Next.
func (s *Stream) SetAuthHint(hint string) { s.authHint = hint }

// OnEnd registers f to be called once when the stream ends, with the
// error that ended it (nil when it finished normally, an aborted error
// when it was closed early). Wrappers such as circuit breakers use it to
// learn the outcome of a stream they hand on. Call it before Next.
func (s *Stream) OnEnd(f func(err *Error)) { s.onEnd = append(s.onEnd, f) }

func (s *Stream) runOnEnd(err *Error) {
	fs := s.onEnd
	s.onEnd = nil
	for _, f := range fs {
		f(err)
	}
}

// NewStream starts a stream that pulls from dec. Cancelling ctx aborts it
// at once; idle > 0 fails it when no chunk arrives for that long (the
// first chunk included). The message's timestamp, api, provider and model
// come from m.
func NewStream(ctx context.Context, m *Model, dec Decoder, idle time.Duration) *Stream {
	s := &Stream{dec: dec, idle: idle}
	s.ctx, s.cancel = context.WithCancelCause(ctx)
	s.b.init(m)
	if idle > 0 {
		s.timer = time.AfterFunc(idle, func() { s.cancel(errStreamIdle) })
	}
	return s
}

// Context is the stream's own context, cancelled when the stream ends.
// Decoders pass it to their HTTP requests.
func (s *Stream) Context() context.Context { return s.ctx }

// Next advances to the next event. It returns false after the done or
// error event has been returned.
func (s *Stream) Next() bool {
	for {
		if ev, ok := s.b.pop(); ok {
			s.cur = ev
			if ev.Type == EventDone || ev.Type == EventError {
				s.ended = true
				s.release()
			}
			return true
		}
		if s.ended {
			return false
		}
		s.step()
	}
}

// step produces at least one event or ends the stream.
func (s *Stream) step() {
	if !s.opened {
		s.opened = true
		if err := s.ctx.Err(); err != nil {
			s.fail(nil)
			return
		}
		if err := s.dec.Open(s.ctx); err != nil {
			s.fail(err)
			return
		}
		s.resetIdle()
		s.b.start()
		return
	}
	if s.b.finished {
		// The decoder reported the end of the message; it may still have
		// trailing frames (usage after finish_reason, [DONE]) to read.
		for {
			err := s.dec.Next(&s.b)
			if err != nil {
				break
			}
		}
		s.b.emitDone()
		return
	}
	err := s.dec.Next(&s.b)
	s.resetIdle()
	if err == nil {
		return
	}
	if errors.Is(err, io.EOF) {
		if s.b.finished {
			s.b.emitDone()
			return
		}
		err = &Error{Kind: ErrStream, Message: "the stream ended before the message was complete"}
	}
	s.fail(err)
}

func (s *Stream) resetIdle() {
	if s.timer != nil {
		s.timer.Reset(s.idle)
	}
}

// fail ends the stream with an error or aborted message.
func (s *Stream) fail(err error) {
	if !s.b.started {
		s.b.start()
	}
	switch cause := context.Cause(s.ctx); {
	case s.ctx.Err() != nil && errors.Is(cause, errStreamIdle):
		s.err = &Error{Kind: ErrIdleTimeout, Message: fmt.Sprintf("the provider sent nothing for %s; the stream was closed", s.idle), Err: err}
	case s.ctx.Err() != nil:
		msg := "Request was aborted"
		if !s.opened || s.b.chunks == 0 {
			msg = "Request was aborted."
		}
		s.err = &Error{Kind: ErrAborted, Message: msg, Err: cause}
	default:
		if e, ok := AsError(err); ok {
			s.err = e
		} else {
			s.err = classifyTransport(err, s.b.chunks > 0)
		}
		if s.err.Kind == ErrAuth && s.authHint != "" && s.err.Hint == "" {
			// A copy: the decoder's error may be shared.
			e := *s.err
			e.Hint = s.authHint
			s.err = &e
		}
	}
	s.b.emitError(s.err)
}

func classifyTransport(err error, midStream bool) *Error {
	var ne net.Error
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return &Error{Kind: ErrStream, Message: "the provider sent a malformed chunk: " + err.Error(), Err: err}
	case midStream:
		return &Error{Kind: ErrStream, Message: "the stream was cut off: " + err.Error(), Err: err}
	case errors.As(err, &ne):
		return &Error{Kind: ErrNetwork, Message: "could not reach the provider: " + err.Error(), Err: err}
	default:
		return &Error{Kind: ErrNetwork, Message: "request failed: " + err.Error(), Err: err}
	}
}

// release stops the timer and frees the connection once the final event
// is out.
func (s *Stream) release() {
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.opened {
		_ = s.dec.Close()
	}
	s.cancel(context.Canceled)
	s.runOnEnd(s.err)
}

// Event is the current event.
func (s *Stream) Event() Event { return s.cur }

// Partial is the message built so far. It is the same value Result returns
// at the end; it changes as the stream advances.
func (s *Stream) Partial() *Message {
	s.b.syncArgs()
	return &s.b.msg
}

// Result is the final message once Next has returned false.
func (s *Stream) Result() *Message { return s.Partial() }

// Err is the error that ended the stream, nil if it finished normally.
func (s *Stream) Err() *Error { return s.err }

// Close aborts a stream that is still running and releases it. It is safe
// to call more than once and after the stream ended.
func (s *Stream) Close() {
	if !s.ended {
		s.cancel(context.Canceled)
		s.ended = true
		if s.timer != nil {
			s.timer.Stop()
		}
		if s.opened {
			_ = s.dec.Close()
		}
		err := s.err
		if err == nil {
			err = &Error{Kind: ErrAborted, Message: "Request was aborted"}
		}
		s.runOnEnd(err)
	}
}

// Collect drains s and returns the final message and the error, if any.
func Collect(s *Stream) (*Message, error) {
	defer s.Close()
	for s.Next() {
	}
	if s.err != nil {
		return s.Result(), s.err
	}
	return s.Result(), nil
}

// Builder assembles an assistant message from decoded chunks and queues
// the events that describe it. Decoders call its methods; content indexes
// it returns are indexes into the message's content.
type Builder struct {
	msg      Message
	model    *Model
	queue    []Event
	head     int
	started  bool
	finished bool
	chunks   int
	reason   StopReason
	// open tool calls: raw argument JSON per content index, and whether
	// the partial arguments need re-deriving.
	args  map[int]*toolArgs
	open  []int // content indexes of blocks started but not ended
	dirty bool
	// text accumulates the open text or thinking block. A strings.Builder
	// hands out its contents without copying, so appending a delta and
	// publishing the block's new text is amortised O(len(delta)) instead
	// of re-copying the whole block per delta.
	text    strings.Builder
	textIdx int
}

type toolArgs struct {
	raw   []byte
	dirty bool
}

func (b *Builder) init(m *Model) {
	b.model = m
	b.msg = Message{
		Role: RoleAssistant, Content: []Content{}, API: m.API, Provider: m.Provider,
		Model: m.ID, StopReason: StopStop, Timestamp: time.Now().UnixMilli(),
	}
	b.queue = make([]Event, 0, 4)
}

func (b *Builder) push(ev Event) {
	b.queue = append(b.queue, ev)
}

func (b *Builder) pop() (Event, bool) {
	if b.head < len(b.queue) {
		ev := b.queue[b.head]
		b.head++
		if b.head == len(b.queue) {
			b.queue = b.queue[:0]
			b.head = 0
		}
		return ev, true
	}
	return Event{}, false
}

func (b *Builder) start() {
	b.started = true
	b.push(Event{Type: EventStart})
}

// Model is the model being streamed.
func (b *Builder) Model() *Model { return b.model }

// Chunk records that a wire chunk arrived; a stream that has seen chunks
// and then breaks is "cut off" rather than "unreachable".
func (b *Builder) Chunk() { b.chunks++ }

// SetResponseID records the provider's id for the response.
func (b *Builder) SetResponseID(id string) {
	if id != "" {
		b.msg.ResponseID = id
	}
}

// SetUsage records token counts (replacing earlier ones) and prices them
// with the model's price list.
func (b *Builder) SetUsage(u Usage) {
	b.model.CalculateCost(&u)
	b.msg.Usage = u
}

// Usage returns the usage recorded so far.
func (b *Builder) Usage() Usage { return b.msg.Usage }

// appendBlock appends delta to the text or thinking of block i and
// returns the block's new full text.
func (b *Builder) appendBlock(i int, current, delta string) string {
	if b.textIdx != i+1 {
		// Another block was accumulating (or none): start over from
		// this block's text so far.
		b.text = strings.Builder{}
		b.text.WriteString(current)
		b.textIdx = i + 1
	}
	b.text.WriteString(delta)
	return b.text.String()
}

// TextStart opens a text block and returns its index.
func (b *Builder) TextStart() int {
	i := len(b.msg.Content)
	b.msg.Content = append(b.msg.Content, Content{Type: ContentText})
	b.open = append(b.open, i)
	b.push(Event{Type: EventTextStart, ContentIndex: i})
	return i
}

// TextDelta appends to text block i.
func (b *Builder) TextDelta(i int, delta string) {
	if delta == "" {
		return
	}
	c := &b.msg.Content[i]
	c.Text = b.appendBlock(i, c.Text, delta)
	b.push(Event{Type: EventTextDelta, ContentIndex: i, Delta: delta})
}

// SetTextSignature records an opaque signature for text block i.
func (b *Builder) SetTextSignature(i int, sig string) { b.msg.Content[i].TextSignature = sig }

// ThinkingStart opens a thinking block and returns its index.
func (b *Builder) ThinkingStart() int {
	i := len(b.msg.Content)
	b.msg.Content = append(b.msg.Content, Content{Type: ContentThinking})
	b.open = append(b.open, i)
	b.push(Event{Type: EventThinkingStart, ContentIndex: i})
	return i
}

// ThinkingDelta appends to thinking block i.
func (b *Builder) ThinkingDelta(i int, delta string) {
	if delta == "" {
		return
	}
	c := &b.msg.Content[i]
	c.Thinking = b.appendBlock(i, c.Thinking, delta)
	b.push(Event{Type: EventThinkingDelta, ContentIndex: i, Delta: delta})
}

// SetThinkingSignature records the signature (or, for redacted thinking,
// the encrypted payload) of thinking block i.
func (b *Builder) SetThinkingSignature(i int, sig string, redacted bool) {
	b.msg.Content[i].ThinkingSignature = sig
	b.msg.Content[i].Redacted = redacted
}

// ToolCallStart opens a tool-call block and returns its index.
func (b *Builder) ToolCallStart(id, name string) int {
	i := len(b.msg.Content)
	b.msg.Content = append(b.msg.Content, Content{Type: ContentToolCall, ID: id, Name: name, Arguments: json.RawMessage("{}")})
	b.open = append(b.open, i)
	if b.args == nil {
		b.args = make(map[int]*toolArgs, 2)
	}
	b.args[i] = &toolArgs{}
	b.push(Event{Type: EventToolCallStart, ContentIndex: i})
	return i
}

// SetToolCallID sets or corrects the id and name of tool call i (some
// servers send them after the first argument chunk).
func (b *Builder) SetToolCallID(i int, id, name string) {
	if id != "" {
		b.msg.Content[i].ID = id
	}
	if name != "" {
		b.msg.Content[i].Name = name
	}
}

// SetThoughtSignature records a provider signature on tool call i.
func (b *Builder) SetThoughtSignature(i int, sig string) { b.msg.Content[i].ThoughtSignature = sig }

// ToolCallDelta appends raw argument JSON to tool call i. The partial
// arguments are re-derived lazily, only when someone looks at Partial.
func (b *Builder) ToolCallDelta(i int, delta string) {
	a := b.args[i]
	if a == nil {
		return
	}
	a.raw = append(a.raw, delta...)
	a.dirty = true
	b.dirty = true
	b.push(Event{Type: EventToolCallDelta, ContentIndex: i, Delta: delta})
}

// syncArgs brings the arguments of open tool calls up to date with the
// raw JSON received so far.
func (b *Builder) syncArgs() {
	if !b.dirty {
		return
	}
	b.dirty = false
	for i, a := range b.args {
		if a.dirty {
			a.dirty = false
			b.msg.Content[i].Arguments = RepairJSONObject(a.raw)
		}
	}
}

// End closes block i, emitting its *_end event. Ending a block twice is a
// no-op.
func (b *Builder) End(i int) {
	k := -1
	for j, o := range b.open {
		if o == i {
			k = j
			break
		}
	}
	if k < 0 {
		return
	}
	b.open = append(b.open[:k], b.open[k+1:]...)
	c := &b.msg.Content[i]
	switch c.Type {
	case ContentText:
		b.push(Event{Type: EventTextEnd, ContentIndex: i, Content: c.Text})
	case ContentThinking:
		b.push(Event{Type: EventThinkingEnd, ContentIndex: i, Content: c.Thinking})
	case ContentToolCall:
		a := b.args[i]
		delete(b.args, i)
		c.Arguments = parseArgs(a.raw)
		tc := *c
		b.push(Event{Type: EventToolCallEnd, ContentIndex: i, ToolCall: &tc})
	}
}

// parseArgs turns the complete raw arguments of a tool call into a JSON
// object. A model that sent broken JSON gets the best repair, so the tool
// sees what it can and reports what is missing.
func parseArgs(raw []byte) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("{}")
	}
	if json.Valid(raw) {
		trimmed := trimSpace(raw)
		if len(trimmed) > 0 && trimmed[0] == '{' {
			return compact(trimmed)
		}
		return json.RawMessage("{}")
	}
	return RepairJSONObject(raw)
}

// Finish records that the model ended the message with reason (stop,
// length or toolUse). Open blocks are closed; the done event is emitted
// once the decoder reports the end of the wire stream, so usage that
// arrives after the finish reason is still counted.
func (b *Builder) Finish(reason StopReason) {
	if b.finished {
		return
	}
	b.finished = true
	if reason == StopStop {
		for i := range b.msg.Content {
			if b.msg.Content[i].Type == ContentToolCall {
				reason = StopToolUse
				break
			}
		}
	}
	b.reason = reason
	b.closeOpen()
}

// Finished reports whether Finish has been called.
func (b *Builder) Finished() bool { return b.finished }

func (b *Builder) closeOpen() {
	for len(b.open) > 0 {
		b.End(b.open[0])
	}
}

func (b *Builder) emitDone() {
	b.msg.StopReason = b.reason
	b.syncArgs()
	b.push(Event{Type: EventDone, Reason: b.reason})
}

func (b *Builder) emitError(e *Error) {
	// Partial content stays, tool calls with whatever arguments arrived:
	// the engine never executes the calls of an error or aborted message,
	// and a transcript shows what the model had said.
	b.syncArgs()
	if e.Kind == ErrAborted {
		b.msg.StopReason = StopAborted
	} else {
		b.msg.StopReason = StopError
	}
	b.msg.ErrorMessage = e.Error()
	// As pi's providers, the open text and thinking blocks end (their
	// *_end events carry the final stop reason); a half-streamed tool
	// call does not.
	for _, i := range append([]int(nil), b.open...) {
		if b.msg.Content[i].Type != ContentToolCall {
			b.End(i)
		}
	}
	b.args = nil
	b.open = nil
	b.push(Event{Type: EventError, Reason: b.msg.StopReason})
}
