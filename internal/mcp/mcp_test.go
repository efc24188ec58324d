package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/tool"
)

// The test binary is also the MCP server the tests start over stdio:
// a real subprocess speaking the real protocol.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.Command {
		// The sandbox helper, as agentd itself is (see Options.SandboxExe).
		os.Exit(sandbox.Main(os.Args[2:], os.Stderr))
	}
	if os.Getenv("AGENTD_MCP_TEST_SERVER") == "exit-secret" {
		fmt.Fprintf(os.Stderr, "cannot log in with %s (OPENAI_API_KEY=%s)\n", os.Getenv("SERVICE_PASSWORD"), os.Getenv("OPENAI_API_KEY"))
		os.Exit(1)
	}
	if os.Getenv("AGENTD_MCP_TEST_SERVER") == "exit" {
		fmt.Fprintln(os.Stderr, "no configuration for this server")
		os.Exit(3)
	}
	if os.Getenv("AGENTD_MCP_TEST_SERVER") == "1" {
		if fifo := os.Getenv("AGENTD_MCP_TEST_FIFO"); fifo != "" {
			// Opening one end of a FIFO waits for the other end: a
			// server that answers only once its peer started too.
			flag := os.O_RDONLY
			if os.Getenv("AGENTD_MCP_TEST_FIFO_END") == "w" {
				flag = os.O_WRONLY
			}
			f, err := os.OpenFile(fifo, flag, 0)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			defer f.Close()
		}
		if os.Getenv("AGENTD_MCP_TEST_NOISY") != "" {
			// What servers print on stdout that is not a message: a
			// banner (with a secret), a JSON log line, JSON that is not
			// an object, a line cut short.
			fmt.Printf("starting server with token %s\n", os.Getenv("AGENTD_MCP_TEST_NOISY"))
			fmt.Println(`{"level":"info","msg":"listening on stdio"}`)
			fmt.Println(`[1,2,3]`)
			fmt.Println(`{"jsonrpc":"2.0","id":`)
			fmt.Println()
		}
		if err := testServer().Run(context.Background(), &sdk.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// testServer has tools that answer, fail, crash and hang, listed two to
// a page so listing has to follow cursors.
func testServer() *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "agentd-test", Version: "1"}, &sdk.ServerOptions{PageSize: 2})
	text := func(t string) *sdk.CallToolResult {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: t}}}
	}
	obj := map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}}
	s.AddTool(&sdk.Tool{Name: "echo", Description: "echoes text", InputSchema: obj}, func(_ context.Context, r *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		var a struct{ Text string }
		_ = json.Unmarshal(r.Params.Arguments, &a)
		return text("echo: " + a.Text), nil
	})
	if os.Getenv("AGENTD_MCP_TEST_EXTRA") == "1" {
		confineTools(s)
	}
	if os.Getenv("AGENTD_MCP_TEST_PROGRESS") != "" {
		progressTools(s)
	}
	if os.Getenv("AGENTD_MCP_TEST_NOISY") != "" {
		s.AddTool(&sdk.Tool{Name: "noisy", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			fmt.Println("debug: handling noisy")
			fmt.Println(`"a JSON string"`)
			return text("answered among noise"), nil
		})
	}
	s.AddTool(&sdk.Tool{Name: "image", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.ImageContent{Data: []byte("PNG"), MIMEType: "image/png"}}}, nil
	})
	s.AddTool(&sdk.Tool{Name: "fail", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "it went wrong"}}}, nil
	})
	s.AddTool(&sdk.Tool{Name: "big", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return text(strings.Repeat("x", 3*tool.MaxBytes)), nil
	})
	s.AddTool(&sdk.Tool{Name: "crash", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		os.Exit(3)
		return nil, nil
	})
	s.AddTool(&sdk.Tool{Name: "hang", InputSchema: map[string]any{"type": "object"}}, func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		<-ctx.Done()
		time.Sleep(time.Hour) // a server that ignores cancellation
		return nil, nil
	})
	return s
}

// confineTools are the tools the confinement tests call: the server's
// environment, and a write where it is told.
func confineTools(s *sdk.Server) {
	text := func(t string) *sdk.CallToolResult {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: t}}}
	}
	obj := map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}}
	s.AddTool(&sdk.Tool{Name: "env", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return text(strings.Join(os.Environ(), "\n")), nil
	})
	s.AddTool(&sdk.Tool{Name: "write", InputSchema: obj}, func(_ context.Context, r *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		var a struct{ Text string }
		_ = json.Unmarshal(r.Params.Arguments, &a)
		if err := os.WriteFile(a.Text, []byte("written by the MCP server"), 0o600); err != nil {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: err.Error()}}}, nil
		}
		return text("wrote " + a.Text), nil
	})
}

func stdioServer(t *testing.T) ServerConfig {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return ServerConfig{Name: "t", Command: exe, Env: map[string]string{"AGENTD_MCP_TEST_SERVER": "1"}}
}

func byName(tools []tool.Tool) map[string]tool.Tool {
	m := map[string]tool.Tool{}
	for _, t := range tools {
		m[t.Spec().Name] = t
	}
	return m
}

// TestStdioServerCallTimeout: a call that outlives --mcp-call-timeout is
// answered as timed out, the hung server is stopped, and the next call
// starts it again.
func TestStdioServerCallTimeout(t *testing.T) {
	m := New(Options{CallTimeout: time.Second})
	tools, stop, err := m.Start(context.Background(), []ServerConfig{stdioServer(t)}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ts := byName(tools)
	if r := call(t, ts["t__hang"], `{}`); !r.IsError || !strings.Contains(text(r), "timed out after 1s") {
		t.Fatalf("hang: %v %q", r.IsError, text(r))
	}
	if r := call(t, ts["t__echo"], `{"text":"after hang"}`); r.IsError || text(r) != "echo: after hang" {
		t.Fatalf("after hang: %v %q", r.IsError, text(r))
	}
}

func call(t *testing.T, tl tool.Tool, args string) tool.Result {
	t.Helper()
	return tl.Execute(context.Background(), tool.Call{ID: "c", Name: tl.Spec().Name, Args: json.RawMessage(args)}, nil)
}

func text(r tool.Result) string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

func TestStdioServerTools(t *testing.T) {
	// A call's timeout is generous here, so a loaded machine never trips
	// it; TestStdioServerCallTimeout checks the timeout itself.
	m := New(Options{CallTimeout: time.Minute})
	tools, stop, err := m.Start(context.Background(), []ServerConfig{stdioServer(t)}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ts := byName(tools)
	if len(ts) != 6 {
		t.Fatalf("listed %d tools (pagination?): %v", len(ts), ts)
	}
	echo := ts["t__echo"]
	if echo == nil || echo.Spec().Description != "echoes text" || !strings.Contains(string(echo.Spec().Parameters), `"text"`) {
		t.Fatalf("echo spec %+v", echo)
	}
	tests := []struct {
		tool, args string
		isError    bool
		want       string
	}{
		{"t__echo", `{"text":"hi"}`, false, "echo: hi"},
		{"t__fail", `{}`, true, "it went wrong"},
		{"t__big", `{}`, false, "[Output truncated"},
		{"t__crash", `{}`, true, "stopped during the call"},
	}
	for _, tt := range tests {
		r := call(t, ts[tt.tool], tt.args)
		if r.IsError != tt.isError || !strings.Contains(text(r), tt.want) {
			t.Fatalf("%s: error %v %q, want %v %q", tt.tool, r.IsError, text(r), tt.isError, tt.want)
		}
		if tt.tool == "t__big" && len(text(r)) > tool.MaxBytes+200 {
			t.Fatalf("big: %d bytes", len(text(r)))
		}
	}
	// The first restart is at once; a server that keeps dying is
	// restarted after a backoff.
	if r := call(t, echo, `{"text":"again"}`); r.IsError || text(r) != "echo: again" {
		t.Fatalf("after one crash: %v %q", r.IsError, text(r))
	}
	call(t, ts["t__crash"], `{}`)
	call(t, ts["t__crash"], `{}`)
	if r := call(t, echo, `{"text":"x"}`); !r.IsError || !strings.Contains(text(r), "restarted in") {
		t.Fatalf("during backoff: %v %q", r.IsError, text(r))
	}
	// The backoff is about a second: poll until the server is back
	// rather than sleep for it.
	deadline := time.Now().Add(time.Minute)
	for {
		r := call(t, echo, `{"text":"back"}`)
		if !r.IsError && text(r) == "echo: back" {
			break
		}
		if !strings.Contains(text(r), "restarted in") || time.Now().After(deadline) {
			t.Fatalf("after backoff: %v %q", r.IsError, text(r))
		}
		time.Sleep(50 * time.Millisecond)
	}
	img := call(t, ts["t__image"], `{}`)
	if len(img.Content) != 1 || img.Content[0].Type != llm.ContentImage || img.Content[0].Data != "UE5H" {
		t.Fatalf("image %+v", img.Content)
	}
}

func TestAServerThatFailsToStartIsNamedAndTheOthersServe(t *testing.T) {
	m := New(Options{StartTimeout: 5 * time.Second})
	tools, stop, err := m.Start(context.Background(), []ServerConfig{
		{Name: "broken", Command: "/nonexistent/mcp-server"}, stdioServer(t)}, t.TempDir())
	defer stop()
	if err == nil || !strings.Contains(err.Error(), "MCP server broken") {
		t.Fatalf("error %v", err)
	}
	if len(tools) != 6 {
		t.Fatalf("%d tools from the working server", len(tools))
	}
}

func TestHTTPServer(t *testing.T) {
	server := testServer()
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Token") != "secret" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	m := New(Options{CallTimeout: 5 * time.Second})
	tools, stop, err := m.Start(context.Background(), []ServerConfig{{Name: "web", URL: srv.URL, Headers: map[string]string{"X-Token": "secret"}}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if r := call(t, byName(tools)["web__echo"], `{"text":"over http"}`); r.IsError || text(r) != "echo: over http" {
		t.Fatalf("%v %q", r.IsError, text(r))
	}
	_, stop2, err := m.Start(context.Background(), []ServerConfig{{Name: "nokey", URL: srv.URL}}, t.TempDir())
	stop2()
	if err == nil || !strings.Contains(err.Error(), "MCP server nokey") {
		t.Fatalf("without the header: %v", err)
	}
}

func TestParseConfig(t *testing.T) {
	got, err := ParseConfig([]byte(`{"mcpServers":{"b":{"url":"http://127.0.0.1:1/mcp","headers":{"A":"1"}},"a":{"command":"srv","args":["-x"],"env":{"K":"V"}}}}`))
	if err != nil || len(got) != 2 || got[0].Name != "a" || got[0].Command != "srv" || got[1].URL == "" || got[1].Headers["A"] != "1" {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []string{`{"mcpServers":{"x":{}}}`, `{"mcpServers":{"x":{"command":"a","url":"b"}}}`, `{"mcpServers":[]}`} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// A server that does not answer within the start timeout is stopped, and
// the error says what happened and what to do, not 'context deadline
// exceeded'.
func TestAServerTooSlowToStartSaysWhatToDo(t *testing.T) {
	m := New(Options{StartTimeout: 300 * time.Millisecond})
	_, stop, err := m.Start(context.Background(), []ServerConfig{{Name: "slow", Command: "/bin/sleep", Args: []string{"60"}}}, t.TempDir())
	defer stop()
	for _, want := range []string{"MCP server slow", "did not list its tools within 300ms", "npx -y", "--mcp-start-timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want it to say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "deadline exceeded") {
		t.Fatalf("error %v", err)
	}
}
