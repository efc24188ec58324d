package ndjson

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lockedBuffer is a bytes.Buffer safe to read while the writer writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// gate blocks every write until opened.
type gate struct {
	open chan struct{}
	lockedBuffer
}

func (g *gate) Write(p []byte) (int, error) {
	<-g.open
	return g.lockedBuffer.Write(p)
}

type failing struct{ n int }

func (f *failing) Write(p []byte) (int, error) {
	f.n++
	return 0, errors.New("gone")
}

func TestWriter(t *testing.T) {
	t.Run("lines in order, each with its newline, large ones in chunks", func(t *testing.T) {
		var buf lockedBuffer
		w := New(&buf)
		var want strings.Builder
		for i := range 1000 {
			line := fmt.Sprintf(`{"n":%d,"pad":%q}`, i, strings.Repeat("x", i*7))
			w.Write([]byte(line))
			want.WriteString(line + "\n")
		}
		w.Close()
		if buf.String() != want.String() {
			t.Fatalf("wrote %d bytes, want %d", len(buf.String()), want.Len())
		}
	})
	t.Run("a reader that does not read never blocks Write", func(t *testing.T) {
		g := &gate{open: make(chan struct{})}
		w := New(g)
		for range 10000 {
			w.Write([]byte(`{"queued":true}`))
		}
		close(g.open)
		w.Close()
		if n := strings.Count(g.String(), "\n"); n != 10000 {
			t.Fatalf("%d lines, want 10000", n)
		}
	})
	t.Run("after a failed write later lines are dropped", func(t *testing.T) {
		f := &failing{}
		w := New(f)
		w.Write([]byte("a"))
		w.Close()
		w.Write([]byte("b"))
		if f.n != 1 {
			t.Fatalf("%d writes after the failure, want the one that failed", f.n)
		}
	})
}
