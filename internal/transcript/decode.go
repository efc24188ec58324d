package transcript

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/agentd-dev/agentd/internal/llm"
)

// A fast decoder for the lines pi and agentd write.
//
// encoding/json validates its input on every call, and llm.Message and
// llm.Content decode through nested UnmarshalJSON calls, so a message body
// is scanned four or five times; opening a long session was slower than
// pi's JSON.parse. This decoder walks each line once with the skipping
// scanner from list.go and builds the same values directly.
//
// It is deliberately narrow: any key it does not know, any null where a
// value is expected, any number or string it is unsure about makes it give
// up (ok == false), and the caller decodes the line with encoding/json
// and llm's own UnmarshalJSON instead. So the result is always what the
// reference decoders would produce; FuzzFastDecode checks exactly that.

// fastLine fills j from line. Message is left raw for fastMessage.
func fastLine(line []byte, j *lineJSON) bool {
	ok := true
	err := eachField(line, func(k, v []byte) {
		if !ok {
			return
		}
		switch string(k) {
		case "type":
			j.Type, ok = strPtr(v)
		case "id":
			j.ID, ok = strPtr(v)
		case "parentId":
			if isNull(v) {
				j.ParentID = nil
			} else {
				j.ParentID, ok = strPtr(v)
			}
		case "timestamp":
			j.Timestamp, ok = str(v)
		case "version":
			var f float64
			f, ok = number(v)
			j.Version = &f
		case "cwd":
			j.Cwd, ok = str(v)
		case "parentSession":
			j.ParentSession, ok = str(v)
		case "message":
			j.Message = v // decoded (and validated) by the caller
		case "provider":
			j.Provider, ok = str(v)
		case "modelId":
			j.ModelID, ok = str(v)
		case "thinkingLevel":
			j.ThinkingLevel, ok = str(v)
		case "summary":
			j.Summary, ok = str(v)
		case "firstKeptEntryId":
			j.FirstKeptEntryID, ok = str(v)
		case "firstKeptEntryIndex":
			var f float64
			f, ok = number(v)
			j.FirstKeptEntryIndex = &f
		case "tokensBefore":
			j.TokensBefore, ok = number(v)
		case "details":
			j.Details, ok = raw(v)
		case "fromHook":
			var b bool
			b, ok = boolean(v)
			j.FromHook = &b
		case "fromId":
			j.FromID, ok = str(v)
		case "customType":
			j.CustomType, ok = str(v)
		case "data":
			j.Data, ok = raw(v)
		case "content":
			j.Content, ok = raw(v)
		case "display":
			j.Display, ok = boolean(v)
		case "targetId":
			j.TargetID, ok = str(v)
		case "label":
			if isNull(v) {
				j.Label = nil
			} else {
				j.Label, ok = strPtr(v)
			}
		case "name":
			j.Name, ok = str(v)
		default:
			ok = false
		}
	})
	return err == nil && ok
}

// fastMessage decodes a message object as llm.Message.UnmarshalJSON would.
func fastMessage(v []byte, in *interner) (*llm.Message, bool) {
	m := new(llm.Message)
	var content []byte
	ok := true
	err := eachField(v, func(k, v []byte) {
		if !ok {
			return
		}
		switch string(k) {
		case "role":
			var s string
			s, ok = in.str(v)
			m.Role = llm.Role(s)
		case "content":
			content = v
		case "timestamp":
			m.Timestamp, ok = integer(v)
		case "api":
			var s string
			s, ok = in.str(v)
			m.API = llm.API(s)
		case "provider":
			m.Provider, ok = in.str(v)
		case "model":
			m.Model, ok = in.str(v)
		case "usage":
			ok = fastUsage(v, &m.Usage)
		case "stopReason":
			var s string
			s, ok = in.str(v)
			m.StopReason = llm.StopReason(s)
		case "errorMessage":
			m.ErrorMessage, ok = str(v)
		case "responseId":
			m.ResponseID, ok = str(v)
		case "toolCallId":
			m.ToolCallID, ok = str(v)
		case "toolName":
			m.ToolName, ok = in.str(v)
		case "details":
			m.Details, ok = raw(v)
		case "isError":
			m.IsError, ok = boolean(v)
		case "command":
			m.Command, ok = str(v)
		case "output":
			m.Output, ok = str(v)
		case "exitCode":
			var n int64
			n, ok = integer(v)
			if ok && int64(int(n)) == n {
				code := int(n)
				m.ExitCode = &code
			} else {
				ok = false
			}
		case "cancelled":
			m.Cancelled, ok = boolean(v)
		case "truncated":
			m.Truncated, ok = boolean(v)
		case "fullOutputPath":
			m.FullOutputPath, ok = str(v)
		case "excludeFromContext":
			m.ExcludeFromContext, ok = boolean(v)
		case "customType":
			m.CustomType, ok = in.str(v)
		case "display":
			m.Display, ok = boolean(v)
		case "summary":
			m.Summary, ok = str(v)
		case "fromId":
			m.FromID, ok = str(v)
		case "tokensBefore":
			m.TokensBefore, ok = integer(v)
		default:
			ok = false
		}
	})
	if err != nil || !ok {
		return nil, false
	}
	switch m.Role {
	case llm.RoleUser, llm.RoleAssistant, llm.RoleToolResult, llm.RoleBashExecution, llm.RoleCustom, llm.RoleBranchSummary, llm.RoleCompactionSummary:
	case "hookMessage":
		m.Role = llm.RoleCustom
	default:
		return nil, false
	}
	if bytes.Equal(m.Details, []byte("null")) {
		m.Details = nil
	}
	switch {
	case content == nil:
	case content[0] == '"':
		s, ok := str(content)
		if !ok {
			return nil, false
		}
		m.Content = []llm.Content{llm.Text(s)}
	case content[0] == '[':
		if m.Content, ok = fastContent(content, in); !ok {
			return nil, false
		}
	default: // null and anything else: let the reference decoder decide
		return nil, false
	}
	return m, true
}

func fastContent(v []byte, in *interner) ([]llm.Content, bool) {
	n := 0
	if eachElement(v, func([]byte) { n++ }) != nil {
		return nil, false
	}
	out := make([]llm.Content, 0, n)
	ok := true
	_ = eachElement(v, func(el []byte) {
		if !ok {
			return
		}
		var c llm.Content
		if c, ok = fastBlock(el, in); ok {
			out = append(out, c)
		}
	})
	return out, ok
}

func fastBlock(v []byte, in *interner) (llm.Content, bool) {
	var c llm.Content
	var args []byte
	ok := true
	err := eachField(v, func(k, v []byte) {
		if !ok {
			return
		}
		switch string(k) {
		case "type":
			var s string
			s, ok = in.str(v)
			c.Type = llm.ContentType(s)
		case "text":
			c.Text, ok = str(v)
		case "textSignature":
			c.TextSignature, ok = str(v)
		case "thinking":
			c.Thinking, ok = str(v)
		case "thinkingSignature":
			c.ThinkingSignature, ok = str(v)
		case "redacted":
			c.Redacted, ok = boolean(v)
		case "data":
			c.Data, ok = str(v)
		case "mimeType":
			c.MimeType, ok = in.str(v)
		case "id":
			c.ID, ok = str(v)
		case "name":
			c.Name, ok = in.str(v)
		case "arguments":
			args = v
		case "thoughtSignature":
			c.ThoughtSignature, ok = str(v)
		default:
			ok = false
		}
	})
	if err != nil || !ok {
		return c, false
	}
	switch c.Type {
	case llm.ContentText, llm.ContentThinking, llm.ContentImage:
		if args != nil {
			if c.Arguments, ok = raw(args); !ok {
				return c, false
			}
		}
	case llm.ContentToolCall:
		if args == nil || isNull(args) {
			c.Arguments = json.RawMessage("{}")
		} else if args[0] != '{' {
			return c, false
		} else if c.Arguments, ok = raw(args); !ok {
			return c, false
		}
	default:
		return c, false
	}
	return c, true
}

func fastUsage(v []byte, u *llm.Usage) bool {
	ok := true
	err := eachField(v, func(k, v []byte) {
		if !ok {
			return
		}
		switch string(k) {
		case "input":
			u.Input, ok = integer(v)
		case "output":
			u.Output, ok = integer(v)
		case "cacheRead":
			u.CacheRead, ok = integer(v)
		case "cacheWrite":
			u.CacheWrite, ok = integer(v)
		case "totalTokens":
			u.TotalTokens, ok = integer(v)
		case "cost":
			ok = eachField(v, func(k, v []byte) {
				if !ok {
					return
				}
				switch string(k) {
				case "input":
					u.Cost.Input, ok = number(v)
				case "output":
					u.Cost.Output, ok = number(v)
				case "cacheRead":
					u.Cost.CacheRead, ok = number(v)
				case "cacheWrite":
					u.Cost.CacheWrite, ok = number(v)
				case "total":
					u.Cost.Total, ok = number(v)
				default:
					ok = false
				}
			}) == nil && ok
		default:
			ok = false
		}
	})
	return err == nil && ok
}

// ---- values ------------------------------------------------------------------

func isNull(v []byte) bool { return string(v) == "null" }

func boolean(v []byte) (bool, bool) {
	switch string(v) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// number parses a JSON number the way encoding/json does into a float64.
func number(v []byte) (float64, bool) {
	if !isJSONNumber(v) {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	return f, err == nil
}

// integer parses a JSON number into an int64 field; like encoding/json it
// refuses fractions and exponents.
func integer(v []byte) (int64, bool) {
	if !isJSONNumber(v) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil
}

// isJSONNumber checks the JSON number grammar, which is stricter than
// strconv's (no "+1", "0x10", "1_000", "Inf", ".5", "01").
func isJSONNumber(v []byte) bool {
	i := 0
	if i < len(v) && v[i] == '-' {
		i++
	}
	digits := func() int {
		s := i
		for i < len(v) && v[i] >= '0' && v[i] <= '9' {
			i++
		}
		return i - s
	}
	if i < len(v) && v[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(v) && v[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(v) && (v[i] == 'e' || v[i] == 'E') {
		i++
		if i < len(v) && (v[i] == '+' || v[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(v)
}

// raw copies a value kept as json.RawMessage, after checking it is valid
// JSON (the scanner only checked its nesting).
func raw(v []byte) (json.RawMessage, bool) {
	if len(v) == 0 {
		return nil, false
	}
	switch v[0] {
	case '"':
		if _, ok := str(v); !ok {
			return nil, false
		}
	case '{', '[':
		if !json.Valid(v) {
			return nil, false
		}
	case 't', 'f':
		if _, ok := boolean(v); !ok {
			return nil, false
		}
	case 'n':
		if !isNull(v) {
			return nil, false
		}
	default:
		if !isJSONNumber(v) {
			return nil, false
		}
	}
	return bytes.Clone(v), true
}

func strPtr(v []byte) (*string, bool) {
	s, ok := str(v)
	if !ok {
		return nil, false
	}
	return &s, true
}

// str decodes a JSON string exactly as encoding/json does: invalid UTF-8
// and unpaired surrogate escapes become U+FFFD, raw control characters
// are an error.
func str(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", false
	}
	s := v[1 : len(v)-1]
	i := 0
	for i < len(s) {
		c := s[i]
		if c < 0x20 {
			return "", false
		}
		if c == '\\' || c == '"' || c >= utf8.RuneSelf {
			break
		}
		i++
	}
	if i == len(s) {
		return string(s), true
	}
	if bytes.IndexByte(s[i:], '\\') < 0 && utf8.Valid(s[i:]) {
		for _, c := range s[i:] {
			if c < 0x20 || c == '"' {
				return "", false
			}
		}
		return string(s), true
	}
	b := make([]byte, 0, len(s)+2*utf8.UTFMax)
	b = append(b, s[:i]...)
	for i < len(s) {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i >= len(s) {
				return "", false
			}
			switch s[i] {
			case '"', '\\', '/':
				b = append(b, s[i])
				i++
			case 'b':
				b = append(b, '\b')
				i++
			case 'f':
				b = append(b, '\f')
				i++
			case 'n':
				b = append(b, '\n')
				i++
			case 'r':
				b = append(b, '\r')
				i++
			case 't':
				b = append(b, '\t')
				i++
			case 'u':
				r, ok := hex4(s[i+1:])
				if !ok {
					return "", false
				}
				i += 5
				if utf16.IsSurrogate(r) {
					if i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
						if r2, ok := hex4(s[i+2:]); ok {
							if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
								b = utf8.AppendRune(b, d)
								i += 6
								continue
							}
						}
					}
					r = utf8.RuneError
				}
				b = utf8.AppendRune(b, r)
			default:
				return "", false
			}
		case c == '"' || c < 0x20:
			return "", false
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = utf8.AppendRune(b, utf8.RuneError)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
		}
	}
	return string(b), true
}

func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// interner shares the strings that repeat on every line of a session
// (roles, block types, provider, model, tool names), so a long session
// holds one copy of each instead of one per message.
type interner struct{ m map[string]string }

func (in *interner) str(v []byte) (string, bool) {
	if in == nil {
		return str(v)
	}
	if len(v) >= 2 && len(v) <= 64 {
		if s, ok := in.m[string(v)]; ok {
			return s, true
		}
	}
	s, ok := str(v)
	if ok && len(v) <= 64 && len(in.m) < 4096 {
		if in.m == nil {
			in.m = make(map[string]string)
		}
		in.m[string(v)] = s
	}
	return s, ok
}
