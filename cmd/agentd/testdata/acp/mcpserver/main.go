// Command mcpserver is a tiny MCP server over stdio for agentd's
// end-to-end tests: "echo" answers with its text, "env" with the value
// of an environment variable the server was given, "crash" exits in the
// middle of the call, "progress" notifies three steps of progress, each
// going on only once the FIFO named by its "gate" was opened and closed
// by the test (which saw the step). Its first argument, if any, is a file it writes
// its pid to when it starts.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	if len(os.Args) > 1 {
		// The test reads the pid to check the server ends with the session.
		_ = os.WriteFile(os.Args[1], []byte(strconv.Itoa(os.Getpid())), 0o600)
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "tiny", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "echo", Description: "Echo the text back.", InputSchema: map[string]any{
		"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}, "required": []string{"text"},
	}}, func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var a struct{ Text string }
		_ = json.Unmarshal(r.Params.Arguments, &a)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "tiny echo: " + a.Text}}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "env", Description: "The value of an environment variable.", InputSchema: map[string]any{
		"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}, "required": []string{"name"},
	}}, func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var a struct{ Name string }
		_ = json.Unmarshal(r.Params.Arguments, &a)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "tiny env: " + a.Name + "=" + os.Getenv(a.Name)}}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "crash", Description: "Exit mid-call.", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			os.Exit(3)
			return nil, nil
		})
	s.AddTool(&mcp.Tool{Name: "progress", Description: "Three steps of progress.", InputSchema: map[string]any{
		"type": "object", "properties": map[string]any{"gate": map[string]any{"type": "string"}}, "required": []string{"gate"},
	}}, func(ctx context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var a struct{ Gate string }
		_ = json.Unmarshal(r.Params.Arguments, &a)
		token := r.Params.GetProgressToken()
		if token == nil {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "no progress token"}}}, nil
		}
		for i := 1; i <= 3; i++ {
			if err := r.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(i), Total: 3, Message: fmt.Sprintf("step %d", i)}); err != nil {
				return nil, err
			}
			// Opening the FIFO waits for the test to open its other end.
			f, err := os.Open(a.Gate)
			if err != nil {
				return nil, err
			}
			_, _ = io.Copy(io.Discard, f)
			f.Close()
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "progress done"}}}, nil
	})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
