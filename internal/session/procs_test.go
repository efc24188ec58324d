//go:build linux

package session_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/tool"
)

// supervised makes the session's tools and commands run under the test
// binary as process supervisor, sharing one Scope as cli wires them.
func supervised(t *testing.T) func(*session.Config) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return func(c *session.Config) {
		env := tool.Env{Cwd: c.Cwd, TempDir: t.TempDir(), Locks: &tool.FileLocks{},
			// GORACE: a -race supervisor would sleep a second at exit.
			Environ:    []string{"PATH=" + os.Getenv("PATH"), "GORACE=atexit_sleep_ms=0"},
			Supervisor: []string{exe, tool.SuperviseCommand}, Scope: tool.NewScope()}
		c.Tools, c.BashEnv = tool.Builtins(env), env
	}
}

// pidIn waits for a file holding one pid.
func pidIn(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // if the test fails
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func running(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func waitGone(t *testing.T, what string, pid int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for running(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) still running", what, pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCloseEndsWhatCommandsLeft: a setsid'd process the model's bash
// started (with background set) and one the user's command started keep
// running after their calls returned, and end when the session closes;
// the output files go with it.
func TestCloseEndsWhatCommandsLeft(t *testing.T) {
	h := newHarness(t, supervised(t))
	escape := func(file string) string {
		return fmt.Sprintf("setsid sh -c 'echo $$ > %s; exec sleep 300' >/dev/null 2>&1 &", file)
	}
	h.srv.Handle(func(r *wiremock.Request) wiremock.Script {
		if strings.HasPrefix(lastUserText(r), "TOOL:") {
			return wiremock.Script{Text: []string{"started"}}
		}
		args := fmt.Sprintf(`{"command":%q,"background":true}`, escape("tool-pid"))
		return wiremock.Script{ToolCalls: []wiremock.ToolCall{{ID: "c1", Name: "bash", Args: []string{args}}}}
	})
	h.prompt("start a server")
	h.wait()
	toolPid := pidIn(t, filepath.Join(h.cwd, "tool-pid"))

	m, err := h.s.Bash(context.Background(), escape("user-pid")+" seq 1 5000", false)
	if err != nil {
		t.Fatal(err)
	}
	userPid := pidIn(t, filepath.Join(h.cwd, "user-pid"))
	if !m.Truncated || m.FullOutputPath == "" {
		t.Fatalf("bash message %+v", m)
	}
	if !running(toolPid) || !running(userPid) {
		t.Fatal("background processes ended with their calls")
	}
	if err := h.s.Close(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "the tool's setsid'd process", toolPid)
	waitGone(t, "the user command's setsid'd process", userPid)
	if _, err := os.Stat(m.FullOutputPath); !os.IsNotExist(err) {
		t.Fatalf("output file %s still there after Close: %v", m.FullOutputPath, err)
	}
}

// TestUserBashTimesOut: a command the user runs ends at the session's
// bash timeout, with everything it started, and is recorded as
// cancelled with a line saying why. The timeout has to outlast starting
// the setsid'd process it should take down; on a busy machine 300 ms
// may not, so a run whose process never started is repeated with a
// longer timeout instead of failing (or passing without checking).
func TestUserBashTimesOut(t *testing.T) {
	for timeout := 300 * time.Millisecond; ; timeout *= 4 {
		if timeout > 80*time.Second {
			t.Fatal("the command never started its background process before its timeout")
		}
		h := newHarness(t, func(c *session.Config) {
			supervised(t)(c)
			c.BashTimeout = timeout
		})
		cmd := "echo started; setsid sh -c 'echo $$ > pid.tmp && mv pid.tmp pid; exec sleep 300' >/dev/null 2>&1 & sleep 300"
		done := make(chan *llm.Message, 1)
		go func() {
			m, err := h.s.Bash(context.Background(), cmd, false)
			if err != nil {
				t.Error(err)
			}
			done <- m
		}()
		var m *llm.Message
		select {
		case m = <-done:
		case <-time.After(timeout + time.Minute):
			t.Fatal("Bash did not return at its timeout")
		}
		want := "started\nCommand timed out after " + strconv.FormatFloat(timeout.Seconds(), 'f', -1, 64) + " seconds"
		if m == nil || !m.Cancelled || (m.Output != want && m.Output != strings.TrimPrefix(want, "started\n")) {
			t.Fatalf("bash message %+v, want output %q", m, want)
		}
		if _, err := os.Stat(filepath.Join(h.cwd, "pid")); err != nil {
			t.Logf("the background process had not started within %v; again with a longer timeout", timeout)
			continue
		}
		if m.Output != want {
			t.Fatalf("bash output %q, want %q", m.Output, want)
		}
		pid := pidIn(t, filepath.Join(h.cwd, "pid"))
		waitGone(t, "the command's setsid'd process", pid)
		return
	}
}
