package tool

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// globMatcher matches slash-separated paths (or names) against a glob.
// Globs become anchored regular expressions, which gives every feature
// (**, classes, braces) one well-tested engine; the patterns seen most
// ("*.go", "Makefile") take a fast path that skips the regexp.
type globMatcher struct {
	re     *regexp.Regexp
	kind   globKind
	lit    string // the literal or suffix for the fast paths
	noCase bool
}

type globKind int8

const (
	globRegexp globKind = iota
	globLiteral
	globSuffix // "*" followed by a literal without '/'
)

// compileGlob compiles pattern. braces enables {a,b} alternation (find and
// grep globs have it; .gitignore patterns do not).
func compileGlob(pattern string, braces, noCase bool) (*globMatcher, error) {
	g := &globMatcher{noCase: noCase}
	if !strings.ContainsAny(pattern, `*?[\{`) || (!braces && !strings.ContainsAny(pattern, `*?[\`)) {
		g.kind, g.lit = globLiteral, pattern
		if !noCase || isASCII(pattern) {
			return g, nil
		}
	}
	if rest, ok := strings.CutPrefix(pattern, "*"); ok && rest != "" && !strings.ContainsAny(rest, `*?[\{}/`) && isASCII(rest) {
		g.kind, g.lit = globSuffix, rest
		return g, nil
	}
	src := globToRegexp(pattern, braces)
	if noCase {
		src = "(?i)" + src
	}
	re, err := regexp.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("invalid glob %q: %v", pattern, err)
	}
	g.kind, g.re = globRegexp, re
	return g, nil
}

func (g *globMatcher) match(s string) bool {
	switch g.kind {
	case globLiteral:
		if g.noCase {
			return strings.EqualFold(s, g.lit)
		}
		return s == g.lit
	case globSuffix:
		cut := len(s) - len(g.lit)
		if cut < 0 || strings.IndexByte(s[:cut], '/') >= 0 {
			return false
		}
		if g.noCase {
			return strings.EqualFold(s[cut:], g.lit)
		}
		return s[cut:] == g.lit
	}
	return g.re.MatchString(s)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func hasUpper(s string) bool {
	for _, r := range s {
		if unicode.IsUpper(r) {
			return true
		}
	}
	return false
}

// globToRegexp translates a glob into an anchored regexp source. A star
// is any run of characters except '/'; '?' is one such character; "**"
// as a whole path segment is any number of segments, none included;
// [abc] is a class, negated by [!abc] or [^abc], with ranges as in a-z;
// {a,b} is alternation, nestable (when braces is set); and a backslash
// makes the next character literal.
func globToRegexp(pattern string, braces bool) string {
	var b strings.Builder
	b.WriteString("^")
	t := globTranslator{p: pattern, braces: braces}
	t.translate(&b, 0)
	b.WriteString("$")
	return b.String()
}

type globTranslator struct {
	p      string
	i      int
	braces bool
}

// translate writes until the end of the pattern or, inside braces
// (depth > 0), until the brace group's closing '}' (consumed) or a ','
// (left for the caller).
func (t *globTranslator) translate(b *strings.Builder, depth int) {
	p := t.p
	for t.i < len(p) {
		c := p[t.i]
		switch {
		case c == '*':
			if strings.HasPrefix(p[t.i:], "**") && (t.i == 0 || p[t.i-1] == '/') {
				rest := p[t.i+2:]
				switch {
				case strings.HasPrefix(rest, "/"):
					b.WriteString("(?:.*/)?")
					t.i += 3
					continue
				case rest == "" || (depth > 0 && (rest[0] == ',' || rest[0] == '}')):
					b.WriteString(".*")
					t.i += 2
					continue
				}
			}
			for t.i < len(p) && p[t.i] == '*' {
				t.i++
			}
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
			t.i++
		case c == '[':
			if cls, n, ok := globClass(p[t.i:]); ok {
				b.WriteString(cls)
				t.i += n
			} else {
				b.WriteString(`\[`)
				t.i++
			}
		case c == '\\':
			if t.i+1 < len(p) {
				r, size := utf8.DecodeRuneInString(p[t.i+1:])
				b.WriteString(regexp.QuoteMeta(string(r)))
				t.i += 1 + size
			} else {
				b.WriteString(`\\`)
				t.i++
			}
		case c == '{' && t.braces && closingBrace(p, t.i) > 0:
			t.i++
			b.WriteString("(?:")
			for {
				t.translate(b, depth+1)
				if t.i < len(p) && p[t.i] == ',' {
					b.WriteString("|")
					t.i++
					continue
				}
				break
			}
			b.WriteString(")")
		case depth > 0 && c == ',':
			return
		case depth > 0 && c == '}':
			t.i++
			return
		default:
			r, size := utf8.DecodeRuneInString(p[t.i:])
			b.WriteString(regexp.QuoteMeta(string(r)))
			t.i += size
		}
	}
}

// closingBrace returns the index of the '}' closing the '{' at open, or
// -1 when it is unbalanced (and so literal).
func closingBrace(p string, open int) int {
	depth := 0
	for i := open; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '[':
			if _, n, ok := globClass(p[i:]); ok {
				i += n - 1
			}
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// globClass translates the class at the start of s ("[...]") and returns
// it with its length in s; ok is false when s has no closing ']'.
func globClass(s string) (string, int, bool) {
	i := 1
	negate := false
	if i < len(s) && (s[i] == '!' || s[i] == '^') {
		negate = true
		i++
	}
	var items []rune
	first := true
	for i < len(s) {
		if s[i] == ']' && !first {
			var b strings.Builder
			b.WriteString("[")
			if negate {
				b.WriteString("^/")
			}
			for k := 0; k < len(items); k++ {
				if items[k] == -1 { // range marker
					b.WriteString("-")
					continue
				}
				fmt.Fprintf(&b, `\x{%x}`, items[k])
			}
			b.WriteString("]")
			return b.String(), i + 1, true
		}
		first = false
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == '\\' && i+size < len(s) {
			i += size
			r, size = utf8.DecodeRuneInString(s[i:])
		} else if r == '-' && len(items) > 0 && items[len(items)-1] != -1 && i+1 < len(s) && s[i+1] != ']' {
			items = append(items, -1)
			i += size
			continue
		}
		items = append(items, r)
		i += size
	}
	return "", 0, false
}
