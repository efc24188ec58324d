package tool

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// The limits that keep one tool result inside a model's context, as pi
// sets them: whichever of lines or bytes is hit first wins.
const (
	MaxLines = 2000
	MaxBytes = 50 * 1024
	// MaxGrepLineChars is where grep cuts a long matching line.
	MaxGrepLineChars = 500
)

// unlimitedLines is the line limit grep, find and ls pass to head
// truncation: their entry limits already bound the rows, so only bytes
// matter. It is JavaScript's MAX_SAFE_INTEGER, the value pi reports.
const unlimitedLines = 9007199254740991

// Truncation describes how a tool's output was cut. It travels in result
// details under "truncation" with pi's field names, so clients can render
// it. Line counts treat a final newline as ending the last line, not as
// starting an empty one.
type Truncation struct {
	// Content is the kept text; it is already in the result's content,
	// so it is not repeated in details.
	Content               string `json:"-"`
	Truncated             bool   `json:"truncated"`
	TruncatedBy           string `json:"truncatedBy,omitempty"` // "lines" or "bytes"
	TotalLines            int    `json:"totalLines"`
	TotalBytes            int    `json:"totalBytes"`
	OutputLines           int    `json:"outputLines"`
	OutputBytes           int    `json:"outputBytes"`
	LastLinePartial       bool   `json:"lastLinePartial"`
	FirstLineExceedsLimit bool   `json:"firstLineExceedsLimit"`
	MaxLines              int    `json:"maxLines"`
	MaxBytes              int    `json:"maxBytes"`
}

// countLines counts lines the way editors do: "a\nb" and "a\nb\n" both
// have two lines, "" has none.
func countLines(s string) int {
	n := strings.Count(s, "\n")
	if s != "" && !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

// truncateHead keeps the first lines of s that fit both limits, never
// cutting a line. When even the first line is too big it keeps nothing
// and says so, so the caller can point the model elsewhere.
func truncateHead(s string, maxLines, maxBytes int) Truncation {
	t := Truncation{TotalLines: countLines(s), TotalBytes: len(s), MaxLines: maxLines, MaxBytes: maxBytes}
	body := strings.TrimSuffix(s, "\n")
	if t.TotalLines <= maxLines && len(body) <= maxBytes {
		t.Content, t.OutputLines, t.OutputBytes = s, t.TotalLines, len(s)
		return t
	}
	t.Truncated = true
	first := body
	if i := strings.IndexByte(body, '\n'); i >= 0 {
		first = body[:i]
	}
	if len(first) > maxBytes {
		t.TruncatedBy = "bytes"
		t.FirstLineExceedsLimit = true
		return t
	}
	t.TruncatedBy = "lines"
	end, out, n := 0, 0, 0
	for pos := 0; n < maxLines && pos <= len(body); {
		e := strings.IndexByte(body[pos:], '\n')
		if e < 0 {
			e = len(body)
		} else {
			e += pos
		}
		lb := e - pos
		if n > 0 {
			lb++
		}
		if out+lb > maxBytes {
			t.TruncatedBy = "bytes"
			break
		}
		out += lb
		n++
		end = e
		pos = e + 1
	}
	if n >= maxLines && out <= maxBytes {
		t.TruncatedBy = "lines"
	}
	t.Content = body[:end]
	t.OutputLines, t.OutputBytes = n, len(t.Content)
	return t
}

// truncateTail keeps the last lines of s that fit both limits (command
// output: errors and results come last). If the last line alone is too
// big, its end is kept and LastLinePartial is set.
func truncateTail(s string, maxLines, maxBytes int) Truncation {
	t := Truncation{TotalLines: countLines(s), TotalBytes: len(s), MaxLines: maxLines, MaxBytes: maxBytes}
	body := strings.TrimSuffix(s, "\n")
	if t.TotalLines <= maxLines && len(body) <= maxBytes {
		t.Content, t.OutputLines, t.OutputBytes = s, t.TotalLines, len(s)
		return t
	}
	t.Truncated = true
	t.TruncatedBy = "lines"
	start, out, n := len(body), 0, 0
	for end := len(body); n < maxLines; {
		b := strings.LastIndexByte(body[:end], '\n')
		line := body[b+1 : end]
		lb := len(line)
		if n > 0 {
			lb++
		}
		if out+lb > maxBytes {
			t.TruncatedBy = "bytes"
			if n == 0 {
				part := tailUTF8(line, maxBytes)
				start = end - len(part)
				n = 1
				t.LastLinePartial = true
			}
			break
		}
		out += lb
		n++
		start = b + 1
		if b < 0 {
			break
		}
		end = b
	}
	if n >= maxLines && len(body)-start <= maxBytes && !t.LastLinePartial {
		t.TruncatedBy = "lines"
	}
	t.Content = body[start:]
	t.OutputLines, t.OutputBytes = n, len(t.Content)
	return t
}

// tailUTF8 returns at most max bytes from the end of s, starting on a
// character boundary.
func tailUTF8(s string, max int) string {
	if len(s) <= max {
		return s
	}
	i := len(s) - max
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// truncateUTF8 returns at most max bytes from the start of s, ending on a
// character boundary.
func truncateUTF8(s string, max int) string {
	if len(s) <= max {
		return s
	}
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// truncateLine cuts a line to maxChars characters, marking the cut.
func truncateLine(line string, maxChars int) (string, bool) {
	if len(line) <= maxChars || utf8.RuneCountInString(line) <= maxChars {
		return line, false
	}
	n := 0
	for i := range line {
		if n == maxChars {
			return line[:i] + "... [truncated]", true
		}
		n++
	}
	return line, false
}

// formatSize renders a byte count the way pi's notices do (50.0KB).
func formatSize(n int) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%dB", n)
	case n < 1024*1024:
		return fmt.Sprintf("%.1fKB", float64(n)/1024)
	default:
		return fmt.Sprintf("%.1fMB", float64(n)/(1024*1024))
	}
}
