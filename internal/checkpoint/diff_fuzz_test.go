package checkpoint

import (
	"strings"
	"testing"
)

// apply rebuilds the new text from the old one and the hunks, as patch(1)
// would: the hunks must be exact for any two texts.
func apply(t *testing.T, old string, hs []Hunk) string {
	t.Helper()
	lines := splitKeep(old)
	var out []string
	at := 0 // next old line (0-based)
	for _, h := range hs {
		start := h.OldStart - 1
		if h.OldLines == 0 {
			start = h.OldStart
		}
		if start < at || start > len(lines) {
			t.Fatalf("hunk %s out of order or range (at %d of %d)", h.Header(), at, len(lines))
		}
		out = append(out, lines[at:start]...)
		at = start
		for i, l := range h.Lines {
			if l == `\ No newline at end of file` {
				continue
			}
			noNL := i+1 < len(h.Lines) && h.Lines[i+1] == `\ No newline at end of file`
			text := l[1:]
			if !noNL {
				text += "\n"
			}
			switch l[0] {
			case ' ':
				if at >= len(lines) || lines[at] != text {
					t.Fatalf("context %q does not match old line %d", text, at+1)
				}
				out = append(out, text)
				at++
			case '-':
				if at >= len(lines) || lines[at] != text {
					t.Fatalf("removed %q does not match old line %d", text, at+1)
				}
				at++
			case '+':
				out = append(out, text)
			default:
				t.Fatalf("line %q has no prefix", l)
			}
		}
	}
	out = append(out, lines[at:]...)
	return strings.Join(out, "")
}

func splitKeep(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// FuzzHunks: for any two texts the hunks turn the first into the second,
// and the counts are the lines they add and remove.
func FuzzHunks(f *testing.F) {
	f.Add("one\ntwo\nthree\n", "one\nTWO\nthree\n")
	f.Add("", "new\n")
	f.Add("a\nb", "a\nb\n")
	f.Add("1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "1\nX\n3\n4\n5\n6\n7\n8\n9\n10\nY\n12\n")
	f.Add("x\n", "")
	f.Fuzz(func(t *testing.T, a, b string) {
		hs, adds, dels := hunks(a, b)
		if got := apply(t, a, hs); got != b {
			t.Fatalf("applying the hunks gives %q, want %q", got, b)
		}
		na, nd := 0, 0
		for _, h := range hs {
			for _, l := range h.Lines {
				switch l[0] {
				case '+':
					na++
				case '-':
					nd++
				}
			}
		}
		if na != adds || nd != dels || (a == b && len(hs) != 0) {
			t.Fatalf("counts %d/%d, lines %d/%d, %d hunks for equal texts", adds, dels, na, nd, len(hs))
		}
	})
}

// FuzzCheckPath: a path a snapshot may hold never leaves the workspace.
func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"a", "a/b", "../x", "/etc", "a/../b", ".git/x", "a//b", "a/./b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if checkPath(p) != nil {
			return
		}
		if strings.HasPrefix(p, "/") || strings.Contains("/"+p+"/", "/../") || strings.Contains("/"+p+"/", "/.git/") || strings.Contains(p, "\x00") {
			t.Fatalf("checkPath accepted %q", p)
		}
	})
}
