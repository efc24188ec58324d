// Package frontmatter reads the Markdown files agentd's users write to
// extend it (skills, prompt templates, modes, agent types): YAML between
// a first line "---" and the next line "---", then a body. It is the one
// splitter, YAML decoder and size bound the packages reading such files
// share, so a file that is read one way as a skill is read the same way
// as a mode.
package frontmatter

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"go.yaml.in/yaml/v4"
)

// ErrUnclosed is Split's error for a file whose first line opens a
// frontmatter that no later "---" line closes. The body it returns with
// it is the whole text, for a caller that reads such a file as all body
// (pi does, for templates).
var ErrUnclosed = errors.New("frontmatter has no closing ---")

// Split separates data's frontmatter from its body. A byte order mark is
// dropped and CRLF line ends read as LF; the fence lines are "---" with
// nothing after it but spaces or tabs. ok is false when data has no
// frontmatter (body is then all of it).
func Split(data []byte) (head, body []byte, ok bool, err error) {
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	data = bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n"))
	first, rest, _ := bytes.Cut(data, []byte("\n"))
	if !isFence(first) {
		return nil, data, false, nil
	}
	for at := 0; ; {
		end, next := len(rest), len(rest)
		i := bytes.IndexByte(rest[at:], '\n')
		if i >= 0 {
			end, next = at+i, at+i+1
		}
		if isFence(rest[at:end]) {
			return rest[:at], rest[next:], true, nil
		}
		if i < 0 {
			break
		}
		at = next
	}
	return nil, data, true, ErrUnclosed
}

func isFence(line []byte) bool { return string(bytes.TrimRight(line, " \t")) == "---" }

// Decode decodes a frontmatter's YAML into v. An empty head leaves v as
// it is. strict refuses a field v has no place for. The error names the
// first problem in a line.
func Decode(head []byte, v any, strict bool) error {
	if len(bytes.TrimSpace(head)) == 0 {
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(head))
	dec.KnownFields(strict)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		msg := err.Error()
		var te *yaml.TypeError
		if errors.As(err, &te) {
			// "line 2: field x not found in type ...", one per field.
			lines := make([]string, len(te.Errors))
			for i, e := range te.Errors {
				lines[i] = e.Error()
			}
			msg = strings.Join(lines, "; ")
		} else if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		return fmt.Errorf("frontmatter is not valid YAML: %s", msg)
	}
	return nil
}

// ReadFile reads a regular file of at most limit bytes. It is opened
// without blocking, so a file swapped for a FIFO cannot hang the reader;
// with noLinks a symbolic link is refused rather than followed (a
// project's file, which comes with a cloned repository, must not read a
// file elsewhere into a prompt).
func ReadFile(path string, limit int64, noLinks bool) ([]byte, error) {
	flag := os.O_RDONLY | syscall.O_NONBLOCK
	if noLinks {
		flag |= syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		if noLinks {
			if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
				return nil, errors.New("not a regular file (a link)")
			}
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("file is %d bytes, more than the %d allowed", fi.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("file is more than the %d bytes allowed", limit)
	}
	return b, nil
}
