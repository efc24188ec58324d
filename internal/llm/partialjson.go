package llm

import (
	"bytes"
	"encoding/json"
)

// RepairJSONObject turns a prefix of a JSON object, as streamed by a model
// writing tool-call arguments, into a complete object holding everything
// that has fully or partly arrived: open strings are closed, a dangling
// key or separator is dropped, open arrays and objects are closed. Input
// that does not start an object yields "{}".
func RepairJSONObject(raw []byte) json.RawMessage {
	s := trimSpace(raw)
	if len(s) == 0 || s[0] != '{' {
		return json.RawMessage("{}")
	}
	if json.Valid(s) {
		return compact(s)
	}
	out := make([]byte, 0, len(s)+8)
	// stack of open containers; for objects, whether we are before a key
	// (expecting key), after a key (expecting value).
	type frame struct {
		obj bool
		// safe is the length of out at the last point where the
		// container could be closed and remain valid.
		safe int
	}
	stack := make([]frame, 0, 8)
	inString := false
	escaped := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if inString {
			out = append(out, c)
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			inString = true
			out = append(out, c)
		case '{', '[':
			stack = append(stack, frame{obj: c == '{', safe: len(out) + 1})
			out = append(out, c)
		case '}', ']':
			if len(stack) == 0 {
				return finishRepair(out, nil)
			}
			stack = stack[:len(stack)-1]
			out = append(out, c)
			if len(stack) == 0 {
				return finishRepair(out, nil)
			}
		default:
			out = append(out, c)
		}
	}
	// Close what is open, innermost first: an unterminated string is
	// closed (unless a lone escape is pending), then each container is
	// trimmed back to its last complete member.
	if inString {
		if escaped {
			out = out[:len(out)-1]
		}
		out = append(out, '"')
	}
	closers := make([]byte, len(stack))
	for i := range stack {
		if stack[len(stack)-1-i].obj {
			closers[i] = '}'
		} else {
			closers[i] = ']'
		}
	}
	return finishRepair(out, closers)
}

// finishRepair closes out and, if the result is not valid JSON, drops
// trailing tokens one at a time until it is.
func finishRepair(out, closers []byte) json.RawMessage {
	for len(out) > 0 {
		cand := append(append([]byte(nil), out...), closers...)
		if json.Valid(cand) {
			return compact(cand)
		}
		out = dropLastToken(out)
	}
	return json.RawMessage("{}")
}

// dropLastToken removes the last value, key, separator or partial literal.
func dropLastToken(b []byte) []byte {
	n := len(b)
	if n == 0 {
		return b
	}
	switch c := b[n-1]; {
	case c == ',' || c == ':':
		return b[:n-1]
	case c == '"':
		// Drop the whole string.
		for i := n - 2; i >= 0; i-- {
			if b[i] == '"' && !isEscaped(b, i) {
				return b[:i]
			}
		}
		return b[:0]
	case c == '{' || c == '[':
		// An empty container that cannot be closed here: drop it.
		return b[:n-1]
	default:
		// A number, literal or closed container tail: drop one byte.
		return b[:n-1]
	}
}

func isEscaped(b []byte, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && b[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

func trimSpace(b []byte) []byte { return bytes.TrimSpace(b) }

func compact(b []byte) json.RawMessage {
	var buf bytes.Buffer
	buf.Grow(len(b))
	if err := json.Compact(&buf, b); err != nil {
		return json.RawMessage("{}")
	}
	return buf.Bytes()
}
