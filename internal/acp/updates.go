package acp

import (
	"encoding/json"
	"path/filepath"
	"strings"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/todo"
)

// toolArgs are the argument fields of the built-in tools that tell an
// editor what a call is about.
type toolArgs struct {
	Path    string  `json:"path"`
	Command string  `json:"command"`
	Pattern string  `json:"pattern"`
	Offset  *int    `json:"offset"`
	Content *string `json:"content"`
	Edits   []struct {
		OldText string `json:"oldText"`
		NewText string `json:"newText"`
	} `json:"edits"`
}

func parseToolArgs(raw json.RawMessage) toolArgs {
	var a toolArgs
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &a) // a model's malformed arguments only cost the title
	}
	return a
}

// toolKind is ACP's kind of a tool, which editors use for the icon and
// how they show the call.
func toolKind(name string) string {
	switch name {
	case "read":
		return "read"
	case "write", "edit":
		return "edit"
	case "bash":
		return "execute"
	case "grep", "find", "ls":
		return "search"
	case "todo":
		return "think"
	}
	return "other"
}

// absPath is p as the editor wants it: absolute.
func absPath(cwd, p string) string {
	if p == "" || filepath.IsAbs(p) || strings.HasPrefix(p, "~") {
		return p
	}
	return filepath.Join(cwd, p)
}

func toolTitle(name string, a toolArgs) string {
	switch {
	case name == "bash" && a.Command != "":
		return firstLine(a.Command, 120)
	case (name == "grep" || name == "find") && a.Pattern != "":
		if a.Path != "" {
			return name + " " + a.Pattern + " in " + a.Path
		}
		return name + " " + a.Pattern
	case a.Path != "":
		return name + " " + a.Path
	}
	return name
}

func locations(cwd, name string, a toolArgs) []location {
	if a.Path == "" || name == "bash" {
		return nil
	}
	l := location{Path: absPath(cwd, a.Path)}
	if name == "read" && a.Offset != nil && *a.Offset > 0 {
		line := *a.Offset
		l.Line = &line
	}
	return []location{l}
}

// startCall is the tool_call that announces a call.
func startCall(cwd, id, name string, args json.RawMessage) toolCall {
	a := parseToolArgs(args)
	raw := args
	if len(raw) == 0 {
		raw = json.RawMessage("{}")
	}
	return toolCall{SessionUpdate: "tool_call", ToolCallID: id, Title: toolTitle(name, a), Kind: toolKind(name),
		Status: "pending", Locations: locations(cwd, name, a), RawInput: raw}
}

// endCall is the tool_call_update that ends a call: its result, and for
// a successful edit or write the change as a diff.
func endCall(cwd, id, name string, args json.RawMessage, content []llm.Content, isError bool) toolCall {
	u := toolCall{SessionUpdate: "tool_call_update", ToolCallID: id, Status: "completed"}
	if isError {
		u.Status = "failed"
	}
	a := parseToolArgs(args)
	if !isError {
		switch name {
		case "edit":
			for _, e := range a.Edits {
				oldText, newText := e.OldText, e.NewText
				u.Content = append(u.Content, toolCallContent{Type: "diff", Path: absPath(cwd, a.Path), OldText: &oldText, NewText: &newText})
			}
		case "write":
			if a.Content != nil {
				newText := *a.Content
				u.Content = append(u.Content, toolCallContent{Type: "diff", Path: absPath(cwd, a.Path), NewText: &newText})
			}
		}
	}
	u.Content = append(u.Content, resultContent(content)...)
	return u
}

// resultContent is a tool result's content as ACP tool call content.
func resultContent(content []llm.Content) []toolCallContent {
	var out []toolCallContent
	for _, c := range content {
		switch c.Type {
		case llm.ContentText:
			if c.Text == "" {
				continue
			}
			out = append(out, toolCallContent{Type: "content", Content: &contentBlock{Type: "text", Text: c.Text}})
		case llm.ContentImage:
			out = append(out, toolCallContent{Type: "content", Content: &contentBlock{Type: "image", Data: c.Data, MimeType: c.MimeType}})
		}
	}
	return out
}

// plan is the todo list as ACP's plan; agentd's items have no priority,
// so every entry is medium.
func plan(snap *todo.Snapshot) planUpdate {
	u := planUpdate{SessionUpdate: "plan", Entries: []planEntry{}}
	if snap == nil {
		return u
	}
	for _, it := range snap.Items {
		u.Entries = append(u.Entries, planEntry{Content: it.Content, Priority: "medium", Status: string(it.Status)})
	}
	return u
}
