//go:build linux

package tool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
)

// limitedEnv is supervisedEnv (with cgroups where the system offers them,
// or rlimits only) whose supervisor applies lim.
func limitedEnv(t *testing.T, lim proclimit.Limits, cgroup bool) Env {
	t.Helper()
	env := supervisedEnv(t, cgroup)
	env.Supervisor = append(env.Supervisor, lim.Args()...)
	return env
}

// marker is a word no other process on the machine has in its command
// line: the commands below carry it in a comment, and every process a
// shell forks keeps the shell's command line.
func marker(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "agentd-limit-test-" + hex.EncodeToString(b)
}

// withMarker counts the live processes whose command line holds m.
func withMarker(m string) int {
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !isAlive(pid) {
			continue
		}
		// The supervisor's command line holds the command too; it may
		// still be exiting when the call has returned.
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(b), m) && !strings.Contains(string(b), SuperviseCommand) {
			n++
		}
	}
	return n
}

// TestForkBombIsContained: a fork bomb reaches the process limit, is
// stopped with an error that says so, leaves nothing behind, and the next
// command runs. Also the bomb whose shell exits at once (the form that
// "completed" after 0.6 s and kept running): nothing of it is left.
func TestForkBombIsContained(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, mode := range procModes {
		t.Run(mode.name, func(t *testing.T) {
			lim := proclimit.Limits{Procs: 64}
			if e := proclimit.Probe(lim, mode.cgroup, ""); e.Procs == "" {
				// A bomb only a polled count stops could take the
				// machine's pids before the poll: not on a shared machine.
				t.Skipf("processes cannot be limited here: %v (TestForkBombAsUser covers RLIMIT_NPROC)", e.Missing)
			}
			env := limitedEnv(t, lim, mode.cgroup)
			defer env.Scope.Close()
			sh := NewBash(env)
			t.Run("shell waits", func(t *testing.T) {
				m := marker(t)
				start := time.Now()
				r := runBash(t, context.Background(), sh, map[string]any{"command": "bomb(){ bomb | bomb & }; bomb; sleep 600 # " + m}, nil)
				got := mustErr(t, r.res, "Command stopped: it reached the limit of 64 processes and threads at once", "Everything it started was killed.")
				if n := withMarker(m); n != 0 {
					t.Fatalf("%d processes of the bomb left; result %q", n, got)
				}
				t.Logf("bomb stopped and gone %v after it started", time.Since(start))
			})
			t.Run("shell exits at once", func(t *testing.T) {
				m := marker(t)
				runBash(t, context.Background(), sh, map[string]any{"command": "bomb(){ bomb | bomb & }; bomb # " + m}, nil)
				if n := withMarker(m); n != 0 {
					t.Fatalf("%d processes of the bomb left", n)
				}
			})
			t.Run("the session goes on", func(t *testing.T) {
				if got := mustOK(t, runBash(t, context.Background(), sh, map[string]any{"command": "echo next"}, nil).res); got != "next\n" {
					t.Fatalf("got %q", got)
				}
			})
		})
	}
}

// TestMemoryHogIsStopped: a process that keeps allocating meets the
// memory limit: with a memory cgroup it is killed and the result says
// the limit was reached; with RLIMIT_DATA alone its allocation fails.
func TestMemoryHogIsStopped(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, mode := range procModes {
		t.Run(mode.name, func(t *testing.T) {
			lim := proclimit.Limits{Memory: 64 << 20}
			e := proclimit.Probe(lim, mode.cgroup, "")
			env := limitedEnv(t, lim, mode.cgroup)
			defer env.Scope.Close()
			// tail keeps a line in memory until it ends: this one is 1 GiB.
			r := runBash(t, context.Background(), NewBash(env), map[string]any{"command": "head -c 1G /dev/zero | tail; echo tail ended $?"}, nil)
			got := textOf(r.res)
			if strings.Contains(got, "supervisor") || strings.Contains(got, "fatal error") {
				t.Fatalf("the supervisor failed: %q", got)
			}
			if strings.Contains(e.Memory, "cgroup") {
				mustErr(t, r.res, "Command stopped: it reached the memory limit of 64 MiB")
			} else if !strings.Contains(got, "memory exhausted") {
				t.Fatalf("with %s: %q", e.Memory, got)
			}
			if strings.Contains(got, "tail ended 0") {
				t.Fatalf("tail got its 1 GiB: %q", got)
			}
			t.Logf("with %s: %q", e.Memory, got)
		})
	}
}

// TestCPUSpinnerIsStopped: a command that only computes is stopped at
// its CPU time.
func TestCPUSpinnerIsStopped(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, mode := range procModes {
		t.Run(mode.name, func(t *testing.T) {
			lim := proclimit.Limits{CPU: time.Second}
			e := proclimit.Probe(lim, mode.cgroup, "")
			env := limitedEnv(t, lim, mode.cgroup)
			defer env.Scope.Close()
			start := time.Now()
			r := runBash(t, context.Background(), NewBash(env), map[string]any{"command": "while :; do :; done"}, nil)
			got := textOf(r.res)
			if strings.Contains(e.CPU, "cgroup") {
				mustErr(t, r.res, "Command stopped: it reached the limit of 1s of CPU time")
			} else {
				mustErr(t, r.res, "Command was killed by signal SIGXCPU: a process reached the CPU time limit")
			}
			t.Logf("with %s, after %v: %q", e.CPU, time.Since(start), got)
		})
	}
}

// TestForkBombAsUser: an ordinary user, whom no pids cgroup may serve
// here, gets RLIMIT_NPROC (which the kernel does not apply to root): the
// bomb is held below the limit, stopped with an error that says so, and
// nothing of it is left. The test binary plays agentd as nobody.
func TestForkBombAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run agentd as another user")
	}
	const nobody = 65534
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy nobody may execute, in a directory nobody may use.
	dir, err := os.MkdirTemp("", "agentd-nproc-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "agentd.test")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	m := marker(t)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, standInCommand, "tool-procs=64", work, "bomb(){ bomb | bomb & }; bomb; sleep 600 # "+m)
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Dir = work
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), raceNoExitSleep}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}, Setpgid: true}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }) // only matters if it fails
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	if !strings.Contains(string(out), "Command stopped: it reached the limit of 64 processes and threads at once") {
		t.Fatalf("as nobody: %q; %s", out, stderr.String())
	}
	if n := withMarker(m); n != 0 {
		t.Fatalf("%d processes of the bomb left", n)
	}
}
