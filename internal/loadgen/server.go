package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// server is one `agentd serve` child process.
type server struct {
	cmd    *exec.Cmd
	log    *stderrWatch
	addr   string
	exited chan struct{} // closed when Wait returns
	// waitErr is Wait's result, readable once exited is closed.
	waitErr error

	stopOnce sync.Once
	stopped  stopResult
}

// stopResult is how the server ended under stop.
type stopResult struct {
	code   int
	took   time.Duration
	killed bool
}

// startServer runs bin with args in dir and waits for the ready line
// (`addr=host:port` in the "listening" log line), the process's exit, ctx,
// or timeout, whichever comes first.
func startServer(ctx context.Context, bin string, args []string, dir string, env []string, passthrough io.Writer, timeout time.Duration) (*server, error) {
	log := newStderrWatch(passthrough)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = io.Discard
	cmd.Stderr = log
	// A grandchild (a bash tool) holding stderr open must not keep Wait
	// from returning once the server is gone.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &server{cmd: cmd, log: log, exited: make(chan struct{})}
	go func() {
		defer close(s.exited)
		s.waitErr = cmd.Wait()
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case addr := <-log.ready:
		s.addr = addr
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("agentd serve exited before it was ready (%v); stderr:\n%s", s.waitErr, log.tail())
	case <-ctx.Done():
		s.stop(10 * time.Second)
		return nil, fmt.Errorf("waiting for agentd serve to be ready: %w", ctx.Err())
	case <-t.C:
		s.stop(10 * time.Second)
		return nil, fmt.Errorf("agentd serve not ready after %s (no `addr=` listening line on stderr); stderr:\n%s", timeout, log.tail())
	}
}

func (s *server) pid() int { return s.cmd.Process.Pid }

// stop asks the server to shut down with SIGTERM and waits up to grace
// for it to exit, then kills it. It returns the exit code (-1 when killed
// by a signal) and how long the shutdown took. Calling it again returns
// the same result.
// stop ends the server with SIGTERM, then SIGKILL after grace. Only the
// first call acts; every call returns how the server ended then, so a
// run may stop it to measure the shutdown and still defer a stop for its
// early returns.
func (s *server) stop(grace time.Duration) (code int, took time.Duration, killed bool) {
	s.stopOnce.Do(func() {
		start := time.Now()
		select {
		case <-s.exited:
		default:
			_ = s.cmd.Process.Signal(syscall.SIGTERM) // fails only if it is already gone
			t := time.NewTimer(grace)
			select {
			case <-s.exited:
			case <-t.C:
				s.stopped.killed = true
				_ = s.cmd.Process.Kill()
				<-s.exited
			}
			t.Stop()
		}
		s.stopped.code, s.stopped.took = s.cmd.ProcessState.ExitCode(), time.Since(start)
	})
	return s.stopped.code, s.stopped.took, s.stopped.killed
}

// stderrWatch takes the server's stderr: it finds the ready line, counts
// warnings and errors, and keeps the last lines for error messages.
type stderrWatch struct {
	passthrough io.Writer // may be nil
	ready       chan string

	mu       sync.Mutex
	partial  []byte
	lines    []string // the last tailLines lines
	found    bool
	problems int // warning and error lines
	samples  []string
}

const (
	tailLines         = 40 // kept for error messages
	maxWarningSamples = 10
)

// readyRe is compiled on first use, not when any agentd command starts.
var readyRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\baddr=(\S+)`) })

func newStderrWatch(passthrough io.Writer) *stderrWatch {
	return &stderrWatch{passthrough: passthrough, ready: make(chan string, 1)}
}

// Write is called by exec's copying goroutine only, but tail and problems
// are read from others, hence the lock.
func (w *stderrWatch) Write(p []byte) (int, error) {
	if w.passthrough != nil {
		_, _ = w.passthrough.Write(p) // a broken passthrough must not stop the server
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.line(string(w.partial[:i]))
		w.partial = w.partial[i+1:]
	}
	return len(p), nil
}

func (w *stderrWatch) line(l string) {
	w.lines = append(w.lines, l)
	if len(w.lines) > tailLines {
		w.lines = w.lines[len(w.lines)-tailLines:]
	}
	if !w.found && strings.Contains(l, "listening") {
		if m := readyRe().FindStringSubmatch(l); m != nil {
			w.found = true
			w.ready <- strings.Trim(m[1], `"`)
			return
		}
	}
	if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
		w.problems++
		if len(w.samples) < maxWarningSamples {
			w.samples = append(w.samples, l)
		}
	}
}

func (w *stderrWatch) tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(append(w.lines, string(w.partial)), "\n")
}

func (w *stderrWatch) problemLines() (int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.problems, append([]string(nil), w.samples...)
}

// memory is what /proc/<pid>/status says about a process's memory.
type memory struct {
	RSS  int64 // VmRSS, bytes
	Peak int64 // VmHWM, bytes: the highest RSS so far
	// Anon is RssAnon, bytes: the part of RSS that is the process's own
	// memory (heap, stacks), without the binary's file-backed pages,
	// which depend on how the binary was copied and what else runs it.
	Anon int64
}

// readMemory reads VmRSS, VmHWM and RssAnon of pid. Linux only.
func readMemory(pid int) (memory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, fmt.Errorf("memory of pid %d: %w", pid, err)
	}
	defer f.Close()
	var m memory
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch k {
		case "VmRSS":
			dst = &m.RSS
		case "VmHWM":
			dst = &m.Peak
		case "RssAnon":
			dst = &m.Anon
		default:
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return memory{}, fmt.Errorf("memory of pid %d: %s: %w", pid, k, err)
		}
		*dst = kb << 10
	}
	if err := sc.Err(); err != nil {
		return memory{}, fmt.Errorf("memory of pid %d: %w", pid, err)
	}
	if m.RSS == 0 {
		return memory{}, errors.New("memory of pid " + strconv.Itoa(pid) + ": no VmRSS in /proc status")
	}
	return m, nil
}

// launched is one bench run's model mock and server, in a temporary
// directory of their own.
type launched struct {
	dir  string
	mk   *mock
	srv  *server
	base memory // the server's settled memory before any load
}

// launch starts the mock and an agentd serve with room for conns
// connections, and reads its settled memory. close undoes it.
func launch(ctx context.Context, o Options, conns int, log *slog.Logger) (*launched, error) {
	dir, err := os.MkdirTemp("", "agentd-bench-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	l := &launched{dir: dir}
	if l.mk, err = startMock(o.Chunks, o.PlanSteps); err != nil {
		l.close(o)
		return nil, err
	}
	env, err := writeEnv(dir, l.mk.openAIURL())
	if err != nil {
		l.close(o)
		return nil, err
	}
	if l.srv, err = startServer(ctx, o.Binary, serveArgs(o, env, conns), env.work, env.environ, o.ServerLog, o.StartTimeout); err != nil {
		l.close(o)
		return nil, err
	}
	log.Info("server ready", "addr", l.srv.addr, "pid", l.srv.pid())
	if l.base, err = settledMemory(ctx, l.srv.pid(), o.Settle); err != nil {
		l.close(o)
		return nil, err
	}
	return l, nil
}

// close stops the server (if the run did not), the mock, and removes the
// directory.
func (l *launched) close(o Options) {
	if l.srv != nil {
		l.srv.stop(o.ShutdownGrace)
	}
	if l.mk != nil {
		l.mk.close()
	}
	_ = os.RemoveAll(l.dir)
}
