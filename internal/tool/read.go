package tool

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"syscall"

	"github.com/agentd-dev/agentd/internal/llm"
)

// maxInlineImage is the largest base64 image read returns inline, pi's
// limit too: providers reject bigger attachments.
const maxInlineImage = 4.5 * 1024 * 1024

// binarySniff is how much of a file is checked for NUL bytes before it is
// treated as text (git's heuristic uses the same amount).
const binarySniff = 8000

type readTool struct{ env Env }

// ReadDetails are the details of a truncated read.
type ReadDetails struct {
	Truncation *Truncation `json:"truncation,omitempty"`
}

func (t *readTool) Spec() llm.Tool { return readSpec() }

func (t *readTool) Execute(ctx context.Context, call Call, _ func(Result)) Result {
	a := parseArgs("read", call.Args)
	path, ok := a.str("path", true)
	if ok && path == "" {
		a.fail("path", "must not be empty")
	}
	offset, hasOffset := a.num("offset")
	limit, hasLimit := a.num("limit")
	if hasLimit && limit < 1 {
		a.fail("limit", "must be at least 1")
	}
	if r, bad := a.failed(); bad {
		return r
	}
	if ctx.Err() != nil {
		return Errorf("Operation aborted")
	}
	abs, err := t.env.resolveExisting(path)
	if err != nil {
		return Errorf("Invalid path %q: %v", path, err)
	}
	if r := t.env.checkReadable(abs, path); r != nil {
		return *r
	}
	f, errResult := openRegular(abs, path)
	if f == nil {
		return errResult
	}
	defer f.Close()

	if mime := sniffImage(f); mime != "" {
		return readImage(f, mime)
	}

	start := 0
	if hasOffset && offset >= 1 {
		start = clampInt(offset-1, 0, math.MaxInt32)
	}
	count := math.MaxInt
	if hasLimit {
		count = clampInt(limit, 1, math.MaxInt32)
	}
	return readText(ctx, f, path, start, count)
}

// openRegular opens path for reading only if it is a regular file. Stat
// comes first so that devices are never opened at all, and the open is
// non-blocking so that a FIFO swapped in between cannot hang the call.
func openRegular(abs, display string) (*os.File, Result) {
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, Errorf("%s", describeOpenError(display, err))
	}
	if r, bad := notRegular(fi, display); bad {
		return nil, r
	}
	f, err := os.OpenFile(abs, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, Errorf("%s", describeOpenError(display, err))
	}
	fi, err = f.Stat()
	if err != nil {
		f.Close()
		return nil, Errorf("%s", describeOpenError(display, err))
	}
	if r, bad := notRegular(fi, display); bad {
		f.Close()
		return nil, r
	}
	return f, Result{}
}

func notRegular(fi os.FileInfo, display string) (Result, bool) {
	m := fi.Mode()
	switch {
	case m.IsRegular():
		return Result{}, false
	case m.IsDir():
		return Errorf("%s is a directory, not a file. Use ls to list it.", display), true
	case m&os.ModeNamedPipe != 0:
		return Errorf("%s is a named pipe (FIFO), not a regular file; reading it could block forever.", display), true
	case m&os.ModeDevice != 0:
		return Errorf("%s is a device, not a regular file.", display), true
	case m&os.ModeSocket != 0:
		return Errorf("%s is a socket, not a regular file.", display), true
	}
	return Errorf("%s is not a regular file.", display), true
}

// sniffImage recognises the image formats models accept by their magic
// bytes, not their names: a .png that is really text is read as text.
func sniffImage(f *os.File) string {
	var b [12]byte
	n, _ := f.ReadAt(b[:], 0)
	h := b[:n]
	switch {
	case bytes.HasPrefix(h, []byte("\x89PNG\r\n\x1a\n")):
		return "image/png"
	case bytes.HasPrefix(h, []byte("\xff\xd8\xff")):
		return "image/jpeg"
	case bytes.HasPrefix(h, []byte("GIF87a")), bytes.HasPrefix(h, []byte("GIF89a")):
		return "image/gif"
	case n >= 12 && bytes.HasPrefix(h, []byte("RIFF")) && bytes.Equal(h[8:12], []byte("WEBP")):
		return "image/webp"
	}
	return ""
}

func readImage(f *os.File, mime string) Result {
	fi, err := f.Stat()
	if err != nil {
		return Errorf("Cannot read image: %v", err)
	}
	note := "Read image file [" + mime + "]"
	if encoded := base64.StdEncoding.EncodedLen(int(min(fi.Size(), math.MaxInt32))); float64(encoded) >= maxInlineImage {
		return TextResult(note+fmt.Sprintf("\n[Image omitted: it is %s, over the %s inline image limit, and agentd does not resize images. "+
			"Make a smaller copy with bash (for example with ImageMagick) and read that instead.]",
			formatSize(int(min(fi.Size(), math.MaxInt32))), formatSize(maxInlineImage)), nil)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return Errorf("Cannot read image: %v", err)
	}
	return Result{Content: []llm.Content{llm.Text(note), llm.Image(base64.StdEncoding.EncodeToString(data), mime)}}
}

// readText streams the file once: it keeps only the lines that will be
// shown (at most MaxBytes of them) and merely counts the rest, so reading
// the head of a huge log costs the head, not the log.
func readText(ctx context.Context, f *os.File, display string, start, count int) Result {
	r := bufio.NewReaderSize(f, 64<<10)
	if head, _ := r.Peek(binarySniff); bytes.IndexByte(head, 0) >= 0 {
		return Errorf("%s looks like a binary file (it contains NUL bytes); read only shows text and images. "+
			"Use bash (for example `file` or `xxd | head`) to inspect it.", display)
	}
	end := start + count
	if end < start { // overflow
		end = math.MaxInt
	}

	var (
		out               []byte
		outLines          int
		outFull           bool
		by                string
		selLines          int
		selBytes          int
		firstLen          = -1
		fileLines         int
		endedWithNewline  bool
		selectionReachEOF bool
	)
	for i := 0; ; i++ {
		if i&1023 == 0 && ctx.Err() != nil {
			return Errorf("Operation aborted")
		}
		if i >= end {
			// Past the selection: only the total line count is left.
			n, rest, last, err := countRest(ctx, r)
			if err != nil {
				if ctx.Err() != nil {
					return Errorf("Operation aborted")
				}
				return Errorf("Cannot read %s: %v", display, err)
			}
			fileLines = i + n
			if rest > 0 && last != '\n' {
				fileLines++
			}
			selectionReachEOF = rest == 0
			break
		}
		inSel := i >= start
		keep := inSel && !outFull
		mark := len(out)
		if keep && outLines > 0 {
			out = append(out, '\n')
		}
		var n int
		var nl bool
		var err error
		out, n, nl, err = nextLine(ctx, r, out, keep, MaxBytes+1-len(out))
		if err == io.EOF {
			out = out[:mark]
			fileLines = i
			selectionReachEOF = true
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return Errorf("Operation aborted")
			}
			return Errorf("Cannot read %s: %v", display, err)
		}
		endedWithNewline = nl
		if inSel {
			if firstLen < 0 {
				firstLen = n
			}
			if selLines > 0 {
				selBytes++
			}
			selLines++
			selBytes += n
			if keep {
				switch {
				case outLines == MaxLines:
					out, outFull, by = out[:mark], true, "lines"
				case len(out) > MaxBytes:
					out, outFull, by = out[:mark], true, "bytes"
				default:
					outLines++
				}
			}
		}
		if !nl {
			fileLines = i + 1
			selectionReachEOF = true
			break
		}
	}

	if start > 0 && start >= fileLines {
		return Errorf("Offset %d is beyond end of file (%d lines total)", start+1, fileLines)
	}
	trailingNL := selectionReachEOF && endedWithNewline && selLines > 0
	if trailingNL {
		selBytes++
	}
	if !outFull {
		text := string(out)
		if trailingNL {
			text += "\n"
		}
		text = strings.ToValidUTF8(text, "\uFFFD")
		if end < fileLines {
			remaining := fileLines - end
			text += fmt.Sprintf("\n\n[%d more lines in file. Use offset=%d to continue.]", remaining, end+1)
		}
		return TextResult(text, nil)
	}

	tr := &Truncation{
		Truncated:   true,
		TruncatedBy: by,
		TotalLines:  selLines,
		TotalBytes:  selBytes,
		OutputLines: outLines,
		OutputBytes: len(out),
		MaxLines:    MaxLines,
		MaxBytes:    MaxBytes,
	}
	first := start + 1
	if outLines == 0 {
		// The first line alone is over the byte limit: nothing useful can
		// be shown, so point at a command that can show part of it.
		tr.FirstLineExceedsLimit = true
		tr.TruncatedBy = "bytes"
		tr.OutputBytes = 0
		text := fmt.Sprintf("[Line %d is %s, exceeds %s limit. Use bash: sed -n '%dp' %s | head -c %d]",
			first, formatSize(firstLen), formatSize(MaxBytes), first, display, MaxBytes)
		return TextResult(text, ReadDetails{Truncation: tr})
	}
	last := first + outLines - 1
	text := strings.ToValidUTF8(string(out), "\uFFFD")
	if by == "lines" {
		text += fmt.Sprintf("\n\n[Showing lines %d-%d of %d. Use offset=%d to continue.]", first, last, fileLines, last+1)
	} else {
		text += fmt.Sprintf("\n\n[Showing lines %d-%d of %d (%s limit). Use offset=%d to continue.]",
			first, last, fileLines, formatSize(MaxBytes), last+1)
	}
	return TextResult(text, ReadDetails{Truncation: tr})
}

// nextLine reads one line. When keep is set, up to keepMax bytes of it are
// appended to dst (enough to know whether it fits); n is always the
// line's full length and nl whether a newline ended it. io.EOF means no
// line at all was left. A single line can be gigabytes long, so ctx is
// checked while it is read.
func nextLine(ctx context.Context, r *bufio.Reader, dst []byte, keep bool, keepMax int) (_ []byte, n int, nl bool, err error) {
	kept := 0
	for i := 1; ; i++ {
		if i&63 == 0 && ctx.Err() != nil {
			return dst, n, false, ctx.Err()
		}
		chunk, err := r.ReadSlice('\n')
		if len(chunk) > 0 && chunk[len(chunk)-1] == '\n' {
			chunk = chunk[:len(chunk)-1]
			nl = true
		}
		n += len(chunk)
		if keep && kept < keepMax {
			take := min(len(chunk), keepMax-kept)
			dst = append(dst, chunk[:take]...)
			kept += take
		}
		switch {
		case err == nil:
			return dst, n, true, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF:
			if n == 0 && !nl {
				return dst, 0, false, io.EOF
			}
			return dst, n, nl, nil
		default:
			return dst, n, nl, err
		}
	}
}

// countRest counts the newlines and bytes left in r and returns the last
// byte seen.
func countRest(ctx context.Context, r *bufio.Reader) (newlines int, size int64, last byte, err error) {
	buf := make([]byte, 256<<10)
	for {
		if ctx.Err() != nil {
			return newlines, size, last, ctx.Err()
		}
		k, err := r.Read(buf)
		if k > 0 {
			newlines += bytes.Count(buf[:k], []byte{'\n'})
			size += int64(k)
			last = buf[k-1]
		}
		if err == io.EOF {
			return newlines, size, last, nil
		}
		if err != nil {
			return newlines, size, last, err
		}
	}
}
