//go:build linux

package tool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd-dev/agentd/internal/proclimit"
	"github.com/agentd-dev/agentd/internal/sandbox"
)

// runKeep runs command as the bash tool does with background set, and
// as RunBash does: its background jobs outlive the call.
func runKeep(env Env, command string) BashRun {
	return runBashUnder(context.Background(), env.normalize(), sandbox.Policy{Mode: sandbox.FullAccess}, command, 0, true, nil)
}

// procModes are the two ways the supervisor can hold a run: a cgroup
// (where the system offers a writable one; elsewhere this mode falls back
// to the other) and its subtree alone.
var procModes = []struct {
	name   string
	cgroup bool
}{{"cgroup", true}, {"subtree", false}}

// escapeNames are the ways a process leaves the shell's process group:
// setsid, a double fork (orphaned to the nearest subreaper or init), a
// nohup background job, and a job in a process group of its own.
var escapeNames = []string{"setsid", "double-fork", "nohup", "new-group"}

// escapeCommand starts one process per escape, each recording "name pid"
// in pidFile (the shell records itself as "shell"), waits until all have
// done so and then, with hold, keeps running.
func escapeCommand(t *testing.T, dir, pidFile string, hold bool) string {
	t.Helper()
	for _, name := range []string{"setsid", "nohup"} {
		if _, err := exec.LookPath(name); err != nil {
			t.Skipf("no %s here", name)
		}
	}
	rec := filepath.Join(dir, "rec.sh")
	writeFile(t, rec, fmt.Sprintf("echo \"$1 $$\" >> %q\nexec sleep 300\n", pidFile))
	cmd := fmt.Sprintf(`echo "shell $$" >> %[1]q
setsid sh %[2]q setsid &
( sh %[2]q double-fork & )
nohup sh %[2]q nohup >/dev/null 2>&1 &
set -m; sh %[2]q new-group & set +m
while [ "$(wc -l < %[1]q)" -lt 5 ]; do sleep 0.01; done
`, pidFile, rec)
	if hold {
		cmd += "sleep 300\n"
	}
	return cmd
}

// readEscapes waits for the shell and every escape to record its pid.
func readEscapes(t *testing.T, pidFile string) map[string]int {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for {
		b, _ := os.ReadFile(pidFile)
		got := map[string]int{}
		for _, line := range strings.Split(string(b), "\n") {
			name, p, ok := strings.Cut(line, " ")
			if pid, err := strconv.Atoi(p); ok && err == nil {
				got[name] = pid
			}
		}
		if len(got) == len(escapeNames)+1 {
			pids := make([]int, 0, len(got))
			for _, p := range got {
				pids = append(pids, p)
			}
			killAtCleanup(t, pids...) // only matters if the test fails
			checkEscaped(t, got)
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("escapes did not all start: %q", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkEscaped makes sure the escapes did leave the shell's process
// group, so the tests test what they claim.
func checkEscaped(t *testing.T, pids map[string]int) {
	t.Helper()
	field := func(pid, i int) string {
		f, ok := statFields(pid)
		if !ok || len(f) <= i {
			return ""
		}
		return f[i]
	}
	const pgrp, session = 2, 3
	shell := pids["shell"]
	if s := field(pids["setsid"], session); s == "" || s == field(shell, session) {
		t.Fatalf("setsid: session %q, the shell's is %q", s, field(shell, session))
	}
	if g := field(pids["new-group"], pgrp); g == "" || g == field(shell, pgrp) {
		t.Fatalf("new-group: group %q, the shell's is %q", g, field(shell, pgrp))
	}
}

// waitAllDead fails, naming the survivors, unless every process is gone
// within hangGuard.
func waitAllDead(t *testing.T, pids map[string]int) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for {
		var alive []string
		for name, pid := range pids {
			if isAlive(pid) {
				alive = append(alive, fmt.Sprintf("%s (%d)", name, pid))
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still running: %s", strings.Join(alive, ", "))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// isAlive is alive (zombies are dead) without a test to fail.
func isAlive(pid int) bool { return alive(pid) }

// TestEveryEscapeEndsWithItsRun starts a process per escape and ends the
// run each way it can end: abort, timeout, the session closing (after
// the call returned, leaving them as background jobs), and agentd dying
// by SIGKILL. Nothing may survive any of them.
func TestEveryEscapeEndsWithItsRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, mode := range procModes {
		t.Run(mode.name+"/abort", func(t *testing.T) {
			env := supervisedEnv(t, mode.cgroup)
			defer env.Scope.Close()
			pidFile := filepath.Join(env.Cwd, "pids")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan BashRun, 1)
			go func() { done <- RunBash(ctx, env, escapeCommand(t, env.Cwd, pidFile, true), 0, nil) }()
			pids := readEscapes(t, pidFile)
			cancel()
			if r := waitRun(t, done); !r.Aborted {
				t.Fatalf("run %+v", r)
			}
			waitAllDead(t, pids)
		})
		t.Run(mode.name+"/timeout", func(t *testing.T) {
			env := supervisedEnv(t, mode.cgroup)
			defer env.Scope.Close()
			pidFile := filepath.Join(env.Cwd, "pids")
			done := make(chan BashRun, 1)
			go func() { done <- RunBash(context.Background(), env, escapeCommand(t, env.Cwd, pidFile, true), 1, nil) }()
			pids := readEscapes(t, pidFile)
			if r := waitRun(t, done); !r.TimedOut {
				t.Fatalf("run %+v", r)
			}
			waitAllDead(t, pids)
		})
		t.Run(mode.name+"/session close", func(t *testing.T) {
			env := supervisedEnv(t, mode.cgroup)
			defer env.Scope.Close()
			pidFile := filepath.Join(env.Cwd, "pids")
			r := runKeep(env, escapeCommand(t, env.Cwd, pidFile, false))
			if r.ExitCode != nil || r.Aborted || r.Signal != "" || r.Failure != "" {
				t.Fatalf("run %+v", r)
			}
			pids := readEscapes(t, pidFile)
			// Background jobs of a run that asked to keep them outlive
			// the call while the session lives.
			for _, name := range escapeNames {
				if !isAlive(pids[name]) {
					t.Fatalf("%s ended with the call", name)
				}
			}
			if err := env.Scope.Close(); err != nil {
				t.Fatal(err)
			}
			waitAllDead(t, pids)
			if r := RunBash(context.Background(), env, "echo late", 0, nil); !strings.Contains(r.StartError, ErrScopeClosed.Error()) {
				t.Fatalf("a run after Close: %+v", r)
			}
		})
		t.Run(mode.name+"/agentd killed", func(t *testing.T) {
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "pids")
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cg := "nocgroup"
			if mode.cgroup {
				cg = "cgroup"
			}
			standIn := exec.Command(exe, standInCommand, cg, dir, escapeCommand(t, dir, pidFile, true))
			standIn.Stderr = os.Stderr
			if err := standIn.Start(); err != nil {
				t.Fatal(err)
			}
			pids := readEscapes(t, pidFile)
			if err := standIn.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = standIn.Wait()
			waitAllDead(t, pids)
		})
	}
}

func waitRun(t *testing.T, done <-chan BashRun) BashRun {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(hangGuard):
		t.Fatalf("RunBash did not return within %v", hangGuard)
		return BashRun{}
	}
}

// TestSupervisedRunInCgroup: where the system offers a writable cgroup v2,
// the run is in a cgroup of its own, removed when the run ends.
func TestSupervisedRunInCgroup(t *testing.T) {
	defer goleak.VerifyNone(t)
	probe := newRunCgroup("")
	if probe == nil {
		t.Skip("no writable cgroup v2 here")
	}
	probe.remove()
	env := supervisedEnv(t, true)
	defer env.Scope.Close()
	r := RunBash(context.Background(), env, "cat /proc/self/cgroup", 0, nil)
	var dir string
	for _, line := range strings.Split(r.Output, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok && strings.Contains(p, "/agentd-run-") {
			dir = p
		}
	}
	if dir == "" {
		t.Fatalf("not in a run cgroup: %q", r.Output)
	}
	base, _ := proclimit.Cgroup2Dir()
	full := filepath.Join(base, filepath.Base(dir))
	deadline := time.Now().Add(hangGuard)
	for {
		if _, err := os.Stat(full); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cgroup %s left behind", full)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSupervisedRunReports: statuses, signals and start failures arrive
// through the supervisor as they do without one.
func TestSupervisedRunReports(t *testing.T) {
	defer goleak.VerifyNone(t)
	env := supervisedEnv(t, false)
	defer env.Scope.Close()
	tests := []struct {
		name, command string
		check         func(BashRun) bool
	}{
		{"output and success", "echo out; echo err >&2", func(r BashRun) bool { return r.Output == "out\nerr\n" && r.ExitCode == nil && r.Signal == "" }},
		{"exit code", "exit 3", func(r BashRun) bool { return r.ExitCode != nil && *r.ExitCode == 3 }},
		{"signal", "kill -9 $$", func(r BashRun) bool { return r.Signal == "SIGKILL" }},
		{"stdin is empty", "cat; echo done", func(r BashRun) bool { return r.Output == "done\n" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if r := RunBash(context.Background(), env, tc.command, 0, nil); !tc.check(r) {
				t.Fatalf("%+v", r)
			}
		})
	}
	t.Run("shell missing", func(t *testing.T) {
		e := env
		e.Shell = filepath.Join(env.Cwd, "no-such-shell")
		if r := RunBash(context.Background(), e, "true", 0, nil); !strings.Contains(r.StartError, "no-such-shell") {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("supervisor missing", func(t *testing.T) {
		e := env
		e.Supervisor = []string{filepath.Join(env.Cwd, "no-such-agentd"), SuperviseCommand}
		if r := RunBash(context.Background(), e, "true", 0, nil); !strings.Contains(r.StartError, "process supervisor") {
			t.Fatalf("%+v", r)
		}
	})
}

// TestSuperviseRefusesWithoutAgentd: run by hand, the hidden subcommand
// says what it is for instead of running anything.
func TestSuperviseRefusesWithoutAgentd(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, SuperviseCommand, "/bin/sh", "-c", "echo ran").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || strings.Contains(string(out), "ran") || !strings.Contains(string(out), "only agentd runs this") {
		t.Fatalf("err %v, output %q", err, out)
	}
}

// TestDirectRunDiesWithAgentd: without a supervisor, the shell still gets
// a parent-death signal.
func TestDirectRunDiesWithAgentd(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	standIn := exec.Command(exe, standInCommand, "direct", dir, fmt.Sprintf("echo $$ > %q; exec sleep 300", pidFile))
	standIn.Stderr = os.Stderr
	if err := standIn.Start(); err != nil {
		t.Fatal(err)
	}
	pids := readPids(t, pidFile, 1)
	killAtCleanup(t, pids...)
	_ = standIn.Process.Signal(syscall.SIGKILL)
	_ = standIn.Wait()
	waitDead(t, pids...)
}

// TestScopeCloseDuringStarts: runs starting while the Scope closes either
// refuse to start or are ended; none is left running or waited for by
// nobody.
func TestScopeCloseDuringStarts(t *testing.T) {
	defer goleak.VerifyNone(t)
	env := supervisedEnv(t, false)
	pidFile := filepath.Join(env.Cwd, "pids")
	cmd := fmt.Sprintf("echo $$ >> %q; exec sleep 300", pidFile)
	const n = 8
	done := make(chan BashRun, n)
	for range n {
		go func() { done <- RunBash(context.Background(), env, cmd, 0, nil) }()
	}
	time.Sleep(20 * time.Millisecond) // let some of them start
	if err := env.Scope.Close(); err != nil {
		t.Fatal(err)
	}
	for range n {
		r := waitRun(t, done)
		if !strings.Contains(r.StartError, ErrScopeClosed.Error()) && r.Failure != "stopped: its session was closed" {
			t.Errorf("a run neither refused nor ended: %+v", r)
		}
	}
	b, _ := os.ReadFile(pidFile)
	pids := map[string]int{}
	for i, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids["run "+strconv.Itoa(i)] = pid
		}
	}
	waitAllDead(t, pids)
}

func TestCgroupDir(t *testing.T) {
	const v1 = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
	tests := []struct {
		name, cgroups, mountinfo string
		want                     string
	}{
		{"hybrid, root cgroup", "4:memory:/x\n0::/\n", v1 + "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n", "/sys/fs/cgroup/unified"},
		{"unified", "0::/user.slice/user-1000.slice/session-2.scope\n", "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
			"/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope"},
		{"mount of a subtree", "0::/lxc/c1/app\n", "30 23 0:26 /lxc/c1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "/sys/fs/cgroup/app"},
		{"mount of another subtree", "0::/lxc/c10/app\n", "30 23 0:26 /lxc/c1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", ""},
		{"escaped mount point", "0::/a\n", `30 23 0:26 / /mnt/cg\040two rw - cgroup2 none rw` + "\n", "/mnt/cg two/a"},
		{"cgroup v1 only", "4:memory:/x\n1:name=systemd:/\n", v1, ""},
		{"no cgroup2 mounted", "0::/a\n", v1, ""},
		{"outside the namespace", "0::/../../other\n", "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", ""},
	}
	for _, tc := range tests {
		got, ok := proclimit.Cgroup2DirOf(tc.cgroups, tc.mountinfo)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: %q %v, want %q", tc.name, got, ok, tc.want)
		}
	}
}
