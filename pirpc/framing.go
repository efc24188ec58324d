package pirpc

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// lineReader splits input into records on LF only (a trailing CR is
// stripped), as pi's RPC framing requires: U+2028 and U+2029 inside JSON
// strings never end a record. A record longer than max is skipped up to
// its newline and reported as errTooLong, and reading goes on.
type lineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

var errTooLong = errors.New("line too long")

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next record. At the end of input it returns io.EOF;
// a final record without a newline is still returned first.
func (l *lineReader) next() ([]byte, error) {
	l.buf = l.buf[:0]
	tooLong := false
	for {
		chunk, err := l.r.ReadSlice('\n')
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
				return nil, errTooLong
			}
			line := bytes.TrimSuffix(l.buf, []byte{'\n'})
			line = bytes.TrimSuffix(line, []byte{'\r'})
			if len(line) > l.max {
				return nil, errTooLong
			}
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if tooLong {
				return nil, errTooLong
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
