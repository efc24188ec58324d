//go:build unix

package mcp

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A Set's servers start side by side: here each answers only once the
// other started (they open the two ends of a FIFO), which one after the
// other would never do, so a server that never answers holds a session
// for one start timeout, not one per server.
func TestServersStartSideBySide(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "rendezvous")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	a, b := stdioServer(t), stdioServer(t)
	a.Name, b.Name = "a", "b"
	a.Env["AGENTD_MCP_TEST_FIFO"], b.Env["AGENTD_MCP_TEST_FIFO"] = fifo, fifo
	a.Env["AGENTD_MCP_TEST_FIFO_END"], b.Env["AGENTD_MCP_TEST_FIFO_END"] = "r", "w"
	set := New(Options{StartTimeout: 30 * time.Second}).Open(context.Background(), []ServerConfig{a, b}, t.TempDir())
	defer set.Close()
	if err := set.Err(); err != nil {
		t.Fatal(err)
	}
	if ts := byName(set.Tools()); ts["a__echo"] == nil || ts["b__echo"] == nil {
		t.Fatalf("tools %v", ts)
	}
}
