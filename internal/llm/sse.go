package llm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// MaxSSEEvent bounds one event's data (32 MiB, what the provider SDKs
// allowed), so a server that never ends a line or an event cannot exhaust
// memory. A Responses stream's terminal event repeats the whole response,
// encrypted reasoning included, so it is generous.
const MaxSSEEvent = 32 << 20

// sseBufferSize holds any ordinary event in one read.
const sseBufferSize = 16 << 10

// SSEEvent is one event of a text/event-stream. Name and Data are valid
// until the next call to SSEReader.Next.
type SSEEvent struct {
	// Name is the "event:" field, empty when the event has none.
	Name []byte
	// Data is the event's "data:" lines joined with "\n".
	Data []byte
	// KeepAlive marks a comment line (": …") read between events, which
	// proxies such as OpenRouter send while a model thinks; it is reported
	// only when SSEReader.KeepAlives is set, and then Name and Data are
	// empty.
	KeepAlive bool
}

// SSEReader splits a text/event-stream answer into events: "data:" lines
// (joined with "\n" when an event has several), "event:" names, comments,
// LF or CRLF line ends. It is the one event-stream splitter of the
// providers that stream over HTTP; each decodes the events' JSON itself.
//
// It reuses one buffer for every event, so reading an event allocates
// nothing once the buffer has grown; the caller copies what it keeps.
type SSEReader struct {
	// KeepAlives makes Next report a comment line read between events as
	// an event with KeepAlive set, so the caller can restart its idle
	// timer; otherwise comments are skipped.
	KeepAlives bool

	r    *bufio.Reader
	ev   SSEEvent
	line []byte // a line longer than the reader's buffer, assembled
}

// NewSSEReader returns a reader of r. A *bufio.Reader is used as it is.
func NewSSEReader(r io.Reader) *SSEReader {
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, sseBufferSize)
	}
	return &SSEReader{r: br, ev: SSEEvent{Data: make([]byte, 0, 1024)}}
}

// NewBufferedReader returns the buffered reader an SSEReader of r would
// use, for a caller that peeks at the body (to tell JSON from an event
// stream) before handing it to NewSSEReader.
func NewBufferedReader(r io.Reader) *bufio.Reader { return bufio.NewReaderSize(r, sseBufferSize) }

// Next returns the next event. An event is dispatched at the blank line
// that ends it when it has data, as the SSE specification says. Unlike the SSE specification, an event the stream
// ends in without its blank line is dispatched too: some servers end with
// a bare "data: [DONE]\n". A connection cut in the middle fails the read
// instead, so this never passes on half an event. At the end of the
// stream Next returns io.EOF.
func (s *SSEReader) Next() (SSEEvent, error) {
	ev := &s.ev
	ev.Name, ev.Data, ev.KeepAlive = ev.Name[:0], ev.Data[:0], false
	hasData := false
	for {
		line, err := s.readLine()
		if err != nil {
			if hasData && errors.Is(err, io.EOF) {
				return *ev, nil
			}
			return SSEEvent{}, err
		}
		if len(line) == 0 {
			if hasData {
				return *ev, nil
			}
			ev.Name = ev.Name[:0] // a name without data names nothing
			continue
		}
		if line[0] == ':' {
			if s.KeepAlives && !hasData && len(ev.Name) == 0 {
				return SSEEvent{KeepAlive: true}, nil
			}
			continue
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		switch string(name) {
		case "data":
			if hasData {
				ev.Data = append(ev.Data, '\n')
			}
			if len(ev.Data)+len(value) > MaxSSEEvent {
				return SSEEvent{}, fmt.Errorf("an event is larger than %d bytes", MaxSSEEvent)
			}
			ev.Data = append(ev.Data, value...)
			hasData = true
		case "event":
			ev.Name = append(ev.Name[:0], value...)
		}
	}
}

// readLine returns the next line without its line end. A last line
// without one is returned before io.EOF.
func (s *SSEReader) readLine() ([]byte, error) {
	line, err := s.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		s.line = append(s.line[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(s.line) > MaxSSEEvent {
				return nil, fmt.Errorf("a line is longer than %d bytes", MaxSSEEvent)
			}
			line, err = s.r.ReadSlice('\n')
			s.line = append(s.line, line...)
		}
		line = s.line
	}
	if err != nil && (!errors.Is(err, io.EOF) || len(line) == 0) {
		return nil, err
	}
	// An unterminated last line (err is io.EOF) is still a line; the
	// next call reports the end.
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), nil
}
