package mcp

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// A server that adds a tool and says its list changed: the Set fetches
// the list again (two to a page, so every page) and tells its watchers,
// and the new tool can be called.
func TestToolListChanged(t *testing.T) {
	srv := testServer()
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	hs := httptest.NewServer(h)
	defer hs.Close()
	set := New(Options{CallTimeout: 5 * time.Second}).Open(context.Background(), []ServerConfig{{Name: "web", URL: hs.URL}}, t.TempDir())
	defer set.Close()
	if err := set.Err(); err != nil {
		t.Fatal(err)
	}
	if n := len(set.Tools()); n != 6 {
		t.Fatalf("%d tools at start", n)
	}
	changed := make(chan struct{}, 8)
	stop := set.Watch(func() { changed <- struct{}{} })
	defer stop()
	srv.AddTool(&sdk.Tool{Name: "added", Description: "added later", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "new tool"}}}, nil
		})
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher was not told of the change")
	}
	ts := byName(set.Tools())
	if len(ts) != 7 || ts["web__added"] == nil || ts["web__added"].Spec().Description != "added later" {
		t.Fatalf("after the change: %v", ts)
	}
	if r := call(t, ts["web__added"], `{}`); r.IsError || text(r) != "new tool" {
		t.Fatalf("calling the new tool: %v %q", r.IsError, text(r))
	}
	srv.RemoveTools("added", "hang")
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher was not told of the removal")
	}
	if ts := byName(set.Tools()); len(ts) != 5 || ts["web__added"] != nil || ts["web__hang"] != nil {
		t.Fatalf("after the removal: %v", ts)
	}
}

// A server that cannot start is in the Set as an error naming it and
// the cause; the others serve.
func TestServersThatFailToStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String() + "/mcp"
	ln.Close()
	exits := stdioServer(t)
	exits.Name, exits.Env = "exits", map[string]string{"AGENTD_MCP_TEST_SERVER": "exit"}
	tests := []struct {
		cfg  ServerConfig
		want []string
	}{
		{ServerConfig{Name: "badcmd", Command: "/nonexistent/mcp-server"}, []string{"MCP server badcmd failed to start", "/nonexistent/mcp-server", "no such file"}},
		{exits, []string{"MCP server exits failed to start", "exited with status 3 before listing its tools", "see the agentd log"}},
		{ServerConfig{Name: "refused", URL: refused}, []string{"MCP server refused failed to start", "connection refused"}},
		{ServerConfig{Name: "neither"}, []string{"MCP server neither failed to start", "needs a command or a url"}},
	}
	for _, tt := range tests {
		t.Run(tt.cfg.Name, func(t *testing.T) {
			set := New(Options{StartTimeout: 10 * time.Second}).Open(context.Background(), []ServerConfig{tt.cfg, stdioServer(t)}, t.TempDir())
			defer set.Close()
			un := set.Unavailable()
			if len(un) != 1 || un[0].Source != "mcp:"+tt.cfg.Name {
				t.Fatalf("unavailable %+v", un)
			}
			for _, w := range tt.want {
				if !strings.Contains(un[0].Error, w) || !strings.Contains(set.Err().Error(), w) {
					t.Errorf("%q does not say %q", un[0].Error, w)
				}
			}
			if n := len(set.Tools()); n != 6 {
				t.Fatalf("%d tools from the server that works", n)
			}
		})
	}
}

// A lazy Set runs nothing until Start: no request reaches the server
// before, Start brings the tools and tells the watchers, a second Start
// does nothing, and a Set closed before Start never starts.
func TestOpenLazy(t *testing.T) {
	var requests atomic.Int64
	srv := testServer()
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		h.ServeHTTP(w, r)
	}))
	defer hs.Close()
	m := New(Options{CallTimeout: 5 * time.Second})
	set := m.OpenLazy([]ServerConfig{{Name: "web", URL: hs.URL}}, t.TempDir())
	defer set.Close()
	changed := make(chan struct{}, 8)
	defer set.Watch(func() { changed <- struct{}{} })()
	if n := len(set.Tools()); n != 0 || set.Started() || set.Err() != nil || requests.Load() != 0 {
		t.Fatalf("before Start: %d tools, started %v, err %v, %d requests", n, set.Started(), set.Err(), requests.Load())
	}
	set.Start(context.Background())
	if n := len(set.Tools()); n != 6 || !set.Started() {
		t.Fatalf("after Start: %d tools, started %v (%v)", n, set.Started(), set.Err())
	}
	select {
	case <-changed:
	default:
		t.Fatal("the watchers were not told of the tools Start brought")
	}
	before := requests.Load()
	set.Start(context.Background())
	if requests.Load() != before || len(changed) != 0 {
		t.Fatal("a second Start started the servers again")
	}
	if r := call(t, byName(set.Tools())["web__echo"], `{"text":"lazy"}`); r.IsError {
		t.Fatalf("calling a tool of the started Set: %q", text(r))
	}

	closed := m.OpenLazy([]ServerConfig{{Name: "web", URL: hs.URL}}, t.TempDir())
	closed.Close()
	before = requests.Load()
	closed.Start(context.Background())
	if requests.Load() != before || len(closed.Tools()) != 0 {
		t.Fatal("a closed Set started its servers")
	}
}

// A Start whose caller gives up (a run aborted while the servers of an
// auto_start false conversation start, a client that hung up on the
// PATCH naming their tools) leaves the servers to the next Start: they
// are not failed for good with the caller's context error.
func TestStartCancelledByItsCallerIsTriedAgain(t *testing.T) {
	srv := testServer()
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	hs := httptest.NewServer(h)
	defer hs.Close()
	set := New(Options{CallTimeout: 5 * time.Second}).OpenLazy([]ServerConfig{{Name: "web", URL: hs.URL}, stdioServer(t)}, t.TempDir())
	defer set.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	set.Start(ctx)
	if set.Started() || len(set.Unavailable()) != 0 {
		t.Fatalf("after a cancelled Start: started %v, unavailable %+v", set.Started(), set.Unavailable())
	}
	set.Start(context.Background())
	if n := len(set.Tools()); n != 12 || !set.Started() || set.Err() != nil {
		t.Fatalf("after Start again: %d tools, started %v, err %v", n, set.Started(), set.Err())
	}
	if r := call(t, byName(set.Tools())["web__echo"], `{"text":"again"}`); r.IsError {
		t.Fatalf("calling a tool of the Set started again: %q", text(r))
	}
}

// Start tells the watchers once it holds nothing: a watcher may call
// back into the Set, even close it, without waiting on the Start that
// called it.
func TestWatcherMayCloseTheSetStartTells(t *testing.T) {
	srv := testServer()
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	set := New(Options{CallTimeout: 5 * time.Second}).OpenLazy([]ServerConfig{{Name: "web", URL: hs.URL}}, t.TempDir())
	unwatch := set.Watch(set.Close)
	started := make(chan struct{})
	go func() {
		defer close(started)
		set.Start(context.Background())
	}()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		// Nothing deferred: closing the Set, or the server it holds a
		// session with, would wait as the watcher does.
		t.Fatal("Start still waits for a watcher that closes the Set")
	}
	unwatch()
	set.Close()
	hs.Close()
}

// A server that failed for good in a Start its caller then gave up stays
// failed: the next Start starts only the servers the first did not get
// to, not that one again (which, up on a second try, ran beside its
// error and was never stopped by Close).
func TestStartCancelledByItsCallerKeepsFailures(t *testing.T) {
	srv := testServer()
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	// flaky exits at its first start and serves at any later one.
	flaky := stdioServer(t)
	marker := filepath.Join(t.TempDir(), "tried")
	flaky.Name, flaky.Args, flaky.Command = "flaky", []string{"-c", `[ -e "$1" ] && exec "$0"; : > "$1"; exit 3`, flaky.Command, marker}, "/bin/sh"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var gaveUp atomic.Bool
	// The servers start side by side: the caller gives up only once
	// flaky failed (on its own), which its log line says.
	flakyFailed := make(chan struct{})
	logs := &signalWriter{want: `msg="MCP server ended before it answered" server=flaky`, seen: flakyFailed}
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !gaveUp.Swap(true) {
			<-flakyFailed
			cancel() // the caller gives up while this server starts
			http.Error(w, "gave up", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer closeServer(web)
	set := New(Options{CallTimeout: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(logs, nil))}).OpenLazy([]ServerConfig{flaky, {Name: "web", URL: web.URL}}, t.TempDir())
	defer set.Close()
	set.Start(ctx)
	if set.Started() || len(set.Unavailable()) != 1 {
		t.Fatalf("after a Start whose caller gave up: started %v, unavailable %+v", set.Started(), set.Unavailable())
	}
	set.Start(context.Background())
	un := set.Unavailable()
	if n := len(set.Tools()); n != 6 || !set.Started() || len(un) != 1 || un[0].Source != "mcp:flaky" {
		t.Fatalf("after Start again: %d tools, started %v, unavailable %+v", n, set.Started(), un)
	}
}

// signalWriter closes seen at the first log record that has want.
type signalWriter struct {
	want string
	seen chan struct{}
	once sync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// closeServer closes ts past the event streams its MCP clients keep open.
func closeServer(ts *httptest.Server) {
	ts.CloseClientConnections()
	ts.Close()
}

// Offers names the tools a Set's servers may have before any started.
func TestSetOffers(t *testing.T) {
	set := New(Options{}).OpenLazy([]ServerConfig{{Name: "web", URL: "http://127.0.0.1:1/"}, {Name: "my.fs", Command: "/nonexistent"}}, t.TempDir())
	defer set.Close()
	for name, want := range map[string]bool{"web__echo": true, "my_fs__read": true, "web_echo": false, "webx__echo": false, "read": false} {
		if got := set.Offers(name); got != want {
			t.Errorf("Offers(%q) = %v, want %v", name, got, want)
		}
	}
	if set.Started() {
		t.Fatal("Offers started the servers")
	}
}
