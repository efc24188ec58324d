//go:build unix

package mcp

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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

// OpenBackground returns at once: a server that answers is ready (its
// tools told to the watchers) while another has not answered yet,
// which Unavailable names as starting until it does.
func TestOpenBackgroundHoldsNobody(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "gate")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	quick, gated := stdioServer(t), stdioServer(t)
	quick.Name, gated.Name = "quick", "gated"
	// gated answers only once the test opens the FIFO's other end.
	gated.Env["AGENTD_MCP_TEST_FIFO"], gated.Env["AGENTD_MCP_TEST_FIFO_END"] = fifo, "r"
	set := New(Options{StartTimeout: 60 * time.Second, CallTimeout: 20 * time.Second}).OpenBackground([]ServerConfig{gated, quick}, t.TempDir())
	defer set.Close()
	changed := make(chan struct{}, 1)
	defer set.Watch(func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	})()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-changed:
			case <-time.After(30 * time.Second):
				t.Fatalf("never: %s (tools %v, unavailable %+v)", what, byName(set.Tools()), set.Unavailable())
			}
		}
	}
	waitFor("quick's tools", func() bool { return byName(set.Tools())["quick__echo"] != nil })
	if r := call(t, byName(set.Tools())["quick__echo"], `{"text":"early"}`); r.IsError || text(r) != "echo: early" {
		t.Fatalf("quick while gated starts: %v %q", r.IsError, text(r))
	}
	un := set.Unavailable()
	if len(un) != 1 || un[0].Source != "mcp:gated" || !strings.Contains(un[0].Error, "is starting") || set.Started() || set.Err() != nil {
		t.Fatalf("while gated starts: unavailable %+v, started %v, err %v", un, set.Started(), set.Err())
	}
	if ts := byName(set.Tools()); ts["gated__echo"] != nil {
		t.Fatalf("gated has tools before it answered: %v", ts)
	}
	gate, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Close()
	waitFor("gated's tools and the start's end", func() bool {
		return byName(set.Tools())["gated__echo"] != nil && set.Started() && len(set.Unavailable()) == 0
	})
	if r := call(t, byName(set.Tools())["gated__echo"], `{"text":"late"}`); r.IsError || text(r) != "echo: late" {
		t.Fatalf("gated: %v %q", r.IsError, text(r))
	}
}

// Closing a Set whose servers start in the background stops the start
// under way and what it started.
func TestOpenBackgroundClosedWhileStarting(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "never")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	never := stdioServer(t)
	never.Env["AGENTD_MCP_TEST_FIFO"], never.Env["AGENTD_MCP_TEST_FIFO_END"] = fifo, "r"
	set := New(Options{StartTimeout: time.Hour}).OpenBackground([]ServerConfig{never}, t.TempDir())
	if un := set.Unavailable(); len(un) != 1 || !strings.Contains(un[0].Error, "is starting") {
		t.Fatalf("unavailable %+v", un)
	}
	set.Close()
	if len(set.Tools()) != 0 {
		t.Fatalf("tools after Close: %v", set.Tools())
	}
}
