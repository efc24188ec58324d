package server

import (
	"context"
	"fmt"
	"os"
	"runtime"
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
	// entered has a value once a Write waits at the gate.
	entered chan struct{}
}

func newGateLink() *gateLink {
	return &gateLink{open: make(chan struct{}), closed: make(chan Close, 1), entered: make(chan struct{}, 1)}
}

func (l *gateLink) Write(ctx context.Context, frames [][]byte) error {
	select {
	case l.entered <- struct{}{}:
	default:
	}
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
// limit of a face cuts its client off sooner. In a synctest bubble the
// polling below is on the bubble's clock: it ends the moment the writer
// has nothing left to do, however loaded the machine is.
func TestReplaceMoreAndFaceQueueLimit(t *testing.T) {
	synctest.Test(t, testReplaceMoreAndFaceQueueLimit)
}

func testReplaceMoreAndFaceQueueLimit(t *testing.T) {
	s := newEnv(t).start(t, Limits{})
	l := newGateLink()
	c, err := s.Attach(l, ClientOptions{Face: "test", Transport: "test", MaxQueuedBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// The writer takes the first frame and blocks on it.
	c.Send([]byte("first"))
	<-l.entered
	c.SendFrame(Frame{Data: []byte("p1"), Key: FrameKey{Name: "progress"}, Replace: true})
	c.SendFrame(Frame{Data: []byte("critical-1"), More: [][]byte{[]byte("critical-1b")}})
	c.SendFrame(Frame{Data: []byte("p2"), Key: FrameKey{Name: "progress"}, Replace: true})
	c.Send([]byte("critical-2"))
	c.SendFrame(Frame{Data: []byte("p3"), Key: FrameKey{Name: "progress"}, Replace: true})
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

// Lazy frames wait up to BroadcastLinger for company and then go out in one
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
		c.SendFrame(Frame{Data: []byte("l1"), Linger: BroadcastLinger})
		time.Sleep(BroadcastLinger / 2)
		c.SendFrame(Frame{Data: []byte("l2"), Linger: BroadcastLinger})
		check("before BroadcastLinger", "")
		time.Sleep(BroadcastLinger / 2)
		check("at BroadcastLinger", "[l1 l2]")

		c.SendFrame(Frame{Data: []byte("l3"), Linger: BroadcastLinger})
		c.Send([]byte("now"))
		check("after a frame that is not lazy", "[l1 l2] [l3 now]")

		c.SendFrame(Frame{Data: []byte("l5"), Linger: BroadcastLinger})
		c.Close(Close{})
		<-c.Done()
		check("after Close", "[l1 l2] [l3 now] [l5]")
	})
}

// A stream's deltas wait at most StreamLinger, counted from the first of
// them, and go out in one write in their order; a frame without Linger
// takes the waiting ones along at once; a delta queued behind a broadcast
// frame brings the broadcast's send forward to its own, shorter linger.
func TestStreamDeltasLingerBriefly(t *testing.T) {
	step := StreamLinger / 5
	tests := []struct {
		name string
		run  func(t *testing.T, c *Client, l *batchLink)
		want string // what was written in the end, batch by batch
	}{{
		name: "deltas go out together within the linger",
		run: func(t *testing.T, c *Client, l *batchLink) {
			for _, d := range []string{"d1", "d2", "d3"} {
				c.SendFrame(Frame{Data: []byte(d), Linger: StreamLinger})
				time.Sleep(step)
			}
			// 3 steps in: nothing yet. At StreamLinger after d1, all.
			time.Sleep(StreamLinger - 3*step - time.Nanosecond)
			synctest.Wait()
			if got := l.written(); got != "" {
				t.Fatalf("before the linger: written %s", got)
			}
			time.Sleep(time.Nanosecond)
		},
		want: "[d1 d2 d3]",
	}, {
		name: "a frame without linger takes the deltas along at once",
		run: func(t *testing.T, c *Client, l *batchLink) {
			c.SendFrame(Frame{Data: []byte("d1"), Linger: StreamLinger})
			c.SendFrame(Frame{Data: []byte("d2"), Linger: StreamLinger})
			c.Send([]byte("end"))
		},
		want: "[d1 d2 end]",
	}, {
		name: "a delta brings a waiting broadcast frame forward",
		run: func(t *testing.T, c *Client, l *batchLink) {
			c.SendFrame(Frame{Data: []byte("b1"), Linger: BroadcastLinger})
			time.Sleep(step)
			c.SendFrame(Frame{Data: []byte("d1"), Linger: StreamLinger})
			time.Sleep(StreamLinger)
		},
		want: "[b1 d1]",
	}, {
		name: "the next deltas start a new linger",
		run: func(t *testing.T, c *Client, l *batchLink) {
			c.SendFrame(Frame{Data: []byte("d1"), Linger: StreamLinger})
			time.Sleep(StreamLinger + step)
			c.SendFrame(Frame{Data: []byte("d2"), Linger: StreamLinger})
			time.Sleep(StreamLinger)
		},
		want: "[d1] [d2]",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newEnv(t).start(t, Limits{})
				l := &batchLink{}
				c, err := s.Attach(l, ClientOptions{Face: "test", Transport: "test"})
				if err != nil {
					t.Fatal(err)
				}
				tt.run(t, c, l)
				synctest.Wait()
				if got := l.written(); got != tt.want {
					t.Fatalf("written %s, want %s", got, tt.want)
				}
				c.Close(Close{})
				<-c.Done()
			})
		})
	}
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
// frame queued for each of 200 clients, sent at once or with
// BroadcastLinger, at a pace the writers keep up with (as commands
// come), so that eager frames go out one write each. It reports writes
// and the process's CPU time per frame delivered.
func BenchmarkBroadcast(b *testing.B) {
	frame := []byte(`{"type":"command_finished","data":{"commandId":"bench-000123.g0.0","commandType":"get_state","sessionId":"bench-000123","dependsOn":[],"success":true}}`)
	for _, linger := range []time.Duration{0, BroadcastLinger} {
		b.Run(fmt.Sprintf("linger=%s", linger), func(b *testing.B) {
			benchFrames(b, 200, func(s *Server, _ []*Client) {
				s.EachClient("bench", func(c *Client) { c.SendFrame(Frame{Data: frame, Linger: linger}) })
			})
		})
	}
}

// BenchmarkStreamLinger is a stream's deltas to 50 clients, a delta each
// per op and an op per millisecond (a fast model), with each Linger:
// writes per frame fall as frames wait for company. It reports writes,
// heap allocations and the process's CPU time per frame delivered.
func BenchmarkStreamLinger(b *testing.B) {
	frame := []byte(`{"type":"event","sessionId":"bench-000123","seq":1234,"event":{"type":"message_update","assistantMessageEvent":{"type":"text_delta","contentIndex":0,"delta":"w42 "}}}`)
	for _, linger := range []time.Duration{0, 2 * time.Millisecond, StreamLinger, 10 * time.Millisecond} {
		b.Run(fmt.Sprintf("linger=%s", linger), func(b *testing.B) {
			benchFrames(b, 50, func(_ *Server, clients []*Client) {
				for _, c := range clients {
					c.SendFrame(Frame{Data: frame, Linger: linger})
				}
			})
		})
	}
}

// benchFrames attaches n clients writing to /dev/null and calls send once
// per op, an op a millisecond; send queues one frame for each client. It
// reports writes, heap allocations and the process's CPU time per frame
// delivered.
func benchFrames(b *testing.B, n int, send func(s *Server, clients []*Client)) {
	s := newEnv(b).start(b, Limits{})
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer devnull.Close()
	var writes atomic.Int64
	clients := make([]*Client, n)
	for i := range clients {
		if clients[i], err = s.Attach(&nullLink{f: devnull, writes: &writes}, ClientOptions{Face: "bench", Transport: "test"}); err != nil {
			b.Fatal(err)
		}
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for range b.N {
		send(s, clients)
		time.Sleep(time.Millisecond)
	}
	for _, c := range clients {
		c.Close(Close{})
	}
	for _, c := range clients {
		<-c.Done()
	}
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	frames := float64(b.N) * float64(len(clients))
	b.ReportMetric(float64(writes.Load())/frames, "writes/frame")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/frames, "allocs/frame")
	b.ReportMetric(float64(cpuTime(b)-cpu0)/frames, "cpu-ns/frame")
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Frames that come unencoded (Merge without Data) are encoded when the
// writer takes them: alone, from their own text; joined, once, from every
// text they replace in order, with the newest seq and state. A frame
// without Merge that supersedes one keeps what it needs to be encoded.
func TestDeferredFramesJoinAndEncodeWhenWritten(t *testing.T) {
	s := newEnv(t).start(t, Limits{})
	l := newGateLink()
	c, err := s.Attach(l, ClientOptions{Face: "test", Transport: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var encodes atomic.Int64
	enc := func(k FrameKey, seq uint64, text string, state any) []byte {
		encodes.Add(1)
		return fmt.Appendf(nil, "%s/%d/%s/%v", k.Name, seq, text, state)
	}
	deferred := func(name string, seq uint64, text, state string) Frame {
		return Frame{Key: FrameKey{Scope: "s", Name: name}, Seq: seq, Text: text, Merge: enc, State: state, Size: 10 + len(text)}
	}
	// However far the writer got before its write blocked, more than
	// mergeAfter waits: what comes next merges.
	c.Send([]byte("first"))
	c.Send([]byte(strings.Repeat("x", mergeAfter)))
	c.SendFrame(deferred("k", 1, "a", "s1"))
	c.SendFrame(deferred("k", 2, "b", "s2"))
	c.SendFrame(deferred("k", 3, "c", "s3"))
	c.SendFrame(deferred("other", 4, "d", "s4"))
	c.SendFrame(Frame{Data: []byte("plain"), Key: FrameKey{Scope: "s", Name: "p"}})
	c.SendFrame(deferred("p", 5, "e", "s5")) // merges into a frame that cannot: supersedes it
	if n := encodes.Load(); n != 0 {
		t.Fatalf("%d frames encoded before a writer took them", n)
	}
	close(l.open)
	c.Close(Close{})
	<-c.Done()
	got := l.written()
	if len(got) < 2 {
		t.Fatalf("written %q", got)
	}
	want := []string{"k/3/abc/s3", "other/4/d/s4", "p/5/e/s5"}
	if rest := got[2:]; strings.Join(rest, " ") != strings.Join(want, " ") {
		t.Fatalf("written %q, want %q", rest, want)
	}
	if n := encodes.Load(); n != 3 {
		t.Errorf("%d encodings, want 3", n)
	}
	if c.QueuedBytes() != 0 {
		t.Errorf("%d bytes still counted as queued", c.QueuedBytes())
	}
}
