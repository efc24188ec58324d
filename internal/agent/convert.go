package agent

import (
	"strconv"
	"strings"

	"github.com/agentd-dev/agentd/internal/llm"
)

// ToLLM turns a conversation into what a model is sent: user, assistant
// and tool-result messages pass through; a bash command the user ran, a
// custom message and branch or compaction summaries become user messages
// that say what they are.
func ToLLM(ms []*llm.Message) []llm.Message {
	out := make([]llm.Message, 0, len(ms))
	for _, m := range ms {
		switch m.Role {
		case llm.RoleUser, llm.RoleAssistant, llm.RoleToolResult:
			out = append(out, *m)
		case llm.RoleBashExecution:
			if m.ExcludeFromContext {
				continue
			}
			out = append(out, userText(BashText(m), m.Timestamp))
		case llm.RoleCustom:
			out = append(out, llm.Message{Role: llm.RoleUser, Content: m.Content, Timestamp: m.Timestamp})
		case llm.RoleBranchSummary:
			out = append(out, userText("A summary of the conversation branch we returned from:\n<summary>\n"+m.Summary+"\n</summary>", m.Timestamp))
		case llm.RoleCompactionSummary:
			out = append(out, userText("Earlier parts of this conversation were condensed into the summary below. Continue from it.\n<summary>\n"+m.Summary+"\n</summary>", m.Timestamp))
		}
	}
	return out
}

func userText(s string, ts int64) llm.Message {
	return llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text(s)}, Timestamp: ts}
}

// BashText is how a command the user ran is shown to the model.
func BashText(m *llm.Message) string {
	var b strings.Builder
	b.WriteString("The user ran `")
	b.WriteString(m.Command)
	b.WriteString("`")
	if m.Output != "" {
		b.WriteString(":\n```\n")
		b.WriteString(m.Output)
		b.WriteString("\n```")
	} else {
		b.WriteString(" (no output)")
	}
	switch {
	case m.Cancelled:
		b.WriteString("\nThe command was cancelled.")
	case m.ExitCode != nil && *m.ExitCode != 0:
		b.WriteString("\nIt exited with code " + strconv.Itoa(*m.ExitCode) + ".")
	}
	if m.Truncated && m.FullOutputPath != "" {
		b.WriteString("\nThe output was truncated; the full output is in " + m.FullOutputPath + ".")
	}
	return b.String()
}
