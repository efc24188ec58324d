package tool

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"unicode/utf8"
)

// The full-output file keeps the first spillHead and the last spillTail
// bytes of a command's output and drops the middle. A command that
// prints forever (`yes`, a runaway log) otherwise fills the disk at
// gigabytes a minute. 2 MiB at each end is 40 times what one result
// shows: enough for the model to page through with read (a compiler's
// first errors at the top, the summary at the bottom), and small enough
// that a session running hundreds of commands stays in the megabytes.
const (
	spillHead = 2 << 20
	spillTail = 2 << 20
	// tailAlignScan is how far into the kept tail to look for a line
	// start, so the tail does not begin mid-line.
	tailAlignScan = 64 << 10
)

// spillFile writes a command's output to a file of bounded size: the
// head in place, the tail into a ring after it. finish puts the ring in
// order and notes what was dropped between the two.
type spillFile struct {
	f          *os.File
	path       string
	head, tail int64 // the caps
	n          int64 // bytes written so far
	headLines  int   // newlines in the head
	err        error
}

func newSpillFile(f *os.File, head, tail int64) *spillFile {
	return &spillFile{f: f, path: f.Name(), head: head, tail: tail}
}

func (s *spillFile) write(p []byte) {
	if s.err != nil {
		return
	}
	if s.n < s.head {
		k := min(int64(len(p)), s.head-s.n)
		s.writeAt(p[:k], s.n)
		s.headLines += bytes.Count(p[:k], []byte{'\n'})
		s.n += k
		p = p[k:]
	}
	if int64(len(p)) > s.tail {
		// Only the last s.tail bytes of p can survive.
		s.n += int64(len(p)) - s.tail
		p = p[int64(len(p))-s.tail:]
	}
	for len(p) > 0 && s.err == nil {
		pos := (s.n - s.head) % s.tail
		k := min(int64(len(p)), s.tail-pos)
		s.writeAt(p[:k], s.head+pos)
		s.n += k
		p = p[k:]
	}
}

func (s *spillFile) writeAt(p []byte, off int64) {
	if _, err := s.f.WriteAt(p, off); err != nil && s.err == nil {
		s.err = err
	}
}

// spillResult is what a finished full-output file left out.
type spillResult struct {
	dropped      int64 // bytes cut from the middle
	droppedLines int   // newlines among them
}

// finish closes the file, first rewriting it as head, a note saying what
// was dropped, and the tail in order, when the output outgrew the caps.
// totalLines is the number of newlines in the whole output.
func (s *spillFile) finish(totalLines int) (spillResult, error) {
	defer s.f.Close()
	if s.err != nil {
		return spillResult{}, s.err
	}
	if s.n <= s.head+s.tail {
		// Never wrapped: the file is the output as written.
		return spillResult{}, nil
	}
	headKeep, err := s.alignHead()
	if err != nil {
		return spillResult{}, err
	}
	// The ring's oldest byte is where the next write would go.
	pos := (s.n - s.head) % s.tail
	ring := io.MultiReader(io.NewSectionReader(s.f, s.head+pos, s.tail-pos), io.NewSectionReader(s.f, s.head, pos))
	skip, tailLines, err := scanTail(ring)
	if err != nil {
		return spillResult{}, err
	}
	res := spillResult{dropped: s.n - headKeep - s.tail + skip}
	res.droppedLines = max(0, totalLines-s.headLines-tailLines)

	out, err := os.CreateTemp(filepath.Dir(s.path), "rewrite-*.tmp")
	if err != nil {
		return spillResult{}, err
	}
	ok := false
	defer func() {
		if !ok {
			out.Close()
			os.Remove(out.Name())
		}
	}()
	if _, err := io.Copy(out, io.NewSectionReader(s.f, 0, headKeep)); err != nil {
		return spillResult{}, err
	}
	note := ""
	if headKeep > 0 {
		var last [1]byte
		if _, err := s.f.ReadAt(last[:], headKeep-1); err != nil {
			return spillResult{}, err
		}
		if last[0] != '\n' {
			note = "\n"
		}
	}
	note += fmt.Sprintf("[... %s (%d lines) of output dropped here by agentd: this file keeps the first %s and the last %s of %s ...]\n",
		formatSize64(res.dropped), res.droppedLines, formatSize64(headKeep), formatSize64(s.tail-skip), formatSize64(s.n))
	if _, err := io.WriteString(out, note); err != nil {
		return spillResult{}, err
	}
	tail := io.MultiReader(io.NewSectionReader(s.f, s.head+pos, s.tail-pos), io.NewSectionReader(s.f, s.head, pos))
	if _, err := io.CopyN(io.Discard, tail, skip); err != nil {
		return spillResult{}, err
	}
	if _, err := io.Copy(out, tail); err != nil {
		return spillResult{}, err
	}
	if err := out.Close(); err != nil {
		return spillResult{}, err
	}
	if err := os.Rename(out.Name(), s.path); err != nil {
		return spillResult{}, err
	}
	ok = true
	return res, nil
}

// alignHead returns how much of the head to keep so that it ends at a
// line end (or, with no newline near, at a character end). The part
// left out holds no newline, so headLines stays right.
func (s *spillFile) alignHead() (int64, error) {
	n := min(s.head, tailAlignScan)
	buf := make([]byte, n)
	if _, err := s.f.ReadAt(buf, s.head-n); err != nil {
		return 0, err
	}
	if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
		return s.head - n + int64(i) + 1, nil
	}
	for j := len(buf) - 1; j >= 0 && j >= len(buf)-utf8.UTFMax; j-- {
		if utf8.RuneStart(buf[j]) {
			if !utf8.FullRune(buf[j:]) {
				return s.head - int64(len(buf)-j), nil
			}
			break
		}
	}
	return s.head, nil
}

// scanTail reads the ordered tail and returns how many leading bytes to
// skip so it starts at a line (or, with no newline near, at a character),
// and how many newlines the rest holds.
func scanTail(r io.Reader) (skip int64, lines int, err error) {
	prefix := make([]byte, tailAlignScan)
	n, err := io.ReadFull(r, prefix)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return 0, 0, err
	}
	prefix = prefix[:n]
	if i := bytes.IndexByte(prefix, '\n'); i >= 0 {
		skip = int64(i + 1)
	} else {
		for int(skip) < len(prefix) && skip < utf8.UTFMax && !utf8.RuneStart(prefix[skip]) {
			skip++
		}
	}
	lines = bytes.Count(prefix[skip:], []byte{'\n'})
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		lines += bytes.Count(buf[:n], []byte{'\n'})
		if err == io.EOF {
			return skip, lines, nil
		}
		if err != nil {
			return 0, 0, err
		}
	}
}

func formatSize64(n int64) string {
	const gb = 1 << 30
	if n >= gb {
		return fmt.Sprintf("%.1fGB", float64(n)/gb)
	}
	return formatSize(int(n))
}
