package mcp

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentd-dev/agentd/internal/tool"
)

// progressTools adds "progress", which notifies three steps of progress
// and answers, and "release", which lets it go on after each step: the
// test releases a step only once it saw its update, so an update that
// does not arrive while the call runs hangs the test instead of
// passing by luck.
func progressTools(s *sdk.Server) {
	release := make(chan struct{})
	obj := map[string]any{"type": "object"}
	s.AddTool(&sdk.Tool{Name: "progress", InputSchema: obj}, func(ctx context.Context, r *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		token := r.Params.GetProgressToken()
		if token == nil {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "done without a progress token"}}}, nil
		}
		for i := 1; i <= 3; i++ {
			if err := r.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: float64(i), Total: 3, Message: fmt.Sprintf("step %d", i)}); err != nil {
				return nil, err
			}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "done"}}}, nil
	})
	s.AddTool(&sdk.Tool{Name: "release", InputSchema: obj}, func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		select {
		case release <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "released"}}}, nil
	})
}

// A server's notifications/progress for a call become the call's tool
// updates while it runs, over stdio and streamable HTTP; a call nobody
// takes updates of carries no progress token.
func TestProgressBecomesToolUpdates(t *testing.T) {
	srv := testServer()
	progressTools(srv)
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	defer hs.Close()
	stdio := stdioServer(t)
	stdio.Env["AGENTD_MCP_TEST_PROGRESS"] = "1"
	for _, cfg := range []ServerConfig{stdio, {Name: "t", URL: hs.URL}} {
		t.Run(map[bool]string{true: "stdio", false: "http"}[cfg.URL == ""], func(t *testing.T) {
			m := New(Options{StartTimeout: 20 * time.Second, CallTimeout: 20 * time.Second})
			tools, stop, err := m.Start(context.Background(), []ServerConfig{cfg}, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			ts := byName(tools)
			var updates []tool.Result
			res := ts["t__progress"].Execute(context.Background(), tool.Call{ID: "p", Name: "t__progress", Args: []byte(`{}`)}, func(r tool.Result) {
				updates = append(updates, r)
				if r := call(t, ts["t__release"], `{}`); r.IsError {
					t.Errorf("release: %q", text(r))
				}
			})
			if res.IsError || text(res) != "done" {
				t.Fatalf("result %v %q", res.IsError, text(res))
			}
			if len(updates) != 3 {
				t.Fatalf("%d updates: %+v", len(updates), updates)
			}
			for i, u := range updates {
				want := fmt.Sprintf("Progress %d/3: step %d", i+1, i+1)
				d, _ := u.Details.(ProgressDetails)
				if text(u) != want || u.IsError || d != (ProgressDetails{Progress: float64(i + 1), Total: 3, Message: fmt.Sprintf("step %d", i+1)}) {
					t.Fatalf("update %d: %q %+v, want %q", i, text(u), u.Details, want)
				}
			}
			if r := call(t, ts["t__progress"], `{}`); r.IsError || text(r) != "done without a progress token" {
				t.Fatalf("without updates: %v %q", r.IsError, text(r))
			}
		})
	}
}

func TestProgressResult(t *testing.T) {
	long := make([]byte, 2000)
	for i := range long {
		long[i] = 'x'
	}
	tests := []struct {
		n    sdk.ProgressNotificationParams
		want string
	}{
		{sdk.ProgressNotificationParams{Progress: 2, Total: 3, Message: "copying"}, "Progress 2/3: copying"},
		{sdk.ProgressNotificationParams{Progress: 0.5}, "Progress 0.5"},
		{sdk.ProgressNotificationParams{Progress: 7, Message: "lines"}, "Progress 7: lines"},
		{sdk.ProgressNotificationParams{Progress: 1, Message: "é" + string(long)}, "Progress 1: é" + string(long[:maxProgressMessage-2]) + "…"},
	}
	for _, tt := range tests {
		if got := text(progressResult(&tt.n)); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.n, got, tt.want)
		}
	}
}
