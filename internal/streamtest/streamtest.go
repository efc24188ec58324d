// Package streamtest holds what the faces' stream-path tests share: a
// server layer whose sessions answer with the faux model, the prompt of
// an answer of a given number of tokens, the allocation gate per
// streamed token, and the per-token figures a benchmark reports. It is
// test machinery: only tests import it.
package streamtest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
)

// FauxLayer returns a server layer in a new temporary directory whose
// sessions answer with p (the faux model echoes each prompt back, a word
// a chunk). It is not started: a face is made over it first, then the
// caller starts it and closes it.
func FauxLayer(tb testing.TB, p *faux.Provider) *server.Server {
	tb.Helper()
	root := tb.TempDir()
	layer, err := server.New(server.Config{
		Builder: server.BuilderFunc(func(spec sessionspec.Spec) (*session.Session, error) {
			return session.New(session.Config{Cwd: spec.Cwd, SessionsDir: spec.SessionsDir, Open: spec.Open,
				Model: faux.Model(), Stream: p.Stream, FirstSeq: spec.FirstSeq, ReserveSeq: spec.ReserveSeq})
		}),
		Cwd: root, SessionsDir: filepath.Join(root, "sessions"), StateDir: filepath.Join(root, "state"),
	})
	if err != nil {
		tb.Fatal(err)
	}
	return layer
}

// Words is n words, word000 word001 …: the prompt of a faux answer of
// n+2 tokens ("You said: " and the words), whose last word is
// Words(n)'s.
func Words(n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("word%03d", i)
	}
	return strings.Join(w, " ")
}

// AllocsPerToken is the allocations per token of run, which streams one
// answer of tokens tokens: testing.AllocsPerRun's average over 5 runs
// after a warm-up one. It skips t under the race detector, which
// allocates on its own account, and with -short.
func AllocsPerToken(t *testing.T, tokens int, run func()) float64 {
	t.Helper()
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	if testing.Short() {
		t.Skip("streams 12,000 tokens")
	}
	return testing.AllocsPerRun(5, run) / float64(tokens)
}

// CheckBudget is the allocation gate of face: it fails t when got
// allocations per streamed token are over budget, naming the stream
// path and the benchmark that finds the culprit; AGENTD_ALLOC_REPORT=1
// logs the figure when it passes.
func CheckBudget(t *testing.T, face string, got, budget float64, path, bench string) {
	t.Helper()
	if os.Getenv("AGENTD_ALLOC_REPORT") != "" {
		t.Logf("%s: %.3f allocs/token (budget %.2f)", face, got, budget)
	}
	if got > budget {
		t.Errorf("%s face: %.3f allocations per streamed token, over the budget of %.2f: something on the stream path (%s) now allocates per token; find it with go test -bench %s -memprofile, or raise the budget here with the reason", face, got, budget, path, bench)
	}
}

// Bench runs run, which streams one answer of tokens tokens, once to
// warm up and then b's loop, and reports per token the CPU of every
// goroutine, the allocations and the bytes allocated.
func Bench(b *testing.B, tokens int, run func()) {
	run() // warm up
	b.ReportAllocs()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := cpuTime()
	for b.Loop() {
		run()
	}
	cpu := cpuTime() - cpu0
	runtime.ReadMemStats(&m1)
	per := float64(b.N * tokens)
	b.ReportMetric(float64(cpu.Nanoseconds())/per, "cpu-ns/token")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/per, "allocs/token")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/per, "B/token")
}

// cpuTime is the CPU this process has used, every thread.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
