package tool

import (
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// Replacement is one edit: OldText, found exactly once in the original
// file, becomes NewText.
type Replacement struct {
	OldText string `json:"oldText"`
	NewText string `json:"newText"`
}

// editError is a matching failure; its text is what the model reads.
type editError struct{ msg string }

func (e *editError) Error() string { return e.msg }

func editErrorf(format string, args ...any) error { return &editError{fmt.Sprintf(format, args...)} }

// maxFuzzyBytes bounds the fuzzy fallback, which keeps a position map of
// four bytes per byte of the file.
const maxFuzzyBytes = 32 << 20

// applyEdits applies edits to content (a file's text with any BOM already
// removed) and returns the new text.
//
// Matching happens on a view of the file with CRLF and lone CR folded to
// LF, because models write "\n" whatever the file uses; the replacements
// are then spliced into the original bytes, so line endings outside the
// edited spans are untouched and newText gets the file's dominant ending.
// This is where agentd differs from pi, which rewrites the whole file with
// one ending: a mixed-ending file keeps its mix here.
//
// An oldText that is not found exactly is retried on a normalised view
// (trailing whitespace dropped, typographic quotes, dashes and spaces
// folded to ASCII), as pi does, because models often "clean up" such
// characters when quoting code. Unlike pi, only the matched span changes.
func applyEdits(content string, edits []Replacement, display string) (string, error) {
	if len(edits) == 0 {
		return "", editErrorf("edits must contain at least one replacement.")
	}
	norm, folded := foldNewlines(content)
	label := func(i int) string {
		if len(edits) == 1 {
			return "the text"
		}
		return fmt.Sprintf("edits[%d]", i)
	}

	type span struct {
		start, end int // in content
		idx        int
		newText    string
	}
	spans := make([]span, 0, len(edits))
	var fz *fuzzyView
	for i, e := range edits {
		old, _ := foldNewlines(e.OldText)
		newText, _ := foldNewlines(e.NewText)
		if old == "" {
			if len(edits) == 1 {
				return "", editErrorf("oldText must not be empty in %s.", display)
			}
			return "", editErrorf("edits[%d].oldText must not be empty in %s.", i, display)
		}
		var ns, ne int // span in norm
		if at := strings.Index(norm, old); at >= 0 {
			if n := strings.Count(norm, old); n > 1 {
				return "", duplicateError(label(i), display, n, len(edits))
			}
			ns, ne = at, at+len(old)
		} else {
			if fz == nil && len(norm) <= maxFuzzyBytes {
				fz = newFuzzyView(norm)
			}
			if fz == nil {
				return "", notFoundError(label(i), display, len(edits))
			}
			fold := fuzzyFold(old)
			at := strings.Index(fz.text, fold)
			if at < 0 || fold == "" {
				return "", notFoundError(label(i), display, len(edits))
			}
			if n := strings.Count(fz.text, fold); n > 1 {
				return "", duplicateError(label(i), display, n, len(edits))
			}
			ns, ne = fz.span(at, at+len(fold))
		}
		spans = append(spans, span{start: unfold(ns, folded), end: unfold(ne, folded), idx: i, newText: newText})
	}
	sort.Slice(spans, func(a, b int) bool { return spans[a].start < spans[b].start })
	for i := 1; i < len(spans); i++ {
		if spans[i-1].end > spans[i].start {
			return "", editErrorf("edits[%d] and edits[%d] overlap in %s. Merge them into one edit or make them target separate regions.",
				spans[i-1].idx, spans[i].idx, display)
		}
	}
	crlf := dominantCRLF(content)
	var b strings.Builder
	b.Grow(len(content))
	prev := 0
	for _, s := range spans {
		b.WriteString(content[prev:s.start])
		if crlf {
			b.WriteString(strings.ReplaceAll(s.newText, "\n", "\r\n"))
		} else {
			b.WriteString(s.newText)
		}
		prev = s.end
	}
	b.WriteString(content[prev:])
	out := b.String()
	if out == content {
		if len(edits) == 1 {
			return "", editErrorf("No changes made to %s: the replacement produced identical content. "+
				"Check that newText differs from oldText (special characters or whitespace may be hiding the difference).", display)
		}
		return "", editErrorf("No changes made to %s: the replacements produced identical content.", display)
	}
	return out, nil
}

func notFoundError(label, display string, total int) error {
	if total == 1 {
		return editErrorf("Could not find the exact text in %s. oldText must match the file exactly, including whitespace and line breaks.", display)
	}
	return editErrorf("Could not find %s in %s. Each oldText must match the file exactly, including whitespace and line breaks.", label, display)
}

func duplicateError(label, display string, n, total int) error {
	if total == 1 {
		return editErrorf("Found %d occurrences of the text in %s, but it must be unique. Include more surrounding context to pick one.", n, display)
	}
	return editErrorf("Found %d occurrences of %s in %s, but each oldText must be unique. Include more surrounding context to pick one.", n, label, display)
}

// foldNewlines turns CRLF and lone CR into LF. folded lists, in order, the
// positions in the result of each LF that replaced a two-byte CRLF; that is
// all unfold needs to map positions back.
func foldNewlines(s string) (string, []int) {
	if strings.IndexByte(s, '\r') < 0 {
		return s, nil
	}
	var folded []int
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\r' {
			b = append(b, c)
			continue
		}
		if i+1 < len(s) && s[i+1] == '\n' {
			folded = append(folded, len(b))
			i++
		}
		b = append(b, '\n')
	}
	return string(b), folded
}

// unfold maps a position in folded text back to the original: every
// CRLF folded before it shifts it by one. A position at a folded LF maps
// to its CR, so a span never splits a CRLF.
func unfold(p int, folded []int) int {
	return p + sort.SearchInts(folded, p)
}

// dominantCRLF reports whether the file's first line break is CRLF, the
// convention pi uses to pick the ending for inserted text.
func dominantCRLF(s string) bool {
	lf := strings.IndexByte(s, '\n')
	return lf > 0 && s[lf-1] == '\r'
}

// fuzzyView is text after fuzzy folding, with the position in the
// unfolded text of the character each byte came from.
type fuzzyView struct {
	text string
	src  []int32 // src[i]: start, in the original, of the rune that produced byte i
	orig string
}

func newFuzzyView(s string) *fuzzyView {
	text, src := fuzzyFoldMap(s, true)
	return &fuzzyView{text: text, src: src, orig: s}
}

// span maps [a, b) in the folded text to the original.
func (v *fuzzyView) span(a, b int) (int, int) {
	start := int(v.src[a])
	last := int(v.src[b-1])
	_, size := utf8.DecodeRuneInString(v.orig[last:])
	return start, last + size
}

func fuzzyFold(s string) string {
	t, _ := fuzzyFoldMap(s, false)
	return t
}

// fuzzyFoldMap folds s for lenient matching: trailing whitespace on each
// line is dropped and typographic quotes, dashes and spaces become their
// ASCII forms. pi also applies Unicode NFKC, which needs tables outside
// the standard library; without it, only compatibility characters (such
// as ligatures or full-width letters) fail to match fuzzily.
func fuzzyFoldMap(s string, withMap bool) (string, []int32) {
	b := make([]byte, 0, len(s))
	var src []int32
	if withMap {
		src = make([]int32, 0, len(s))
	}
	for lineStart := 0; lineStart <= len(s); {
		lineEnd := strings.IndexByte(s[lineStart:], '\n')
		if lineEnd < 0 {
			lineEnd = len(s)
		} else {
			lineEnd += lineStart
		}
		keep := lineEnd
		for keep > lineStart {
			r, size := utf8.DecodeLastRuneInString(s[lineStart:keep])
			if !isJSSpace(r) || (r == utf8.RuneError && size == 1) {
				break
			}
			keep -= size
		}
		for i := lineStart; i < keep; {
			r, size := utf8.DecodeRuneInString(s[i:])
			var rep string
			switch {
			case r == utf8.RuneError && size == 1:
				rep = s[i : i+1]
			case r == '\u2018' || r == '\u2019' || r == '\u201a' || r == '\u201b':
				rep = "'"
			case r == '\u201c' || r == '\u201d' || r == '\u201e' || r == '\u201f':
				rep = `"`
			case r >= '\u2010' && r <= '\u2015', r == '\u2212':
				rep = "-"
			case r == '\u00a0', r >= '\u2002' && r <= '\u200a', r == '\u202f', r == '\u205f', r == '\u3000':
				rep = " "
			default:
				rep = s[i : i+size]
			}
			b = append(b, rep...)
			if withMap {
				for range len(rep) {
					src = append(src, int32(i))
				}
			}
			i += size
		}
		if lineEnd == len(s) {
			break
		}
		b = append(b, '\n')
		if withMap {
			src = append(src, int32(lineEnd))
		}
		lineStart = lineEnd + 1
	}
	return string(b), src
}

// isJSSpace is JavaScript's notion of whitespace for String.trimEnd, which
// is what pi strips from line ends.
func isJSSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', '\u00a0', '\u1680', '\u2028', '\u2029', '\u202f', '\u205f', '\u3000', '\ufeff':
		return true
	}
	return r >= '\u2000' && r <= '\u200a'
}
