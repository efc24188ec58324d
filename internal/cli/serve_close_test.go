package cli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// serveLeakGuard bounds the wait for goroutines that were told to stop
// to be gone; it fires only when one never goes.
const serveLeakGuard = 10 * time.Second

// serveEnv is a home and a data directory for a serve run in this
// process, with the arguments every run takes.
type serveEnv struct {
	home, data string
	args       []string
}

func newServeEnv(t *testing.T) serveEnv {
	t.Helper()
	root := t.TempDir()
	e := serveEnv{home: filepath.Join(root, "home"), data: filepath.Join(root, "data")}
	for _, d := range []string{e.home, e.data} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// full-access: what is checked here is serve's wiring, not whether
	// this kernel can confine.
	e.args = []string{"--data-dir", e.data, "--config-dir", filepath.Join(e.home, ".agentd"), "--port", "0", "--sandbox", "full-access"}
	return e
}

// serve is a Serve for args in e, logging to log.
func (e serveEnv) serve(t *testing.T, log *bytes.Buffer, args ...string) *Serve {
	t.Helper()
	env := map[string]string{"HOME": e.home}
	m := New(strings.NewReader(""), &bytes.Buffer{}, &lockedBuffer{b: log}, func(k string) string { return env[k] })
	t.Cleanup(func() { _ = m.Close() })
	s, err := m.ParseServe(append(append([]string{}, e.args...), args...))
	if err != nil {
		t.Fatalf("parsing %v: %v", args, err)
	}
	return s
}

// lockedBuffer is a bytes.Buffer written by the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// busyPorts hands out listeners on loopback ports of their own, which
// hold the ports until close.
type busyPorts struct {
	t   *testing.T
	lns []net.Listener
}

func (b *busyPorts) take() string {
	b.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.t.Fatal(err)
	}
	b.lns = append(b.lns, ln)
	return ln.Addr().String()
}

func (b *busyPorts) close() {
	for _, ln := range b.lns {
		_ = ln.Close()
	}
}

// openFDs is the number of file descriptors this process has open.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// settle waits until at most base goroutines run, yielding to those that
// were told to end and are on their way out (Close waits for every
// goroutine it owns, but one may still be returning from the function
// that signalled it was done). It fails with their stacks if some never
// end.
func settle(t *testing.T, base int) {
	t.Helper()
	guard := time.Now().Add(serveLeakGuard)
	for runtime.NumGoroutine() > base {
		if time.Now().After(guard) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("%d goroutines left running, %d before:\n%s", runtime.NumGoroutine(), base, buf[:n])
		}
		runtime.Gosched()
	}
}

// TestServeCloseOnEveryOpenError makes each step of Serve.Open fail in
// turn and checks that Close releases what the steps before it built:
// no goroutine, file or listener outlives it.
func TestServeCloseOnEveryOpenError(t *testing.T) {
	tests := []struct {
		name string
		// setup breaks the step; it returns serve's arguments and, when
		// the failure comes after serve listened, true.
		setup func(t *testing.T, e serveEnv, busy *busyPorts) (args []string, listened bool)
		want  string
	}{
		{"bad model configuration", func(t *testing.T, e serveEnv, busy *busyPorts) ([]string, bool) {
			writeFile(t, filepath.Join(e.home, ".agentd", "models.json"), "{not json")
			return nil, false
		}, "cannot use the model configuration"},
		{"unknown model", func(t *testing.T, e serveEnv, busy *busyPorts) ([]string, bool) {
			return []string{"--model", "nope/nothing"}, false
		}, `unknown model "nope/nothing"`},
		{"missing policy", func(t *testing.T, e serveEnv, busy *busyPorts) ([]string, bool) {
			return []string{"--policy", filepath.Join(e.home, "no-policy.json")}, false
		}, "--policy"},
		{"data directory is a file", func(t *testing.T, e serveEnv, busy *busyPorts) ([]string, bool) {
			f := filepath.Join(e.home, "a-file")
			writeFile(t, f, "")
			return []string{"--data-dir", f}, false
		}, "data directory"},
		{"journal cannot be opened", func(t *testing.T, e serveEnv, busy *busyPorts) ([]string, bool) {
			mkdir(t, filepath.Join(e.data, "server", "journal.jsonl"))
			return nil, false
		}, "command journal"},
		{"missing MCP configuration", func(t *testing.T, e serveEnv, busy *busyPorts) ([]string, bool) {
			return []string{"--mcp-config", filepath.Join(e.home, "no-mcp.json")}, false
		}, "--mcp-config"},
		{"missing JWT secret", func(t *testing.T, e serveEnv, busy *busyPorts) ([]string, bool) {
			return []string{"--jwt-secret-file", filepath.Join(e.home, "no-secret")}, false
		}, "--jwt-secret-file"},
		{"session index unreadable", func(t *testing.T, e serveEnv, busy *busyPorts) ([]string, bool) {
			mkdir(t, filepath.Join(e.data, "server", "sessions.jsonl"))
			return nil, false
		}, "session index"},
		{"port in use", func(t *testing.T, e serveEnv, busy *busyPorts) ([]string, bool) {
			_, port, _ := net.SplitHostPort(busy.take())
			return []string{"--port", port}, false
		}, "address already in use"},
		{"port in use after joining a cluster", func(t *testing.T, e serveEnv, busy *busyPorts) ([]string, bool) {
			_, port, _ := net.SplitHostPort(busy.take())
			return []string{"--cluster", "embedded", "--cluster-listen", "127.0.0.1:0", "--node-id", "n1", "--port", port}, false
		}, "address already in use"},
		{"pprof port in use", func(t *testing.T, e serveEnv, busy *busyPorts) ([]string, bool) {
			return []string{"--pprof-addr", busy.take()}, true
		}, "--pprof-addr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := func() {
				e := newServeEnv(t)
				busy := &busyPorts{t: t}
				defer busy.close()
				args, listened := tt.setup(t, e, busy)
				var log bytes.Buffer
				s := e.serve(t, &log, args...)
				err := s.Open(context.Background())
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					_ = s.Close()
					t.Fatalf("Open: %v, want an error with %q", err, tt.want)
				}
				addr := s.Addr()
				if listened != (addr != nil) {
					t.Fatalf("listened before failing: %v, want %v", addr != nil, listened)
				}
				if err := s.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				if addr != nil {
					// The port is free again: the listener was closed.
					ln, err := net.Listen("tcp", addr.String())
					if err != nil {
						t.Fatalf("the port of the failed server is still taken: %v", err)
					}
					_ = ln.Close()
				}
				if err := s.Run(context.Background()); err == nil {
					t.Fatal("Run after a failed Open ran")
				}
			}
			// The first run starts what the process keeps for good
			// (lazily made pools, the runtime's own goroutines).
			run()
			goroutines, fds := runtime.NumGoroutine(), openFDs(t)
			run()
			settle(t, goroutines)
			if n := openFDs(t); n > fds {
				t.Errorf("%d files open after Close, %d before", n, fds)
			}
		})
	}
}

// TestServeOpenRunClose serves in this process on port 0 and checks that
// Close, with Run running or after it returned or without it, ends
// every goroutine and file serve started and frees its port; and that
// Close may be called twice.
func TestServeOpenRunClose(t *testing.T) {
	tests := []struct {
		name string
		// stop ends the run: cancel is Run's context's.
		stop func(t *testing.T, s *Serve, cancel context.CancelFunc, ran <-chan error)
	}{
		{"context ends, then Close", func(t *testing.T, s *Serve, cancel context.CancelFunc, ran <-chan error) {
			cancel()
			if err := <-ran; err != nil {
				t.Errorf("Run: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}},
		{"Close while Run runs", func(t *testing.T, s *Serve, cancel context.CancelFunc, ran <-chan error) {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			// Close returned after Run ended: Run's done channel is
			// closed. (Run's result reaches ran only after Run returned
			// to the goroutine that sends it, which may be after Close
			// returned; so ran is waited for, not polled.)
			s.mu.Lock()
			done := s.runDone
			s.mu.Unlock()
			select {
			case <-done:
			default:
				t.Error("Close returned while Run still ran")
			}
			if err := <-ran; err != nil {
				t.Errorf("Run: %v", err)
			}
		}},
		{"Close without Run", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := func() {
				e := newServeEnv(t)
				var log bytes.Buffer
				s := e.serve(t, &log)
				if err := s.Open(context.Background()); err != nil {
					_ = s.Close()
					t.Fatalf("Open: %v\n%s", err, log.String())
				}
				addr := s.Addr().String()
				if tt.stop != nil {
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					ran := make(chan error, 1)
					go func() { ran <- s.Run(ctx) }()
					// It serves: a request gets its answer.
					if status := getHealthz(t, addr); status != http.StatusOK {
						t.Errorf("GET /healthz: %d", status)
					}
					tt.stop(t, s, cancel, ran)
				}
				if err := s.Close(); err != nil {
					t.Errorf("second Close: %v", err)
				}
				if err := s.Run(context.Background()); err == nil {
					t.Error("Run after Close ran")
				}
				ln, err := net.Listen("tcp", addr)
				if err != nil {
					t.Fatalf("the port is still taken after Close: %v", err)
				}
				_ = ln.Close()
			}
			run()
			goroutines, fds := runtime.NumGoroutine(), openFDs(t)
			run()
			settle(t, goroutines)
			if n := openFDs(t); n > fds {
				t.Errorf("%d files open after Close, %d before", n, fds)
			}
		})
	}
}

// getHealthz asks addr for /healthz on a connection of its own and
// closes it before returning the status: the client's file is gone when
// it returns. (An http.Client closes its connection in its own
// goroutine, after Body.Close returned; under load that goroutine could
// still hold the file when the test counted them.)
func getHealthz(t *testing.T, addr string) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(fmt.Errorf("mkdir: %w", err))
	}
}
