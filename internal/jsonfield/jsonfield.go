// Package jsonfield reads single fields out of JSON documents with
// fastjson, decoding lone surrogate escapes as encoding/json does (pi's
// transcripts, written by JavaScript, hold them). Numbers and booleans
// are read with fastjson's own getters (GetInt64, GetBool).
//
// A string returned is a copy: fastjson's values point into the
// parser's buffer, which its next parse overwrites.
package jsonfield

import (
	"bytes"
	"strconv"
	"unicode"
	"unicode/utf16"

	"github.com/valyala/fastjson"
)

// Parser parses documents one at a time; the value of a parse is valid
// until the next. The zero Parser is ready to use; it is not safe for
// concurrent use.
type Parser struct {
	p       fastjson.Parser
	scratch []byte
}

// Parse parses doc, which must be one valid JSON value. A lone surrogate
// escape (\ud800 not followed by the \u escape of a low surrogate) is
// read as U+FFFD, and what follows it as itself, as encoding/json reads
// them; fastjson alone would keep its six characters, or take it and
// the next \u escape for a pair and lose that escape's character.
func (p *Parser) Parse(doc []byte) (*fastjson.Value, error) {
	if i := loneSurrogate(doc, 0); i >= 0 {
		p.scratch = replaceLoneSurrogates(p.scratch[:0], doc, i)
		doc = p.scratch
	}
	return p.p.ParseBytes(doc)
}

// loneSurrogate returns the index of the first \u escape from from on
// of a surrogate that is not the first half of a pair, or -1. Backslashes occur only in
// strings, each starting an escape, so walking from one escape to the
// next never mistakes an escaped backslash for the start of one.
func loneSurrogate(doc []byte, from int) int {
	for i := from; ; {
		j := bytes.IndexByte(doc[i:], '\\')
		if j < 0 || i+j+1 >= len(doc) {
			return -1
		}
		i += j
		if doc[i+1] != 'u' {
			i += 2
			continue
		}
		r, ok := hex4(doc, i+2)
		if !ok || !utf16.IsSurrogate(r) {
			i += 2
			continue
		}
		// A high surrogate followed by a low one is a pair, which both
		// readers decode alike. fastjson takes any other surrogate
		// followed by a \u escape as a pair too, and so loses the second
		// escape's character; encoding/json keeps it, reading only the
		// first as U+FFFD: it is lone.
		if i+12 <= len(doc) && doc[i+6] == '\\' && doc[i+7] == 'u' {
			if r2, ok := hex4(doc, i+8); ok && utf16.DecodeRune(r, r2) != unicode.ReplacementChar {
				i += 12
				continue
			}
		}
		return i
	}
}

// replaceLoneSurrogates appends doc to dst with each lone surrogate
// escape, the first at i, turned into \ufffd.
func replaceLoneSurrogates(dst, doc []byte, i int) []byte {
	for i >= 0 {
		dst = append(dst, doc[:i]...)
		dst = append(dst, `\ufffd`...)
		doc = doc[i+6:]
		i = loneSurrogate(doc, 0)
	}
	return append(dst, doc...)
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[i:i+4]), 16, 16)
	return rune(n), err == nil
}

// String is v's text if v is a string, else "" (a missing v, null or
// another type: every reader of a field here wants a string or nothing).
func String(v *fastjson.Value) string {
	if v == nil || v.Type() != fastjson.TypeString {
		return ""
	}
	return string(v.GetStringBytes())
}

// IsString reports whether v is a string.
func IsString(v *fastjson.Value) bool {
	return v != nil && v.Type() == fastjson.TypeString
}
