package mcp

import (
	"log/slog"
	"slices"
	"strings"
	"sync"
)

// stderrLog logs each line a server writes on stderr, redacted, at
// debug level, and keeps the end of it.
type stderrLog struct {
	tail   *tailBuffer
	log    *slog.Logger
	server string
	redact func(string) string

	mu      sync.Mutex
	partial []byte
}

func (w *stderrLog) Write(p []byte) (int, error) {
	_, _ = w.tail.Write(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := slices.Index(w.partial, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimRight(string(w.partial[:i]), "\r")
		w.partial = w.partial[i+1:]
		if line != "" {
			w.log.Debug("MCP server stderr", "server", w.server, "line", w.redact(line))
		}
	}
	if len(w.partial) > 4096 {
		w.partial = w.partial[len(w.partial)-4096:]
	}
	return len(p), nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
