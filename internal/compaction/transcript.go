package compaction

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentd-dev/agentd/internal/llm"
)

// The conversation reaches the summarising model as a plain-text
// transcript inside one user message, not as the messages themselves: a
// model handed a conversation tends to carry it on instead of describing
// it. Each message becomes one or more blocks headed by a ">>> " line
// that says who spoke and in what capacity.

// limits caps the blocks of a transcript, in bytes. -1 means no cap; 0
// leaves only a note of what was dropped.
type limits struct {
	tool     int // tool results, bash output
	args     int // tool-call arguments
	thinking int // assistant reasoning
	text     int // what the user and assistant said, notes, summaries
}

// tiers are tried in order until the transcript fits the request's
// budget. The first is pi's: tool output (and here also tool arguments
// and bash output, which can be as large: a write carries a whole file)
// cut to 2000 characters, all conversation kept. Each later tier gives up
// detail the summary can best do without: tool output first, then
// reasoning, then long messages. Tool arguments keep their start to the
// end, since that is where the paths and commands are.
var tiers = []limits{
	{tool: 2000, args: 2000, thinking: -1, text: -1},
	{tool: 800, args: 800, thinking: 1500, text: 8000},
	{tool: 240, args: 300, thinking: 300, text: 2000},
	{tool: 0, args: 160, thinking: 0, text: 500},
}

// minTranscriptBytes is the least budget a transcript is given. Below it
// the request would say nothing useful; better to send that much and let
// the provider decide than to send nothing.
const minTranscriptBytes = 4000

// renderTranscript renders msgs within budget bytes (no limit when
// budget <= 0). When even the tersest tier does not fit, blocks are
// dropped from the middle: the start usually states the task and the end
// is where the work stands, the two things a summary most needs.
func renderTranscript(msgs []*llm.Message, budget int) string {
	var blocks []string
	for _, lim := range tiers {
		blocks = renderBlocks(blocks[:0], msgs, lim)
		if budget <= 0 || joinedLen(blocks) <= budget {
			return strings.Join(blocks, "\n\n")
		}
	}
	return strings.Join(elideMiddle(blocks, budget), "\n\n")
}

func joinedLen(blocks []string) int {
	n := 0
	for _, b := range blocks {
		n += len(b) + 2
	}
	return n
}

// elideMiddle keeps whole blocks from the start (up to a quarter of the
// budget) and from the end (the rest), with a note of how many were left
// out between them.
func elideMiddle(blocks []string, budget int) []string {
	const noteRoom = 80
	budget -= noteRoom
	head, used := 0, 0
	for head < len(blocks) && used+len(blocks[head])+2 <= budget/4 {
		used += len(blocks[head]) + 2
		head++
	}
	tail := len(blocks)
	for tail > head && used+len(blocks[tail-1])+2 <= budget {
		used += len(blocks[tail-1]) + 2
		tail--
	}
	if tail == head {
		return blocks
	}
	out := make([]string, 0, head+1+len(blocks)-tail)
	out = append(out, blocks[:head]...)
	out = append(out, fmt.Sprintf(">>> [%d messages left out here to fit the request]", tail-head))
	return append(out, blocks[tail:]...)
}

func renderBlocks(out []string, msgs []*llm.Message, lim limits) []string {
	var b strings.Builder
	block := func(head, body string) {
		b.Reset()
		b.WriteString(">>> ")
		b.WriteString(head)
		if body != "" {
			b.WriteByte('\n')
			b.WriteString(body)
		}
		out = append(out, b.String())
	}
	for _, m := range msgs {
		switch m.Role {
		case llm.RoleUser:
			if body := contentText(m.Content, lim.text); body != "" {
				block("user", body)
			}
		case llm.RoleAssistant:
			for i := range m.Content {
				c := &m.Content[i]
				switch c.Type {
				case llm.ContentThinking:
					if c.Thinking != "" {
						block("assistant (reasoning)", clip(c.Thinking, lim.thinking))
					}
				case llm.ContentText:
					if c.Text != "" {
						block("assistant", clip(c.Text, lim.text))
					}
				case llm.ContentToolCall:
					block("assistant calls "+c.Name, clip(string(c.Arguments), lim.args))
				}
			}
		case llm.RoleToolResult:
			head := "result of " + m.ToolName
			if m.IsError {
				head += " (failed)"
			}
			body := contentText(m.Content, lim.tool)
			if body == "" {
				body = "(empty)"
			}
			block(head, body)
		case llm.RoleBashExecution:
			if m.ExcludeFromContext {
				continue // the user kept it from the model; keep it from the summary too
			}
			body := clip(m.Output, lim.tool)
			switch {
			case m.Cancelled:
				body += "\n(cancelled)"
			case m.ExitCode != nil && *m.ExitCode != 0:
				body += "\n(exit code " + strconv.Itoa(*m.ExitCode) + ")"
			}
			block("user ran the shell command: "+m.Command, strings.TrimPrefix(body, "\n"))
		case llm.RoleCustom:
			if body := contentText(m.Content, lim.text); body != "" {
				head := "note"
				if m.CustomType != "" {
					head += " (" + m.CustomType + ")"
				}
				block(head, body)
			}
		case llm.RoleBranchSummary:
			block("summary of a branch of the conversation the user left", clip(m.Summary, lim.text))
		case llm.RoleCompactionSummary:
			block("summary of earlier conversation", clip(m.Summary, lim.text))
		}
	}
	return out
}

// contentText joins the text of content blocks, with a placeholder for
// each image, and clips the result.
func contentText(content []llm.Content, limit int) string {
	if len(content) == 1 && content[0].Type == llm.ContentText {
		return clip(content[0].Text, limit)
	}
	var b strings.Builder
	for i := range content {
		switch c := &content[i]; c.Type {
		case llm.ContentText:
			b.WriteString(c.Text)
		case llm.ContentImage:
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString("[image]")
		}
	}
	return clip(b.String(), limit)
}

// clip shortens s to about limit bytes, keeping its start and end: the
// end of command output is where the verdict usually is (the failing test,
// the exit status, the last error).
func clip(s string, limit int) string {
	if limit < 0 || len(s) <= limit {
		return s
	}
	if limit == 0 {
		return fmt.Sprintf("[%d characters left out]", utf8.RuneCountInString(s))
	}
	head := runeStart(s, limit*3/4)
	// Rounding head up to a character boundary may have used up the
	// whole limit; the tail then gets nothing rather than a negative share.
	tail := runeStart(s, max(len(s)-max(limit-head, 0), head))
	return fmt.Sprintf("%s\n[... %d characters left out ...]\n%s", s[:head], utf8.RuneCountInString(s[head:tail]), s[tail:])
}

// runeStart moves i forward to the start of a character.
func runeStart(s string, i int) int {
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return i
}
