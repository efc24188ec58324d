// Package jsonfield reads single fields out of JSON documents: a
// fastjson parse plus the conversions agentd's readers have always
// applied to what they pick (those of tidwall/gjson, which they used
// before), so a field of the wrong type reads as it did: a number asked
// for as a string is its text, a string asked for as a number is parsed,
// a missing field is the zero value.
//
// Everything returned is a copy: fastjson's values point into the
// parser's buffer, which its next parse overwrites.
package jsonfield

import (
	"bytes"
	"math"
	"strconv"
	"strings"
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
// escape (\ud800 not followed by another \u escape) is read as U+FFFD,
// as encoding/json and gjson read it; fastjson would keep its six
// characters.
func (p *Parser) Parse(doc []byte) (*fastjson.Value, error) {
	if i := loneSurrogate(doc, 0); i >= 0 {
		p.scratch = replaceLoneSurrogates(p.scratch[:0], doc, i)
		doc = p.scratch
	}
	return p.p.ParseBytes(doc)
}

// loneSurrogate returns the index of the first \u escape from from on
// that fastjson would keep verbatim, or -1. Backslashes occur only in
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
		// A surrogate followed by any \u escape is decoded as a pair by
		// both readers (to U+FFFD if it is no pair).
		if i+12 <= len(doc) && doc[i+6] == '\\' && doc[i+7] == 'u' {
			if _, ok := hex4(doc, i+8); ok {
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

// String is v as text: a string unescaped, a number as written (an
// integer) or as Go formats its value (any other), true and false as
// such, an object or array as compact JSON; "" for null or a missing v.
func String(v *fastjson.Value) string {
	if v == nil {
		return ""
	}
	switch v.Type() {
	case fastjson.TypeString:
		return string(v.GetStringBytes())
	case fastjson.TypeNumber:
		raw := numberText(v)
		if isInteger(raw) {
			return string(raw)
		}
		return strconv.FormatFloat(parseFloat(raw), 'f', -1, 64)
	case fastjson.TypeTrue:
		return "true"
	case fastjson.TypeFalse:
		return "false"
	case fastjson.TypeObject, fastjson.TypeArray:
		return string(v.MarshalTo(nil))
	}
	return ""
}

// StringOnly is v's text if v is a string, else "".
func StringOnly(v *fastjson.Value) string {
	if v == nil || v.Type() != fastjson.TypeString {
		return ""
	}
	return string(v.GetStringBytes())
}

// IsString reports whether v is a string.
func IsString(v *fastjson.Value) bool {
	return v != nil && v.Type() == fastjson.TypeString
}

// Bool is v as a boolean: true, a number not 0, or a string
// strconv.ParseBool accepts (in any case) as true.
func Bool(v *fastjson.Value) bool {
	if v == nil {
		return false
	}
	switch v.Type() {
	case fastjson.TypeTrue:
		return true
	case fastjson.TypeString:
		b, _ := strconv.ParseBool(strings.ToLower(string(v.GetStringBytes())))
		return b
	case fastjson.TypeNumber:
		return parseFloat(numberText(v)) != 0
	}
	return false
}

// Int is v as an integer: a number (one beyond int64 saturates, a
// fraction is truncated), a string holding one, 1 for true, else 0.
func Int(v *fastjson.Value) int64 {
	if v == nil {
		return 0
	}
	switch v.Type() {
	case fastjson.TypeTrue:
		return 1
	case fastjson.TypeString:
		s := v.GetStringBytes()
		if n, ok := parseInt(s); ok {
			return n
		}
		if f, err := strconv.ParseFloat(string(s), 64); err == nil {
			return floatToInt(f)
		}
		return 0
	case fastjson.TypeNumber:
		raw := numberText(v)
		f := parseFloat(raw)
		if n, ok := safeInt(f); ok {
			return n
		}
		if n, ok := parseInt(raw); ok {
			return n
		}
		return floatToInt(f)
	}
	return 0
}

// Uint is v as an unsigned integer, as Int but negative numbers are 0
// and large ones saturate at the uint64 maximum.
func Uint(v *fastjson.Value) uint64 {
	if v == nil {
		return 0
	}
	switch v.Type() {
	case fastjson.TypeTrue:
		return 1
	case fastjson.TypeString:
		s := v.GetStringBytes()
		if n, ok := parseUint(s); ok {
			return n
		}
		if f, err := strconv.ParseFloat(string(s), 64); err == nil {
			return floatToUint(f)
		}
		return 0
	case fastjson.TypeNumber:
		raw := numberText(v)
		f := parseFloat(raw)
		if n, ok := safeInt(f); ok && n >= 0 {
			return uint64(n)
		}
		if n, ok := parseUint(raw); ok {
			return n
		}
		return floatToUint(f)
	}
	return 0
}

// numberText is a number as it was written.
func numberText(v *fastjson.Value) []byte {
	return v.MarshalTo(nil)
}

func parseFloat(raw []byte) float64 {
	f, _ := strconv.ParseFloat(string(raw), 64) // ±Inf when out of range, as gjson
	return f
}

func isInteger(raw []byte) bool {
	i := 0
	if len(raw) > 0 && raw[0] == '-' {
		i++
	}
	for ; i < len(raw); i++ {
		if raw[i] < '0' || raw[i] > '9' {
			return false
		}
	}
	return true
}

// safeInt converts f if it is within JavaScript's safe integers.
func safeInt(f float64) (int64, bool) {
	if f < -9007199254740991 || f > 9007199254740991 {
		return 0, false
	}
	return int64(f), true
}

// parseUint reads decimal digits, saturating on overflow.
func parseUint(s []byte) (uint64, bool) {
	if len(s) == 0 {
		return 0, false
	}
	var n uint64
	over := false
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		next := n*10 + uint64(c-'0')
		if next < n || n > math.MaxUint64/10 {
			over = true
		}
		n = next
	}
	if over {
		return math.MaxUint64, true
	}
	return n, true
}

// parseInt reads an optionally negative decimal integer, saturating.
func parseInt(s []byte) (int64, bool) {
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	n, ok := parseUint(s)
	switch {
	case !ok:
		return 0, false
	case neg && n > 1<<63:
		return math.MinInt64, true
	case neg:
		return -int64(n), true
	case n > math.MaxInt64:
		return math.MaxInt64, true
	}
	return int64(n), true
}

func floatToInt(f float64) int64 {
	switch {
	case f >= math.MaxInt64:
		return math.MaxInt64
	case f < math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}

func floatToUint(f float64) uint64 {
	switch {
	case f >= math.MaxUint64:
		return math.MaxUint64
	case f < 0:
		return 0
	}
	return uint64(f)
}
