package piwire

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
)

// LineReader splits input into records on LF only (a trailing CR is
// stripped), as pi's RPC framing requires: U+2028 and U+2029 inside JSON
// strings never end a record. A record longer than max is skipped up to
// its newline and reported as ErrLineTooLong, and reading goes on.
type LineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
	// Skipped is the length of the last record skipped as too long.
	Skipped int
}

// ErrLineTooLong reports a record longer than the reader's maximum.
var ErrLineTooLong = errors.New("line too long")

// NewLineReader reads records of at most max bytes from r.
func NewLineReader(r io.Reader, max int) *LineReader {
	return &LineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next record. At the end of input it returns io.EOF;
// a final record without a newline is still returned first.
func (l *LineReader) Next() ([]byte, error) {
	l.buf = l.buf[:0]
	tooLong := false
	n := 0
	for {
		chunk, err := l.r.ReadSlice('\n')
		n += len(chunk)
		if !tooLong {
			if len(l.buf)+len(chunk) > l.max+2 { // +2: the CR LF are not content
				tooLong = true
				l.buf = l.buf[:0]
			} else {
				l.buf = append(l.buf, chunk...)
			}
		}
		switch {
		case err == nil:
			if tooLong {
				l.Skipped = n - 1
				return nil, ErrLineTooLong
			}
			line := bytes.TrimSuffix(l.buf, []byte{'\n'})
			line = bytes.TrimSuffix(line, []byte{'\r'})
			if len(line) > l.max {
				l.Skipped = len(line)
				return nil, ErrLineTooLong
			}
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if tooLong {
				l.Skipped = n
				return nil, ErrLineTooLong
			}
			if len(l.buf) > 0 {
				line := bytes.TrimSuffix(l.buf, []byte{'\r'})
				l.buf = l.buf[:0]
				return line, nil
			}
			return nil, io.EOF
		default:
			return nil, err
		}
	}
}

// ReadLines reads records of at most max bytes from r on a goroutine of
// its own and sends a copy of each on lines; a longer record is skipped
// and reported to tooLong (on that goroutine). readErr gets why reading
// ended: r's error (io.EOF at the end), or ctx's once ctx ends. The
// goroutine stays blocked in r's Read until r ends: stdin cannot be
// interrupted, so its owner is the process.
func ReadLines(ctx context.Context, r io.Reader, max int, tooLong func()) (lines <-chan []byte, readErr <-chan error) {
	out := make(chan []byte)
	errc := make(chan error, 1)
	go func() {
		lr := NewLineReader(r, max)
		for {
			line, err := lr.Next()
			if errors.Is(err, ErrLineTooLong) {
				tooLong()
				continue
			}
			if err != nil {
				errc <- err
				return
			}
			cp := append([]byte(nil), line...)
			select {
			case out <- cp:
			case <-ctx.Done():
				errc <- ctx.Err()
				return
			}
		}
	}()
	return out, errc
}
