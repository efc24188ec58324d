package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// hangGuard bounds how long a test waits for Execute before declaring it
// hung. It is deliberately generous: the assertions are about returning
// at all (and about processes dying), not about wall-clock speed.
const hangGuard = 15 * time.Second

type bashRun struct {
	res     Result
	elapsed time.Duration
}

// runBash executes a bash call in a goroutine and fails the test if it
// does not return within hangGuard.
func runBash(t *testing.T, ctx context.Context, tl Tool, args map[string]any, update func(Result)) bashRun {
	t.Helper()
	raw, _ := json.Marshal(args)
	done := make(chan bashRun, 1)
	start := time.Now()
	go func() {
		r := tl.Execute(ctx, Call{ID: "c", Name: "bash", Args: raw}, update)
		done <- bashRun{res: r, elapsed: time.Since(start)}
	}()
	select {
	case r := <-done:
		return r
	case <-time.After(hangGuard):
		t.Fatalf("bash %q did not return within %v", args["command"], hangGuard)
		return bashRun{}
	}
}

// alive reports whether pid is a live process (zombies count as dead:
// they have exited and only wait for a parent to reap them).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

func waitDead(t *testing.T, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d still alive", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// readPids waits for a file of pids, one per line, to hold n of them.
func readPids(t *testing.T, path string, n int) []int {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for {
		b, _ := os.ReadFile(path)
		var pids []int
		for _, f := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(f); err == nil {
				pids = append(pids, p)
			}
		}
		if len(pids) >= n {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d pids appeared in %s", len(pids), n, path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killAtCleanup ends, by pid, processes a test deliberately leaves behind.
func killAtCleanup(t *testing.T, pids ...int) {
	t.Cleanup(func() {
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	})
}

func TestBashOutput(t *testing.T) {
	defer goleak.VerifyNone(t)
	forEachRunner(t, func(t *testing.T, env Env) {
		env.Environ = append(env.Environ, "AGENTD_TEST_VAR=from-env")
		sh := NewBash(env)
		writeFile(t, filepath.Join(env.Cwd, "marker.txt"), "here\n")
		tests := []struct {
			name    string
			command string
			want    string
			isErr   bool
		}{
			{"stdout", "echo hello", "hello\n", false},
			{"merged in order", "echo out1; echo err1 >&2; echo out2; echo err2 >&2; echo out3", "out1\nerr1\nout2\nerr2\nout3\n", false},
			{"runs in cwd", "cat marker.txt", "here\n", false},
			{"environment from Env", "echo $AGENTD_TEST_VAR", "from-env\n", false},
			{"no output", "true", "(no output)", false},
			{"exit code", "echo partial; exit 3", "partial\n\n\nCommand exited with code 3", true},
			{"exit code, no output", "exit 7", "Command exited with code 7", true},
			{"stderr and failure", "ls /definitely/not/here", "", true},
			{"killed by signal", "kill -9 $$", "Command was killed by signal SIGKILL", true},
			{"stdin is empty", "cat; echo done", "done\n", false},
			{"empty command", "", "(no output)", false},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				r := runBash(t, context.Background(), sh, map[string]any{"command": tc.command}, nil)
				if r.res.IsError != tc.isErr {
					t.Fatalf("IsError %v: %q", r.res.IsError, textOf(r.res))
				}
				if tc.want != "" && textOf(r.res) != tc.want {
					t.Fatalf("got %q want %q", textOf(r.res), tc.want)
				}
			})
		}
		r := runBash(t, context.Background(), sh, map[string]any{"command": "exit 3"}, nil)
		if m := detailsJSON(t, r.res); m["exitCode"] != 3.0 {
			t.Fatalf("details %v", m)
		}
	})
}

func TestBashValidation(t *testing.T) {
	defer goleak.VerifyNone(t)
	env := testEnv(t)
	sh := NewBash(env)
	mustErr(t, run(t, sh, map[string]any{}), "command: required string is missing")
	mustErr(t, run(t, sh, map[string]any{"command": "true", "timeout": "soon"}), "timeout: must be a number")
	env.Cwd = filepath.Join(env.Cwd, "gone")
	mustErr(t, run(t, NewBash(env), map[string]any{"command": "true"}), "working directory", "does not exist")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	mustErr(t, runCtx(t, ctx, sh, map[string]any{"command": "echo hi"}), "Command aborted")
}

func TestBashDefaultEnvironAndPrefix(t *testing.T) {
	defer goleak.VerifyNone(t)
	env := testEnv(t)
	env.Environ = nil // nothing passed: a minimal environment
	env.ShellPrefix = "greet() { echo hi $1; }"
	r := runBash(t, context.Background(), NewBash(env), map[string]any{"command": "greet you; echo $HOME; ls / >/dev/null && echo found-ls"}, nil)
	if got := mustOK(t, r.res); got != "hi you\n"+env.Home+"\nfound-ls\n" {
		t.Fatalf("got %q", got)
	}
}

func TestBashStreamsUpdates(t *testing.T) {
	defer goleak.VerifyNone(t)
	forEachRunner(t, func(t *testing.T, env Env) {
		gate := filepath.Join(env.Cwd, "gate")
		// The command prints, then waits until the test has seen the partial
		// output, which proves updates arrive while the command runs.
		cmd := fmt.Sprintf("echo first; while [ ! -e %q ]; do sleep 0.02; done; echo second", gate)
		var mu sync.Mutex
		var updates []Result
		update := func(r Result) {
			mu.Lock()
			updates = append(updates, r)
			mu.Unlock()
			if strings.Contains(textOf(r), "first") {
				_ = os.WriteFile(gate, nil, 0o644)
			}
		}
		r := runBash(t, context.Background(), NewBash(env), map[string]any{"command": cmd}, update)
		if got := mustOK(t, r.res); got != "first\nsecond\n" {
			t.Fatalf("got %q", got)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(updates) < 2 || len(updates[0].Content) != 0 {
			t.Fatalf("want an initial empty update then output, got %d updates", len(updates))
		}
		sawFirstOnly := false
		for _, u := range updates {
			if s := textOf(u); s == "first\n" {
				sawFirstOnly = true
			}
		}
		if !sawFirstOnly {
			t.Fatal("no partial update before the command finished")
		}
	})
}

func TestBashUpdatesThrottled(t *testing.T) {
	defer goleak.VerifyNone(t)
	env := testEnv(t)
	var n int
	start := time.Now()
	r := runBash(t, context.Background(), NewBash(env),
		map[string]any{"command": "for i in $(seq 1 10); do echo $i; sleep 0.02; done"}, func(Result) { n++ })
	mustOK(t, r.res)
	// One initial update plus at most one per interval (and a final one).
	if limit := int(time.Since(start)/bashUpdateInterval) + 3; n > limit {
		t.Fatalf("%d updates in %v, want at most %d", n, time.Since(start), limit)
	}
}

// TestBashTimeout: a command ends at its timeout with what it started.
// The timeout has to outlast starting the background process it should
// take down; on a busy machine 0.5 s may not, so a run whose process
// never started is repeated with a longer timeout rather than failing.
func TestBashTimeout(t *testing.T) {
	defer goleak.VerifyNone(t)
	forEachRunner(t, func(t *testing.T, env Env) {
		for timeout := 0.5; ; timeout *= 4 {
			if timeout > 40 {
				t.Fatal("the command never started its background process before its timeout")
			}
			pidFile := filepath.Join(env.Cwd, fmt.Sprintf("pids-%g", timeout))
			cmd := fmt.Sprintf("echo started; sleep 30 & echo $! > %q; wait", pidFile)
			r := runBash(t, context.Background(), NewBash(env), map[string]any{"command": cmd, "timeout": timeout}, nil)
			got := mustErr(t, r.res)
			b, _ := os.ReadFile(pidFile)
			if strings.TrimSpace(string(b)) == "" {
				t.Logf("the background process had not started within %gs; again with a longer timeout", timeout)
				continue
			}
			if want := fmt.Sprintf("started\n\n\nCommand timed out after %g seconds", timeout); got != want {
				t.Fatalf("got %q, want %q", got, want)
			}
			waitDead(t, readPids(t, pidFile, 1)...)
			return
		}
	})
}

// TestBashCancelKillsProcessGroup starts a child, a grandchild and a
// great-grandchild that all hold the output pipe, cancels, and checks
// that Execute returns and every one of them is gone.
func TestBashCancelKillsProcessGroup(t *testing.T) {
	defer goleak.VerifyNone(t)
	forEachRunner(t, func(t *testing.T, env Env) {
		pidFile := filepath.Join(env.Cwd, "pids")
		cmd := fmt.Sprintf(`
	sleep 30 & echo $! >> %[1]q
	bash -c 'echo $$ >> %[1]q; sleep 30 & echo $! >> %[1]q; wait' &
	wait`, pidFile)
		ctx, cancel := context.WithCancel(context.Background())
		var pids []int
		go func() {
			pids = readPids(t, pidFile, 3)
			cancel()
		}()
		r := runBash(t, ctx, NewBash(env), map[string]any{"command": cmd}, nil)
		if got := mustErr(t, r.res); got != "Command aborted" {
			t.Fatalf("got %q", got)
		}
		if len(pids) != 3 {
			t.Fatalf("pids %v", pids)
		}
		killAtCleanup(t, pids...) // only matters if the test fails
		waitDead(t, pids...)
	})
}

// TestBashBackgroundJobs: the shell exits but leaves a job that
// inherited the output pipe. By default the job ends with the command;
// with background set it keeps running (until the session ends), and
// Execute returns anyway.
func TestBashBackgroundJobs(t *testing.T) {
	defer goleak.VerifyNone(t)
	forEachRunner(t, func(t *testing.T, env Env) {
		for _, keep := range []bool{false, true} {
			t.Run(fmt.Sprintf("background=%v", keep), func(t *testing.T) {
				pidFile := filepath.Join(env.Cwd, fmt.Sprintf("pid-%v", keep))
				cmd := fmt.Sprintf("sleep 1000 & echo $! > %q; echo done", pidFile)
				args := map[string]any{"command": cmd}
				if keep {
					args["background"] = true
				}
				r := runBash(t, context.Background(), NewBash(env), args, nil)
				pids := readPids(t, pidFile, 1)
				killAtCleanup(t, pids...)
				if got := mustOK(t, r.res); got != "done\n" {
					t.Fatalf("got %q", got)
				}
				if r.elapsed > 10*time.Second {
					t.Fatalf("took %v", r.elapsed)
				}
				if !keep {
					if len(env.Supervisor) == 0 {
						// Killed with its process group when the shell
						// exited; it may take a moment to die.
						waitDead(t, pids...)
						return
					}
					// Gone by the time the call returned, not later.
					if isAlive(pids[0]) {
						t.Fatalf("the background job %d outlived the command", pids[0])
					}
					return
				}
				if len(env.Supervisor) == 0 {
					// Without a supervisor nothing keeps track of a job
					// once its shell is gone (a process group id may be
					// reused): it is left alone, as before.
					return
				}
				if !isAlive(pids[0]) {
					t.Fatalf("the background job %d ended with the command", pids[0])
				}
				// The session goes on: the next command runs.
				if got := mustOK(t, runBash(t, context.Background(), NewBash(env), map[string]any{"command": "echo next"}, nil).res); got != "next\n" {
					t.Fatalf("next command: %q", got)
				}
				if err := env.Scope.Close(); err != nil {
					t.Fatal(err)
				}
				waitDead(t, pids...)
			})
		}
	})
}

func TestBashTruncation(t *testing.T) {
	defer goleak.VerifyNone(t)
	forEachRunner(t, func(t *testing.T, env Env) {
		sh := NewBash(env)

		t.Run("exactly 2000 lines", func(t *testing.T) {
			r := runBash(t, context.Background(), sh, map[string]any{"command": "seq 1 2000"}, nil)
			if got := mustOK(t, r.res); !strings.HasPrefix(got, "1\n2\n") || !strings.HasSuffix(got, "\n2000\n") || r.res.Details != nil {
				t.Fatalf("2000 lines must be whole; details %v", r.res.Details)
			}
		})
		t.Run("lines", func(t *testing.T) {
			var last Result
			r := runBash(t, context.Background(), sh, map[string]any{"command": "seq 1 5000"}, func(u Result) { last = u })
			got := mustOK(t, r.res)
			d := r.res.Details.(BashDetails)
			if d.FullOutputPath == "" || filepath.Dir(filepath.Dir(d.FullOutputPath)) != env.TempDir {
				t.Fatalf("full output path %q", d.FullOutputPath)
			}
			want := fmt.Sprintf("\n\n[Showing lines 3001-5000 of 5000. Full output: %s]", d.FullOutputPath)
			if !strings.HasPrefix(got, "3001\n") || !strings.HasSuffix(got, "5000"+want) {
				t.Fatalf("head %q tail %q", got[:10], got[len(got)-120:])
			}
			if full := readFile(t, d.FullOutputPath); full != seq(1, 5000) {
				t.Fatalf("full output file has %d bytes", len(full))
			}
			if d.Truncation.TruncatedBy != "lines" || d.Truncation.TotalLines != 5000 || d.Truncation.OutputLines != 2000 {
				t.Fatalf("truncation %+v", d.Truncation)
			}
			// Partial updates carry the same truncated tail and the file path.
			if ud, ok := last.Details.(BashDetails); !ok || ud.FullOutputPath != d.FullOutputPath || ud.Truncation == nil {
				t.Fatalf("last update details %+v", last.Details)
			}
		})
		t.Run("bytes", func(t *testing.T) {
			// 200 lines of 1000 bytes: 200KB in few lines.
			r := runBash(t, context.Background(), sh, map[string]any{"command": "for i in $(seq 1 200); do printf '%0999d\\n' $i; done"}, nil)
			got := mustOK(t, r.res)
			d := r.res.Details.(BashDetails)
			if d.Truncation.TruncatedBy != "bytes" || d.Truncation.OutputLines != 51 {
				t.Fatalf("truncation %+v", d.Truncation)
			}
			if !strings.HasSuffix(got, fmt.Sprintf("\n\n[Showing lines 150-200 of 200 (50.0KB limit). Full output: %s]", d.FullOutputPath)) {
				t.Fatalf("tail %q", got[len(got)-150:])
			}
			if len(readFile(t, d.FullOutputPath)) != 200*1000 {
				t.Fatal("full output incomplete")
			}
		})
		t.Run("one huge line", func(t *testing.T) {
			r := runBash(t, context.Background(), sh, map[string]any{"command": "head -c 60000 /dev/zero | tr '\\0' a"}, nil)
			got := mustOK(t, r.res)
			d := r.res.Details.(BashDetails)
			if !d.Truncation.LastLinePartial {
				t.Fatalf("truncation %+v", d.Truncation)
			}
			want := fmt.Sprintf("%s\n\n[Showing last 50.0KB of line 1 (line is 58.6KB). Full output: %s]", strings.Repeat("a", MaxBytes), d.FullOutputPath)
			if got != want {
				t.Fatalf("tail %q", got[len(got)-120:])
			}
		})
		t.Run("failure keeps the tail and the notice", func(t *testing.T) {
			r := runBash(t, context.Background(), sh, map[string]any{"command": "seq 1 3000; exit 2"}, nil)
			got := mustErr(t, r.res, "Command exited with code 2", "[Showing lines 1001-3000 of 3000. Full output: ")
			if !strings.HasPrefix(got, "1001\n") {
				t.Fatalf("head %q", got[:10])
			}
		})
	})
}

func seq(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	return b.String()
}

func TestBashUnsavableOutput(t *testing.T) {
	defer goleak.VerifyNone(t)
	env := testEnv(t)
	env.TempDir = filepath.Join(env.TempDir, "missing", "dir")
	r := runBash(t, context.Background(), NewBash(env), map[string]any{"command": "seq 1 3000"}, nil)
	got := mustOK(t, r.res)
	if !strings.HasSuffix(got, "[Showing lines 1001-3000 of 3000. Full output: unavailable (could not be saved)]") {
		t.Fatalf("tail %q", got[len(got)-100:])
	}
	if d := r.res.Details.(BashDetails); d.FullOutputPath != "" || d.Truncation == nil {
		t.Fatalf("details %+v", d)
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int]string{0: "0B", 1023: "1023B", 1024: "1.0KB", 51200: "50.0KB", 1536 * 1024: "1.5MB"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

// forEachRunner runs f with an Env that starts bash directly and with one
// that starts it under a supervisor; each has a Scope closed afterwards.
func forEachRunner(t *testing.T, f func(t *testing.T, env Env)) {
	for _, supervised := range []bool{false, true} {
		name := "direct"
		if supervised {
			name = "supervised"
		}
		t.Run(name, func(t *testing.T) {
			env := testEnv(t)
			env.Scope = NewScope()
			if supervised {
				env = supervisedEnv(t, true)
			}
			defer env.Scope.Close()
			f(t, env)
		})
	}
}
