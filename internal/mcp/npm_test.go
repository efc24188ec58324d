package mcp

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/tool"
)

// npmServer is the command of an MCP server installed from npm in the
// node_modules directory AGENTD_MCP_NODE_MODULES names; the test skips
// without it or without node.
func npmServer(t *testing.T, pkg, script string) string {
	t.Helper()
	dir := os.Getenv("AGENTD_MCP_NODE_MODULES")
	if dir == "" {
		t.Skip("AGENTD_MCP_NODE_MODULES is not set: run `npm install --prefix DIR @modelcontextprotocol/server-everything@2026.8.31 @modelcontextprotocol/server-filesystem@2026.8.31` and set it to DIR/node_modules")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not on PATH")
	}
	p := filepath.Join(dir, pkg, script)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("AGENTD_MCP_NODE_MODULES=%s has no %s: %v", dir, pkg, err)
	}
	return p
}

// The reference servers from npm: server-everything's echo and an
// error, server-filesystem reading a file in its allowed directory and
// refusing one outside.
func TestNPMReferenceServers(t *testing.T) {
	everything := npmServer(t, "@modelcontextprotocol/server-everything", "dist/index.js")
	filesystem := npmServer(t, "@modelcontextprotocol/server-filesystem", "dist/index.js")
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "note.txt"), []byte("from the filesystem server"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := New(Options{Environ: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, StartTimeout: 60 * time.Second})
	tools, stop, err := m.Start(context.Background(), []ServerConfig{
		{Name: "everything", Command: "node", Args: []string{everything, "stdio"}},
		{Name: "fs", Command: "node", Args: []string{filesystem, root}},
	}, root)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ts := byName(tools)
	var names []string
	for n := range ts {
		names = append(names, n)
	}
	t.Logf("%d tools: %s", len(names), strings.Join(names, " "))
	// server-everything registers some tools once the client is
	// initialized and announces them with tools/list_changed, racing the
	// first tools/list; whichever comes first, the Set ends up with them.
	if ts["everything__get-roots-list"] == nil || ts["everything__simulate-research-query"] == nil {
		t.Fatalf("the tools server-everything adds after initialization are missing: %v", names)
	}
	echo := ts["everything__echo"]
	if echo == nil {
		t.Fatalf("no echo among %v", names)
	}
	if r := call(t, echo, `{"message":"hello npm"}`); r.IsError || !strings.Contains(text(r), "hello npm") {
		t.Fatalf("echo: %v %q", r.IsError, text(r))
	}
	if r := call(t, echo, `{"message":42}`); !r.IsError {
		t.Fatalf("echo with a bad argument: %q", text(r))
	}
	img := call(t, ts["everything__get-tiny-image"], `{}`)
	hasImage := false
	for _, c := range img.Content {
		hasImage = hasImage || c.Type == llm.ContentImage && c.MimeType == "image/png" && c.Data != ""
	}
	if img.IsError || !hasImage {
		t.Fatalf("tiny image: %+v", img)
	}
	read := ts["fs__read_text_file"]
	if read == nil {
		read = ts["fs__read_file"]
	}
	if read == nil {
		t.Fatalf("no read tool among %v", names)
	}
	if r := call(t, read, `{"path":"`+filepath.Join(root, "note.txt")+`"}`); r.IsError || !strings.Contains(text(r), "from the filesystem server") {
		t.Fatalf("read: %v %q", r.IsError, text(r))
	}
	if r := call(t, read, `{"path":"/etc/hostname"}`); !r.IsError {
		t.Fatalf("read outside the allowed directory: %q", text(r))
	}
}

// server-everything's long-running operation notifies progress after
// each step: the steps reach the caller as tool updates while the call
// runs. The last step's notification leaves right before the answer and
// may be superseded by it; the earlier ones are half a second ahead.
func TestNPMEverythingProgress(t *testing.T) {
	everything := npmServer(t, "@modelcontextprotocol/server-everything", "dist/index.js")
	m := New(Options{Environ: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, StartTimeout: 60 * time.Second, CallTimeout: 60 * time.Second})
	tools, stop, err := m.Start(context.Background(), []ServerConfig{{Name: "everything", Command: "node", Args: []string{everything, "stdio"}}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	long := byName(tools)["everything__trigger-long-running-operation"]
	if long == nil {
		t.Fatal("no trigger-long-running-operation")
	}
	var updates []string
	res := long.Execute(context.Background(), tool.Call{ID: "l", Name: long.Spec().Name, Args: []byte(`{"duration":2,"steps":4}`)}, func(r tool.Result) {
		updates = append(updates, text(r))
	})
	if res.IsError || !strings.Contains(text(res), "Long running operation completed") {
		t.Fatalf("result %v %q", res.IsError, text(res))
	}
	t.Logf("%d updates: %q", len(updates), updates)
	if len(updates) == 0 {
		t.Fatal("no progress reached the caller")
	}
	// Progress supersedes itself: a step may be replaced by the next
	// before it was taken, never come back.
	last := 0
	for i, u := range updates {
		var k int
		if _, err := fmt.Sscanf(u, "Progress %d/4", &k); err != nil || k <= last || k > 4 {
			t.Fatalf("update %d is %q", i, u)
		}
		last = k
	}
}
