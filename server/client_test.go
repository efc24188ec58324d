package server

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// gateLink holds every write until opened, as a client that stopped
// reading, and records what was written.
type gateLink struct {
	mu     sync.Mutex
	open   chan struct{}
	frames []string
	closed chan Close
}

func newGateLink() *gateLink {
	return &gateLink{open: make(chan struct{}), closed: make(chan Close, 1)}
}

func (l *gateLink) Write(ctx context.Context, frames [][]byte) error {
	select {
	case <-l.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range frames {
		l.frames = append(l.frames, string(f))
	}
	return nil
}

func (l *gateLink) Close(c Close) {
	select {
	case l.closed <- c:
	default:
	}
}

func (l *gateLink) written() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.frames...)
}

// A frame with Replace takes the place of the waiting frame with its key
// wherever it waits; More go out right after their frame; a lower queue
// limit of a face cuts its client off sooner.
func TestReplaceMoreAndFaceQueueLimit(t *testing.T) {
	s := newEnv(t).start(t, Limits{})
	l := newGateLink()
	c, err := s.Attach(l, ClientOptions{Face: "test", Transport: "test", MaxQueuedBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// The writer takes the first frame and blocks on it.
	c.Send([]byte("first"))
	time.Sleep(20 * time.Millisecond)
	c.SendFrame(Frame{Data: []byte("p1"), Key: "progress", Replace: true})
	c.SendFrame(Frame{Data: []byte("critical-1"), More: [][]byte{[]byte("critical-1b")}})
	c.SendFrame(Frame{Data: []byte("p2"), Key: "progress", Replace: true})
	c.Send([]byte("critical-2"))
	c.SendFrame(Frame{Data: []byte("p3"), Key: "progress", Replace: true})
	close(l.open)
	deadline := time.Now().Add(5 * time.Second)
	want := "first critical-1 critical-1b critical-2 p3"
	for strings.Join(l.written(), " ") != want {
		if time.Now().After(deadline) {
			t.Fatalf("written %q, want %q", l.written(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if c.Merged() != 2 {
		t.Fatalf("merged %d, want 2", c.Merged())
	}

	// A face limit of 1 MiB: a stuck client is cut there, not at the
	// server's 64 MiB.
	l2 := newGateLink()
	c2, err := s.Attach(l2, ClientOptions{Face: "test", Transport: "test", MaxQueuedBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	big := []byte(strings.Repeat("x", 64<<10))
	for i := 0; i < 40 && !c2.Closing(); i++ {
		c2.Send(big)
	}
	if !c2.Closing() {
		t.Fatal("a client over its face's limit was not cut off")
	}
	// The close reaches the link once a write in flight is over.
	close(l2.open)
	select {
	case cl := <-l2.closed:
		if cl.Kind != CloseOverloaded || !strings.Contains(cl.Reason, fmt.Sprint(1<<20)) {
			t.Fatalf("closed %+v", cl)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cut-off client's link was not closed")
	}
	<-c2.Done()
	c.Close(Close{})
	<-c.Done()
}

// batchLink records what each Write was given.
type batchLink struct {
	mu      sync.Mutex
	batches [][]string
}

func (l *batchLink) Write(_ context.Context, frames [][]byte) error {
	b := make([]string, len(frames))
	for i, f := range frames {
		b[i] = string(f)
	}
	l.mu.Lock()
	l.batches = append(l.batches, b)
	l.mu.Unlock()
	return nil
}

func (l *batchLink) Close(Close) {}

func (l *batchLink) written() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var parts []string
	for _, b := range l.batches {
		parts = append(parts, "["+strings.Join(b, " ")+"]")
	}
	return strings.Join(parts, " ")
}

// Lazy frames wait up to lazyDelay for company and then go out in one
// write; a frame that is not lazy takes the waiting ones along at once, in
// their order; closing sends what waits.
func TestLazyFramesWaitForCompany(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newEnv(t).start(t, Limits{})
		l := &batchLink{}
		c, err := s.Attach(l, ClientOptions{Face: "test", Transport: "test"})
		if err != nil {
			t.Fatal(err)
		}
		check := func(when, want string) {
			t.Helper()
			synctest.Wait()
			if got := l.written(); got != want {
				t.Fatalf("%s: written %s, want %s", when, got, want)
			}
		}
		c.SendFrame(Frame{Data: []byte("l1"), Lazy: true})
		time.Sleep(lazyDelay / 2)
		c.SendFrame(Frame{Data: []byte("l2"), Lazy: true})
		check("before lazyDelay", "")
		time.Sleep(lazyDelay / 2)
		check("at lazyDelay", "[l1 l2]")

		c.SendFrame(Frame{Data: []byte("l3"), Lazy: true})
		c.Send([]byte("now"))
		check("after a frame that is not lazy", "[l1 l2] [l3 now]")

		c.SendFrame(Frame{Data: []byte("l5"), Lazy: true})
		c.Close(Close{})
		<-c.Done()
		check("after Close", "[l1 l2] [l3 now] [l5]")
	})
}

// nullLink makes one write(2) to /dev/null per batch, as a socket would,
// and counts the batches.
type nullLink struct {
	f      *os.File
	writes *atomic.Int64
	buf    []byte
}

func (l *nullLink) Write(_ context.Context, frames [][]byte) error {
	l.buf = l.buf[:0]
	for _, f := range frames {
		l.buf = append(l.buf, f...)
	}
	l.writes.Add(1)
	_, err := l.f.Write(l.buf)
	return err
}

func (l *nullLink) Close(Close) {}

// BenchmarkBroadcast is the global lifecycle broadcast: each op is one
// frame queued for each of 200 clients, sent eagerly (as before lazy
// frames) or lazily, at a pace the writers keep up with (as commands
// come), so that eager frames go out one write each. It reports writes
// and the process's CPU time per frame delivered.
func BenchmarkBroadcast(b *testing.B) {
	for _, lazy := range []bool{false, true} {
		b.Run(fmt.Sprintf("lazy=%v", lazy), func(b *testing.B) {
			s := newEnv(b).start(b, Limits{})
			devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer devnull.Close()
			var writes atomic.Int64
			clients := make([]*Client, 200)
			for i := range clients {
				if clients[i], err = s.Attach(&nullLink{f: devnull, writes: &writes}, ClientOptions{Face: "bench", Transport: "test"}); err != nil {
					b.Fatal(err)
				}
			}
			frame := []byte(`{"type":"command_finished","data":{"commandId":"bench-000123.g0.0","commandType":"get_state","sessionId":"bench-000123","dependsOn":[],"success":true}}`)
			cpu0 := cpuTime(b)
			b.ResetTimer()
			for range b.N {
				s.EachClient("bench", func(c *Client) { c.SendFrame(Frame{Data: frame, Lazy: lazy}) })
				time.Sleep(time.Millisecond)
			}
			for _, c := range clients {
				c.Close(Close{})
			}
			for _, c := range clients {
				<-c.Done()
			}
			b.StopTimer()
			frames := float64(b.N) * float64(len(clients))
			b.ReportMetric(float64(writes.Load())/frames, "writes/frame")
			b.ReportMetric(float64(cpuTime(b)-cpu0)/frames, "cpu-ns/frame")
		})
	}
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
