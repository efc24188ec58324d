// Package tool holds the tools a coding agent calls: read, write, edit,
// bash, grep, find and ls, each with the JSON schema the model sees, the
// truncation rules that keep results inside a context window, and the
// path handling that resolves arguments against the session's working
// directory.
package tool

import (
	"context"
	"encoding/json"

	"github.com/agentd-dev/agentd/internal/llm"
)

// Tool is one capability the model can call.
type Tool interface {
	// Spec is what the model is told: name, description and the JSON
	// Schema of the arguments.
	Spec() llm.Tool
	// Execute runs one call. update, when non-nil, receives partial
	// results while the tool runs (bash streams its output); it is called
	// from the Execute goroutine. Cancelling ctx stops the tool (bash
	// kills its whole process group) and Execute returns promptly.
	// Failures are results with IsError set and a message for the model,
	// not Go errors: the model reads them and adapts.
	Execute(ctx context.Context, call Call, update func(Result)) Result
}

// Call is one tool call from the model.
type Call struct {
	ID   string
	Name string
	Args json.RawMessage
}

// Result is what a tool returns: content for the model, details for
// clients (diffs, truncation notices, exit codes), and whether it failed.
type Result struct {
	Content []llm.Content
	// Details is JSON-encodable structured data for clients; nil for none.
	Details any
	IsError bool
}

// Errorf is a failed result whose text tells the model what went wrong.
func Errorf(format string, args ...any) Result {
	return Result{Content: []llm.Content{llm.Text(sprintf(format, args...))}, IsError: true}
}

// TextResult is a successful result with one text block.
func TextResult(text string, details any) Result {
	return Result{Content: []llm.Content{llm.Text(text)}, Details: details}
}

// Unavailable is a source of tools that gives none, and why: an MCP
// server that failed to start. Clients list it beside the tools, so a
// person sees what is missing and the cause.
type Unavailable struct {
	// Source names it: "mcp:<server>" for an MCP server.
	Source string `json:"source"`
	// Error is the cause, written for a person, naming the source.
	Error string `json:"error"`
}
