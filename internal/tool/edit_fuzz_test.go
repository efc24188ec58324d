package tool

import (
	"strings"
	"testing"
)

// FuzzEdit checks the edit matcher on arbitrary input: it never panics,
// and when it succeeds the result contains every newText (in the file's
// line-ending convention) and differs from the input.
func FuzzEdit(f *testing.F) {
	seeds := []struct{ content, old1, new1, old2, new2 string }{
		{"a\nb\nc\n", "b", "B", "", ""},
		{"a\r\nb\r\n", "a\nb", "x\ny", "", ""},
		{"one two three", "one", "1", "three", "3"},
		{"abcdef", "abcd", "1", "cde", "2"},
		{"if x {   \n\tgo()\n}\n", "if x {\n\tgo()", "if y {", "", ""},
		{"\u201chi\u201d \u2014 x\u00a0\n", "\"hi\" - x", "q", "", ""},
		{"x\r\r\n\ry", "\n\n", "z", "y", "\r"},
		{"\xff\xfe bad utf8 \xc3", "bad", "good", "\xc3", "c"},
	}
	for _, s := range seeds {
		f.Add(s.content, s.old1, s.new1, s.old2, s.new2)
	}
	f.Fuzz(func(t *testing.T, content, old1, new1, old2, new2 string) {
		edits := []Replacement{{old1, new1}}
		if old2 != "" || new2 != "" {
			edits = append(edits, Replacement{old2, new2})
		}
		out, err := applyEdits(content, edits, "f")
		if err != nil {
			if _, ok := err.(*editError); !ok {
				t.Fatalf("unexpected error type %T: %v", err, err)
			}
			return
		}
		if out == content {
			t.Fatal("success without a change")
		}
		crlf := dominantCRLF(content)
		for _, e := range edits {
			want, _ := foldNewlines(e.NewText)
			if crlf {
				want = strings.ReplaceAll(want, "\n", "\r\n")
			}
			if !strings.Contains(out, want) {
				t.Fatalf("result %q lacks newText %q", out, want)
			}
		}
		// The diff of any successful edit renders without trouble.
		before, _ := foldNewlines(content)
		after, _ := foldNewlines(out)
		if diff, first := renderDiff(before, after); before != after && (diff == "" || first < 1) {
			t.Fatalf("empty diff for a change: %q -> %q", before, after)
		}
	})
}
