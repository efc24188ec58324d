package compaction

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentd-dev/agentd/internal/llm"
)

// conv builds a session path with sequential entry ids e1, e2, ...
type conv struct {
	items []Item
}

func (c *conv) add(m *llm.Message) *conv {
	c.items = append(c.items, Item{EntryID: fmt.Sprintf("e%d", len(c.items)+1), Message: m})
	return c
}

// other adds an entry without a message (a model change, a label).
func (c *conv) other() *conv { return c.add(nil) }

func (c *conv) id(i int) string { return c.items[i].EntryID }

// filler backs tokens: slicing one string keeps the random-conversation
// tests from spending their time allocating text.
var filler = strings.Repeat("abcd", 50000)

// tokens returns text that EstimateTokens counts as n tokens.
func tokens(n int) string {
	if 4*n <= len(filler) {
		return filler[:4*n]
	}
	return strings.Repeat("abcd", n)
}

func user(text string) *llm.Message {
	return &llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text(text)}}
}

func asst(text string, calls ...llm.Content) *llm.Message {
	m := &llm.Message{Role: llm.RoleAssistant, StopReason: llm.StopStop}
	if text != "" {
		m.Content = append(m.Content, llm.Text(text))
	}
	m.Content = append(m.Content, calls...)
	if len(calls) > 0 {
		m.StopReason = llm.StopToolUse
	}
	return m
}

func call(id, name string, args any) llm.Content {
	b, err := json.Marshal(args)
	if err != nil {
		panic(err)
	}
	return llm.ToolCall(id, name, b)
}

func result(id, name, text string) *llm.Message {
	return &llm.Message{Role: llm.RoleToolResult, ToolCallID: id, ToolName: name, Content: []llm.Content{llm.Text(text)}}
}

func bash(cmd, out string) *llm.Message {
	code := 0
	return &llm.Message{Role: llm.RoleBashExecution, Command: cmd, Output: out, ExitCode: &code}
}

func custom(text string) *llm.Message {
	return &llm.Message{Role: llm.RoleCustom, CustomType: "note", Content: []llm.Content{llm.Text(text)}, Display: true}
}

func compactionMsg(summary string) *llm.Message {
	return &llm.Message{Role: llm.RoleCompactionSummary, Summary: summary}
}

// messagesOf returns the messages of items, as Prepare partitions them.
func messagesOf(items []Item) []*llm.Message {
	return messages(items, "")
}

// indexOf returns the index of the item with entry id id, -1 if none.
func indexOf(items []Item, id string) int {
	for i, it := range items {
		if it.EntryID == id {
			return i
		}
	}
	return -1
}
