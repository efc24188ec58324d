package piserver

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// countLink is a client that reads everything at once and keeps nothing:
// it counts the frames and bytes it gets and says when a run ended.
type countLink struct {
	frames, bytes atomic.Int64
	mu            sync.Mutex
	ends          int
	cond          *sync.Cond
}

func newCountLink() *countLink {
	l := &countLink{}
	l.cond = sync.NewCond(&l.mu)
	return l
}

var agentEnd = []byte(`"event":{"type":"agent_end"`)

func (l *countLink) write(_ context.Context, f []byte) error {
	l.frames.Add(1)
	l.bytes.Add(int64(len(f)))
	// An event's type is within its first hundred bytes.
	if bytes.Contains(f[:min(len(f), 120)], agentEnd) {
		l.mu.Lock()
		l.ends++
		l.cond.Broadcast()
		l.mu.Unlock()
	}
	return nil
}

func (l *countLink) close(int, string) {}

func (l *countLink) waitEnds(n int) {
	l.mu.Lock()
	for l.ends < n {
		l.cond.Wait()
	}
	l.mu.Unlock()
}

// cpuTime is the CPU this process has used, every thread.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStreamPath is the whole stream path of this face, per token:
// the faux model streams a 2,000-token answer as fast as it can (a word a
// chunk), the session emits, fanOut encodes and queues, the client's
// writer writes to a client that reads at once. Per token: CPU time (every
// goroutine: the model, the session, the writer) and allocations; and how
// many frames reached the client. In pi's full format a client that falls
// behind gets joined frames, so what the server pays depends on what it
// sends, not on what it emits.
func BenchmarkStreamPath(b *testing.B) {
	const tokens = 2000
	prompt := words(tokens - 2) // "You said: " and the words
	for _, format := range []string{"full", "delta"} {
		b.Run(format, func(b *testing.B) {
			// Two commands an answer: no rate limit may refuse them.
			fx := newFixture(b, fixtureConfig{opts: func(o *testOptions) { o.Limits.SessionRate, o.Limits.GlobalRate = 1<<30, 1<<30 }})
			fx.srv.codec.delta = format == "delta"
			l := newCountLink()
			c := newConn(fx.srv, "test", l)
			if err := c.start(); err != nil {
				b.Fatal(err)
			}
			c.handle([]byte(`{"type":"create_session","id":"c","sessionId":"s1"}`))
			n := 0
			run := func() {
				n++
				c.handle(fmt.Appendf(nil, `{"type":"prompt","id":"p%d","sessionId":"s1","message":%q}`, n, prompt))
				l.waitEnds(n)
			}
			run() // warm up
			// The conversation grows each run; start from a new one would
			// cost a session's creation per op. A fresh session per run
			// keeps every run alike.
			b.ReportAllocs()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			f0, by0, cpu0 := l.frames.Load(), l.bytes.Load(), cpuTime()
			for b.Loop() {
				c.handle(fmt.Appendf(nil, `{"type":"new_session","id":"n%d","sessionId":"s1"}`, n))
				run()
			}
			cpu := cpuTime() - cpu0
			runtime.ReadMemStats(&m1)
			per := float64(b.N * tokens)
			b.ReportMetric(float64(cpu.Nanoseconds())/per, "cpu-ns/token")
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/per, "allocs/token")
			b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/per, "B/token")
			b.ReportMetric(float64(l.frames.Load()-f0)/float64(b.N), "frames/answer")
			b.ReportMetric(float64(l.bytes.Load()-by0)/per, "bytes/token")
			c.closed()
			<-c.done()
		})
	}
}
