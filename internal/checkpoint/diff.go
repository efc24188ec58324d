package checkpoint

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/agentd-dev/agentd/internal/tool"
)

// hunkContext is how many unchanged lines surround a change, as in
// `diff -u`.
const hunkContext = 3

// FileDiff is how one path differs between two snapshots.
type FileDiff struct {
	Path string `json:"path"`
	// Status is "added", "deleted" or "modified".
	Status string `json:"status"`
	// Binary: the content is not text; no hunks are given.
	Binary    bool   `json:"binary,omitempty"`
	Additions int    `json:"additions"`
	Deletions int    `json:"deletions"`
	Hunks     []Hunk `json:"hunks"`
	// Before and After are the path's whole text before and after, for
	// faces that show a file's diff themselves (ACP's diff content);
	// empty for a binary file and a side where the path is absent.
	Before string `json:"-"`
	After  string `json:"-"`
}

// Hunk is one changed region in unified-diff terms: Lines are prefixed
// with ' ', '-' or '+' and carry no newline; a line that had none at the
// end of the file is followed by "\ No newline at end of file".
type Hunk struct {
	OldStart int      `json:"oldStart"`
	OldLines int      `json:"oldLines"`
	NewStart int      `json:"newStart"`
	NewLines int      `json:"newLines"`
	Lines    []string `json:"lines"`
}

// Header is the hunk's "@@ -a,b +c,d @@" line.
func (h Hunk) Header() string {
	return fmt.Sprintf("@@ -%d,%d +%d,%d @@", h.OldStart, h.OldLines, h.NewStart, h.NewLines)
}

// Diff compares two snapshots path by path, in path order.
func (s *Store) Diff(from, to *Tree) ([]FileDiff, error) {
	var out []FileDiff
	i, j := 0, 0
	for i < len(from.Entries) || j < len(to.Entries) {
		var a, b *Entry
		switch {
		case j >= len(to.Entries) || (i < len(from.Entries) && from.Entries[i].Path < to.Entries[j].Path):
			a = &from.Entries[i]
			i++
		case i >= len(from.Entries) || to.Entries[j].Path < from.Entries[i].Path:
			b = &to.Entries[j]
			j++
		default:
			a, b = &from.Entries[i], &to.Entries[j]
			i++
			j++
			if a.same(*b) {
				continue
			}
		}
		fd, err := s.fileDiff(a, b)
		if err != nil {
			return nil, err
		}
		out = append(out, fd)
	}
	if out == nil {
		out = []FileDiff{}
	}
	return out, nil
}

func (s *Store) fileDiff(a, b *Entry) (FileDiff, error) {
	fd := FileDiff{Status: "modified", Hunks: []Hunk{}}
	var before, after string
	var binary bool
	load := func(e *Entry) (string, error) {
		if e == nil {
			return "", nil
		}
		if e.IsLink() {
			return "symlink → " + e.Link + "\n", nil
		}
		data, err := s.object(e.Hash)
		if err != nil {
			return "", err
		}
		if isBinary(data) {
			binary = true
		}
		return string(data), nil
	}
	var err error
	if before, err = load(a); err != nil {
		return fd, err
	}
	if after, err = load(b); err != nil {
		return fd, err
	}
	switch {
	case a == nil:
		fd.Path, fd.Status = b.Path, "added"
	case b == nil:
		fd.Path, fd.Status = a.Path, "deleted"
	default:
		fd.Path = a.Path
	}
	if binary {
		fd.Binary = true
		return fd, nil
	}
	fd.Before, fd.After = before, after
	fd.Hunks, fd.Additions, fd.Deletions = hunks(before, after)
	if a != nil && b != nil && a.Mode != b.Mode && before == after {
		fd.Hunks = append(fd.Hunks, Hunk{Lines: []string{fmt.Sprintf("mode %o → %o", a.Mode, b.Mode)}})
	}
	return fd, nil
}

// isBinary: a NUL in the first 8 KiB, or text that is not UTF-8.
func isBinary(data []byte) bool {
	head := data
	if len(head) > 8192 {
		head = head[:8192]
	}
	return bytes.IndexByte(head, 0) >= 0 || !utf8.Valid(data)
}

// line is one line of a LineDiff run with its op.
type line struct {
	op   byte
	text string
}

// hunks turns a line diff into unified hunks with hunkContext lines of
// context, counting the lines added and removed.
func hunks(a, b string) ([]Hunk, int, int) {
	var lines []line
	for _, r := range tool.LineDiff(a, b) {
		for _, l := range r.Lines {
			lines = append(lines, line{r.Op, l})
		}
	}
	out := []Hunk{}
	adds, dels := 0, 0
	oldNo, newNo := 1, 1 // line numbers of lines[k] in each text
	k := 0
	for k < len(lines) {
		if lines[k].op == ' ' {
			oldNo++
			newNo++
			k++
			continue
		}
		// A change at k: the hunk starts hunkContext lines before it.
		// (The last hunk ended more than 2*hunkContext lines back.)
		start := max(k-hunkContext, 0)
		h := Hunk{OldStart: oldNo - (k - start), NewStart: newNo - (k - start)}
		end := k
		// Extend while the next change is within 2*context lines.
		for end < len(lines) {
			if lines[end].op != ' ' {
				end++
				continue
			}
			run := end
			for run < len(lines) && lines[run].op == ' ' {
				run++
			}
			if run == len(lines) || run-end > 2*hunkContext {
				end = min(end+hunkContext, len(lines))
				break
			}
			end = run
		}
		for _, l := range lines[start:end] {
			text, nl := strings.CutSuffix(l.text, "\n")
			h.Lines = append(h.Lines, string(l.op)+text)
			if !nl {
				h.Lines = append(h.Lines, `\ No newline at end of file`)
			}
			switch l.op {
			case ' ':
				h.OldLines++
				h.NewLines++
			case '-':
				h.OldLines++
				dels++
			case '+':
				h.NewLines++
				adds++
			}
		}
		for _, l := range lines[k:end] {
			switch l.op {
			case ' ':
				oldNo++
				newNo++
			case '-':
				oldNo++
			case '+':
				newNo++
			}
		}
		if h.OldLines == 0 {
			h.OldStart--
		}
		if h.NewLines == 0 {
			h.NewStart--
		}
		out = append(out, h)
		k = end
	}
	return out, adds, dels
}

// Patch renders diffs as one unified diff (git's a/ and b/ prefixes).
func Patch(files []FileDiff) string {
	var b strings.Builder
	for _, f := range files {
		from, to := "a/"+f.Path, "b/"+f.Path
		switch f.Status {
		case "added":
			from = "/dev/null"
		case "deleted":
			to = "/dev/null"
		}
		fmt.Fprintf(&b, "--- %s\n+++ %s\n", from, to)
		if f.Binary {
			b.WriteString("Binary files differ\n")
			continue
		}
		for _, h := range f.Hunks {
			if h.OldStart == 0 && h.OldLines == 0 && h.NewLines == 0 {
				b.WriteString(strings.Join(h.Lines, "\n") + "\n")
				continue
			}
			b.WriteString(h.Header() + "\n")
			for _, l := range h.Lines {
				b.WriteString(l + "\n")
			}
		}
	}
	return b.String()
}
