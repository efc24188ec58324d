package mcp

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentd-dev/agentd/internal/tool"
)

// The cost of one MCP tool call (a round trip to a stdio server) beside
// a built-in tool's, both called as the agent calls them.
func BenchmarkToolCall(b *testing.B) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte("x"), 0o600); err != nil {
		b.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	tools, stop, err := New(Options{}).Start(context.Background(), []ServerConfig{{Name: "t", Command: exe, Env: map[string]string{"AGENTD_MCP_TEST_SERVER": "1"}}}, dir)
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	ls, err := tool.New("ls", tool.Env{Cwd: dir})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		t    tool.Tool
		args string
	}{
		{"mcp-echo", byName(tools)["t__echo"], `{"text":"hi"}`},
		{"builtin-ls", ls, `{}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			call := tool.Call{ID: "c", Name: bc.t.Spec().Name, Args: []byte(bc.args)}
			for b.Loop() {
				if r := bc.t.Execute(context.Background(), call, nil); r.IsError {
					b.Fatal(r.Content)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/call")
		})
	}
}
