package openaichat

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// maxEvent bounds one event's data, as the SDK's own SSE decoder does
// (32 MiB), so a server that never ends a line cannot exhaust memory.
const maxEvent = 32 << 20

// sseReader reads a text/event-stream: "data:" lines (joined with "\n"
// when an event has several), "event:" names, comments (lines starting
// with ':', which OpenRouter sends while it waits), LF or CRLF line ends.
//
// It does what the SDK's ssestream decoder does, but reuses one buffer for
// every event instead of allocating a fresh one, which halves the
// allocations of a text delta; the chunk decoder copies what it keeps.
type sseReader struct {
	r     *bufio.Reader
	data  []byte // the current event's data, valid until the next call
	event []byte // the current event's name
	line  []byte // a line longer than the reader's buffer, assembled
}

// sseBufferSize holds any ordinary chunk in one read.
const sseBufferSize = 16 << 10

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, sseBufferSize), data: make([]byte, 0, 1024)}
}

// next returns the next event. At the end of the stream it returns io.EOF.
// Unlike the SSE specification (and the SDK), it also dispatches an event
// the stream ends in without its blank line: some servers end with a
// bare "data: [DONE]\n". A connection cut in the middle fails the read
// instead, so this never passes on half an event.
func (s *sseReader) next() (event, data []byte, err error) {
	s.data, s.event = s.data[:0], s.event[:0]
	hasData := false
	for {
		line, err := s.readLine()
		if err != nil {
			if hasData && errors.Is(err, io.EOF) {
				return s.event, s.data, nil
			}
			return nil, nil, err
		}
		if len(line) == 0 {
			if hasData {
				return s.event, s.data, nil
			}
			s.event = s.event[:0]
			continue
		}
		if line[0] == ':' {
			continue
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		switch string(name) {
		case "data":
			if hasData {
				s.data = append(s.data, '\n')
			}
			if len(s.data)+len(value) > maxEvent {
				return nil, nil, fmt.Errorf("an event is larger than %d bytes", maxEvent)
			}
			s.data = append(s.data, value...)
			hasData = true
		case "event":
			s.event = append(s.event[:0], value...)
		}
	}
}

// readLine returns the next line without its line end. A last line
// without one is returned before io.EOF.
func (s *sseReader) readLine() ([]byte, error) {
	line, err := s.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		s.line = append(s.line[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(s.line) > maxEvent {
				return nil, fmt.Errorf("a line is longer than %d bytes", maxEvent)
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
