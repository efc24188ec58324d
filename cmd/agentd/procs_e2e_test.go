//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// procsGuard bounds the waits for processes to appear and to go; the
// tests assert that they go, not how fast.
const procsGuard = 30 * time.Second

func procsPid(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(procsGuard)
	for {
		b, _ := os.ReadFile(path)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // if the test fails
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func procsRunning(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestKilledAgentdTakesItsProcessesAlong: the model's bash call starts a
// setsid'd sleeper (out of the shell's process group and session) and
// returns; agentd is killed with SIGKILL, which no code of it sees. The
// sleeper must still go.
func TestKilledAgentdTakesItsProcessesAlong(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	p := e.start("--no-session")
	pidFile := filepath.Join(e.root, "sleeper-pid")
	cmd := fmt.Sprintf("setsid sh -c 'echo $$ > %s; exec sleep 300' >/dev/null 2>&1 & echo started", pidFile)
	// The call asks to keep what it leaves in the background.
	e.tweak("CMD:"+cmd, func(s *wiremock.Script) {
		u := s.Usage
		*s = e2eToolScript("bash", map[string]any{"command": cmd, "background": true})
		s.Usage = u
	})
	p.ok(fmt.Sprintf(`{"id":"p1","type":"prompt","message":%q}`, "CMD:"+cmd))
	te := p.event("tool_execution_end")
	if txt := e2eStr(te, "result", "content", "0", "text"); txt != "started\n" {
		p.fatalf("tool result %q", txt)
	}
	pid := procsPid(t, pidFile)
	if !procsRunning(pid) {
		t.Fatal("the sleeper ended with the call; it should live while the session does")
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	deadline := time.Now().Add(procsGuard)
	for procsRunning(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the setsid'd sleeper (pid %d) outlived agentd", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStartupRemovesOutputOfDeadAgentd: a bash result too big for the
// context leaves its full output in TMPDIR; agentd is killed before it
// can clean up, and the next agentd removes what the dead one left.
func TestStartupRemovesOutputOfDeadAgentd(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	p := e.start("--no-session")
	b := p.ok(`{"id":"b1","type":"bash","command":"seq 1 5000"}`)
	full := e2eStr(b, "data", "fullOutputPath")
	if _, err := os.Stat(full); err != nil || !strings.HasPrefix(full, e.tmp) {
		t.Fatalf("full output %q: %v", full, err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	if _, err := os.Stat(full); err != nil {
		t.Fatalf("a killed agentd cannot have removed %s: %v", full, err)
	}

	next := e.start("--no-session")
	next.ok(`{"id":"s1","type":"get_state"}`) // started up
	if _, err := os.Stat(filepath.Dir(full)); !os.IsNotExist(err) {
		t.Fatalf("the dead agentd's output %s is still there: %v", filepath.Dir(full), err)
	}
	// The live one's own files are left alone, and go when it exits.
	b = next.ok(`{"id":"b2","type":"bash","command":"seq 1 5000"}`)
	mine := e2eStr(b, "data", "fullOutputPath")
	if _, err := os.Stat(mine); err != nil {
		t.Fatal(err)
	}
	next.close()
	if _, err := os.Stat(filepath.Dir(mine)); !os.IsNotExist(err) {
		t.Fatalf("output %s left after a clean exit: %v", mine, err)
	}
}
