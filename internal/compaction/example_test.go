package compaction_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentd-dev/agentd/internal/compaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
)

// A session compacts its current path: it turns each entry into an Item,
// names the latest compaction entry (if any) as Previous, and stores the
// Result as a new compaction entry.
func Example() {
	text := func(role llm.Role, s string) *llm.Message {
		return &llm.Message{Role: role, Content: []llm.Content{llm.Text(s)}}
	}
	path := []compaction.Item{
		{EntryID: "a1", Message: text(llm.RoleUser, "Add a --verbose flag to main.go")},
		{EntryID: "a2", Message: &llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{
			llm.ToolCall("t1", "edit", []byte(`{"path":"main.go","oldText":"x","newText":"y"}`)),
		}}},
		{EntryID: "a3", Message: &llm.Message{Role: llm.RoleToolResult, ToolCallID: "t1", ToolName: "edit", Content: []llm.Content{llm.Text("ok")}}},
		{EntryID: "a4"}, // a model change: no message
		{EntryID: "a5", Message: text(llm.RoleUser, strings.Repeat("Now the tests. ", 6000))},
	}
	plan, err := compaction.Prepare(path, nil, compaction.DefaultSettings())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("keep from", plan.FirstKeptEntryID, "summarise", len(plan.ToSummarize), "messages")

	model := faux.New(faux.Options{})
	model.Push(faux.Response{Text: "## Goal\nA --verbose flag for main.go."})
	res, err := compaction.Summarize(context.Background(), model.Stream, faux.Model(), llm.StreamOptions{}, plan, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Summary)
	fmt.Println(res.Details.ModifiedFiles)
	// Output:
	// keep from a4 summarise 3 messages
	// ## Goal
	// A --verbose flag for main.go.
	//
	// <modified-files>
	// main.go
	// </modified-files>
	// [main.go]
}
