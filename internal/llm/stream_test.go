package llm

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

// stepDecoder replays a list of steps; a step may block until the context
// ends to imitate a stalled connection.
type stepDecoder struct {
	ctx     context.Context
	openErr error
	steps   []func(b *Builder) error
	closed  bool
}

func (d *stepDecoder) Open(ctx context.Context) error { d.ctx = ctx; return d.openErr }
func (d *stepDecoder) Close() error                   { d.closed = true; return nil }
func (d *stepDecoder) Next(b *Builder) error {
	if len(d.steps) == 0 {
		return io.EOF
	}
	f := d.steps[0]
	d.steps = d.steps[1:]
	b.Chunk()
	return f(b)
}

func (d *stepDecoder) block(b *Builder) error {
	<-d.ctx.Done()
	return d.ctx.Err()
}

var testModel = &Model{ID: "m", Provider: "p", API: APIFaux, Cost: ModelCost{Input: 1, Output: 2}}

// TestStreamSequence runs in a synctest bubble, so its 1s idle timeout
// is the bubble's clock and a stalled machine cannot trip it.
func TestStreamSequence(t *testing.T) {
	defer goleak.VerifyNone(t)
	synctest.Test(t, testStreamSequence)
}

func testStreamSequence(t *testing.T) {
	var text, tool int
	d := &stepDecoder{}
	d.steps = []func(*Builder) error{
		func(b *Builder) error {
			b.SetResponseID("r1")
			text = b.TextStart()
			b.TextDelta(text, "Hel")
			return nil
		},
		func(b *Builder) error { b.TextDelta(text, "lo"); return nil },
		func(b *Builder) error {
			tool = b.ToolCallStart("c1", "bash")
			b.ToolCallDelta(tool, `{"command":"ec`)
			return nil
		},
		func(b *Builder) error { b.ToolCallDelta(tool, `ho hi"}`); b.Finish(StopStop); return nil },
		func(b *Builder) error { b.SetUsage(Usage{Input: 10, Output: 5}); return nil }, // usage after finish
	}
	s := NewStream(context.Background(), testModel, d, time.Second)
	var partialArgs []string
	var types []string
	for s.Next() {
		ev := s.Event()
		types = append(types, string(ev.Type))
		if ev.Type == EventToolCallDelta {
			partialArgs = append(partialArgs, string(s.Partial().Content[ev.ContentIndex].Arguments))
		}
		if ev.Type == EventToolCallEnd && string(ev.ToolCall.Arguments) != `{"command":"echo hi"}` {
			t.Errorf("toolcall_end arguments %s", ev.ToolCall.Arguments)
		}
	}
	want := "start text_start text_delta text_delta toolcall_start toolcall_delta toolcall_delta text_end toolcall_end done"
	if got := strings.Join(types, " "); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	if partialArgs[0] != `{"command":"ec"}` || partialArgs[1] != `{"command":"echo hi"}` {
		t.Errorf("partial args %q", partialArgs)
	}
	m := s.Result()
	if m.StopReason != StopToolUse || m.ResponseID != "r1" || m.TextContent() != "Hello" {
		t.Errorf("result %+v", m)
	}
	if m.Usage.Cost.Total != 10e-6+10e-6 || m.Usage.TotalTokens != 15 {
		t.Errorf("usage %+v", m.Usage)
	}
	if s.Err() != nil || !d.closed {
		t.Errorf("err %v closed %v", s.Err(), d.closed)
	}
}

func TestStreamFailures(t *testing.T) {
	defer goleak.VerifyNone(t)
	text := func(b *Builder) error { i := b.TextStart(); b.TextDelta(i, "partial"); return nil }
	tests := []struct {
		name    string
		openErr error
		steps   func(d *stepDecoder) []func(*Builder) error
		idle    time.Duration
		cancel  bool
		kind    ErrorKind
		reason  StopReason
		message string
		text    string
	}{
		{name: "open http error", openErr: HTTPError(429, nil, "rate_limit_error", "slow down", nil),
			steps: func(*stepDecoder) []func(*Builder) error { return nil },
			kind:  ErrRateLimit, reason: StopError, message: "429 slow down"},
		{name: "open network error", openErr: errors.New("dial tcp: connection refused"),
			steps: func(*stepDecoder) []func(*Builder) error { return nil },
			kind:  ErrNetwork, reason: StopError, message: "request failed: dial tcp: connection refused"},
		{name: "eof before finish", steps: func(*stepDecoder) []func(*Builder) error { return []func(*Builder) error{text} },
			kind: ErrStream, reason: StopError, message: "the stream ended before the message was complete", text: "partial"},
		{name: "cut mid-stream", steps: func(*stepDecoder) []func(*Builder) error {
			return []func(*Builder) error{text, func(*Builder) error { return io.ErrUnexpectedEOF }}
		}, kind: ErrStream, reason: StopError, message: "the stream was cut off: unexpected EOF", text: "partial"},
		{name: "in-stream error", steps: func(*stepDecoder) []func(*Builder) error {
			return []func(*Builder) error{text, func(*Builder) error { return StreamError("overloaded_error", "Overloaded") }}
		}, kind: ErrOverloaded, reason: StopError, message: "overloaded_error: Overloaded", text: "partial"},
		{name: "idle", idle: 30 * time.Millisecond, steps: func(d *stepDecoder) []func(*Builder) error {
			return []func(*Builder) error{text, d.block}
		}, kind: ErrIdleTimeout, reason: StopError, message: "the provider sent nothing for 30ms; the stream was closed", text: "partial"},
		{name: "abort", cancel: true, steps: func(d *stepDecoder) []func(*Builder) error {
			return []func(*Builder) error{text, d.block}
		}, kind: ErrAborted, reason: StopAborted, message: "Request was aborted", text: "partial"},
	}
	for _, tt := range tests {
		// In a synctest bubble the idle timeout is the bubble's clock: it
		// fires only once the decoder blocks, never while a loaded machine
		// is slow to deliver the text before it.
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				d := &stepDecoder{openErr: tt.openErr}
				d.steps = tt.steps(d)
				s := NewStream(ctx, testModel, d, tt.idle)
				var last Event
				n := 0
				for s.Next() {
					last = s.Event()
					n++
					if tt.cancel && last.Type == EventTextDelta {
						cancel()
					}
				}
				if last.Type != EventError || last.Reason != tt.reason {
					t.Fatalf("last event %+v", last)
				}
				m := s.Result()
				if m.StopReason != tt.reason || m.ErrorMessage != tt.message || m.TextContent() != tt.text {
					t.Fatalf("result stop=%s msg=%q text=%q", m.StopReason, m.ErrorMessage, m.TextContent())
				}
				if s.Err() == nil || s.Err().Kind != tt.kind {
					t.Fatalf("err %+v, want kind %s", s.Err(), tt.kind)
				}
				if s.Next() {
					t.Fatal("Next after the end")
				}
			})
		})
	}
}

func TestStreamCancelledBeforeOpen(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := NewStream(ctx, testModel, &stepDecoder{}, 0)
	m, err := Collect(s)
	if m.StopReason != StopAborted || m.ErrorMessage != "Request was aborted." || err == nil {
		t.Fatalf("got %+v %v", m, err)
	}
}

func TestStreamCloseEarly(t *testing.T) {
	defer goleak.VerifyNone(t)
	d := &stepDecoder{}
	d.steps = []func(*Builder) error{func(b *Builder) error { b.TextStart(); return nil }, d.block}
	s := NewStream(context.Background(), testModel, d, time.Minute)
	s.Next()
	s.Next()
	s.Close()
	s.Close()
	if !d.closed || s.Next() {
		t.Fatal("Close did not end the stream")
	}
}
