package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// signalWriter is stderr that closes seen once it has received want.
type signalWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.seen != nil && strings.Contains(w.buf.String(), w.want) {
		close(w.seen)
		w.seen = nil
	}
	return len(p), nil
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// serve at a terminal tells the person where the web UI and the API are
// and that Ctrl+C stops it, and the UI is there; with stderr not a
// terminal (a service, a pipe) the log stays the log alone.
func TestServeGreetsAPersonAtATerminal(t *testing.T) {
	for _, terminal := range []bool{true, false} {
		t.Run(map[bool]string{true: "terminal", false: "not a terminal"}[terminal], func(t *testing.T) {
			home := t.TempDir()
			stderr := &signalWriter{want: "Ctrl+C stops it", seen: make(chan struct{})}
			if !terminal {
				stderr.want = "agentd serve listening"
			}
			seen := stderr.seen
			getenv := func(k string) string {
				if k == "HOME" {
					return home
				}
				return ""
			}
			m := New(strings.NewReader(""), io.Discard, stderr, getenv).StderrIsTerminal(terminal)
			defer m.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan int, 1)
			// Full access: a confining mode would probe the sandbox by
			// re-running this test binary as agentd's helper.
			go func() {
				done <- m.Run(ctx, []string{"serve", "--port", "0", "--data-dir", t.TempDir(), "--sandbox", "full-access"})
			}()
			select {
			case <-seen:
			case code := <-done:
				t.Fatalf("serve ended with %d before listening:\n%s", code, stderr.String())
			}
			if terminal {
				ui := regexp.MustCompile(`\n  Web UI:  (http://127\.0\.0\.1:\d+/)\n  API:     http://127\.0\.0\.1:\d+/api/v2 `).FindStringSubmatch(stderr.String())
				if ui == nil {
					t.Fatalf("no web UI and API lines:\n%s", stderr.String())
				}
				res, err := http.Get(ui[1])
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					t.Errorf("GET %s: %s", ui[1], res.Status)
				}
			}
			cancel()
			if code := <-done; code != ExitOK {
				t.Fatalf("exit %d\n%s", code, stderr.String())
			}
			out := stderr.String()
			if got := strings.Contains(out, "Ctrl+C") || strings.Contains(out, "Web UI:"); got != terminal {
				t.Errorf("terminal %v, but the block for a person printed: %v\n%s", terminal, got, out)
			}
		})
	}
}
