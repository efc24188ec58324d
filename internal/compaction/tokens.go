package compaction

import (
	"github.com/agentd-dev/agentd/internal/llm"
)

// imageChars is what an image counts for in an estimate: pi's 4800
// characters, 1200 tokens.
const imageChars = 4800

// EstimateTokens estimates how many tokens m takes in a context with pi's
// heuristic: a token per four characters of its text, thinking, tool-call
// names and arguments, bash command and output, or summary, with images
// counted as 1200 tokens. Characters are counted as JavaScript counts
// them (UTF-16 code units) so that agentd cuts where pi would. The
// estimate errs high for English prose and is close for code.
func EstimateTokens(m *llm.Message) int64 {
	if m == nil {
		return 0
	}
	chars := 0
	switch m.Role {
	case llm.RoleUser, llm.RoleToolResult, llm.RoleCustom:
		// pi leaves a user message's images out of the estimate; they cost
		// the same there as in a tool result, so agentd counts them.
		for i := range m.Content {
			switch c := &m.Content[i]; c.Type {
			case llm.ContentText:
				chars += utf16Len(c.Text)
			case llm.ContentImage:
				chars += imageChars
			}
		}
	case llm.RoleAssistant:
		for i := range m.Content {
			switch c := &m.Content[i]; c.Type {
			case llm.ContentText:
				chars += utf16Len(c.Text)
			case llm.ContentThinking:
				chars += utf16Len(c.Thinking)
			case llm.ContentToolCall:
				chars += utf16Len(c.Name) + utf16Len(c.Arguments)
			}
		}
	case llm.RoleBashExecution:
		chars = utf16Len(m.Command) + utf16Len(m.Output)
	case llm.RoleBranchSummary, llm.RoleCompactionSummary:
		chars = utf16Len(m.Summary)
	}
	return int64((chars + 3) / 4)
}

// ContextTokens estimates the size of a context made of msgs the way pi
// does: the usage the provider reported for the newest successful
// assistant message (it measured everything up to and including that
// message), plus estimates for the messages after it. With no usage to go
// on, every message is estimated.
//
// Unlike pi, an assistant message whose usage is all zero is passed over:
// that means the provider reported none (some OpenAI-compatible servers),
// not that the context was empty.
func ContextTokens(msgs []*llm.Message) int64 {
	var trailing int64
	for i := len(msgs) - 1; i >= 0; i-- {
		if u, ok := reportedTokens(msgs[i]); ok {
			return u + trailing
		}
		trailing += EstimateTokens(msgs[i])
	}
	return trailing
}

// reportedTokens is the context size an assistant message's usage
// reports: the provider's total when it gave one, else the sum of the
// parts. Aborted and failed responses carry no trustworthy usage.
func reportedTokens(m *llm.Message) (int64, bool) {
	if m == nil || m.Role != llm.RoleAssistant || m.StopReason == llm.StopAborted || m.StopReason == llm.StopError {
		return 0, false
	}
	u := &m.Usage
	if u.TotalTokens > 0 {
		return u.TotalTokens, true
	}
	if n := u.Input + u.Output + u.CacheRead + u.CacheWrite; n > 0 {
		return n, true
	}
	return 0, false
}

// utf16Len is the length of UTF-8 text in UTF-16 code units, JavaScript's
// String#length: one per character, two for characters outside the Basic
// Multilingual Plane (four-byte sequences).
func utf16Len[T ~string | ~[]byte](s T) int {
	n, i := 0, 0
	// Most text the estimates see is ASCII: take it eight bytes at a time,
	// and only look at the bytes of a word that has a non-ASCII one. The
	// compiler turns the shifts into one load.
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if w&0x8080808080808080 == 0 {
			n += 8
			continue
		}
		for j := i; j < i+8; j++ {
			n += utf16Units(s[j])
		}
	}
	for ; i < len(s); i++ {
		n += utf16Units(s[i])
	}
	return n
}

// utf16Units is what one byte of UTF-8 adds to the UTF-16 length: a
// character starts at every byte but a continuation byte, and one that
// starts a four-byte sequence needs a surrogate pair.
func utf16Units(b byte) int {
	switch {
	case b < 0x80:
		return 1
	case b < 0xC0: // continuation
		return 0
	case b < 0xF0:
		return 1
	}
	return 2
}
