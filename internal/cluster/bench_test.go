package cluster

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/cluster/embeddednats"
	"github.com/agentd-dev/agentd/internal/pipeline"
)

func benchNodes(b *testing.B) (*Node, *Node) {
	b.Helper()
	e, err := embeddednats.Start(embeddednats.Config{StoreDir: b.TempDir(), Nkey: testKey.PublicKey()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.Shutdown)
	var ns [2]*Node
	for i := range ns {
		n, err := Join(b.Context(), Config{Key: testKey, NodeID: "n" + strconv.Itoa(i), URL: e.ClientURL(), LeaseTTL: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { n.Close() })
		ns[i] = n
	}
	return ns[0], ns[1]
}

// BenchmarkSendNode is a request from one node to another (ServeNode)
// and its answer, one at a time: the round trip a command for a session
// owned elsewhere makes.
func BenchmarkSendNode(b *testing.B) {
	owner, client := benchNodes(b)
	ctx := b.Context()
	stop, err := owner.ServeNode(ctx, func(_ context.Context, p []byte, reply func([]byte, error)) { reply(p, nil) })
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	payload := []byte(`{"type":"prompt","message":"hi"}`)
	errs := make(chan error, 1)
	done := func(_ []byte, err error) { errs <- err }
	for b.Loop() {
		client.SendNode(ctx, owner.ID(), payload, done)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublish is one event into the stream, acknowledged.
func BenchmarkPublish(b *testing.B) {
	owner, _ := benchNodes(b)
	ctx := b.Context()
	if _, err := owner.Acquire(ctx, "s1"); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 256)
	var seq uint64
	for b.Loop() {
		seq++
		if _, err := owner.Publish(ctx, "s1", seq, payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenew is one lease renewal; the renewal goroutine does this for
// every held session each TTL/3, so sessions per node per second of
// renewal work is about 1/this.
func BenchmarkRenew(b *testing.B) {
	owner, _ := benchNodes(b)
	ctx := b.Context()
	l, err := owner.Acquire(ctx, "s1")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := l.Renew(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplayTail resumes near the end of a long session among others.
func BenchmarkReplayTail(b *testing.B) {
	owner, reader := benchNodes(b)
	ctx := b.Context()
	for _, id := range []string{"s1", "other"} {
		if _, err := owner.Acquire(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
	const n = 2000
	for seq := uint64(1); seq <= n; seq++ {
		for _, id := range []string{"s1", "other"} {
			if _, err := owner.Publish(ctx, id, seq, []byte("event")); err != nil {
				b.Fatal(err)
			}
		}
	}
	for b.Loop() {
		evs, err := reader.Replay(ctx, "s1", n-10)
		if err != nil || len(evs) != 10 {
			b.Fatalf("%d events, %v", len(evs), err)
		}
	}
}

// BenchmarkTakeover1000 kills a node owning 1,000 sessions (Close: no
// release) and has another take them all over, polling as a real taker
// would. It reports the time from the kill until the last session was
// taken (at most TTL plus the taking itself) and the takeovers per second
// once the leases had expired.
func BenchmarkTakeover1000(b *testing.B) {
	const sessions = 1000
	const ttl = time.Second
	b.StopTimer()
	for range b.N {
		e, err := embeddednats.Start(embeddednats.Config{StoreDir: b.TempDir(), Nkey: testKey.PublicKey()})
		if err != nil {
			b.Fatal(err)
		}
		dead, err := Join(b.Context(), Config{Key: testKey, NodeID: "dead", URL: e.ClientURL(), LeaseTTL: ttl})
		if err != nil {
			b.Fatal(err)
		}
		taker, err := Join(b.Context(), Config{Key: testKey, NodeID: "taker", URL: e.ClientURL(), LeaseTTL: ttl})
		if err != nil {
			b.Fatal(err)
		}
		ids := make([]string, sessions)
		for i := range ids {
			ids[i] = "s" + strconv.Itoa(i)
			if _, err := dead.Acquire(b.Context(), ids[i]); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		killed := time.Now()
		dead.Close()
		var firstTaken time.Time
		for len(ids) > 0 {
			rest := ids[:0]
			for _, id := range ids {
				if _, err := taker.Takeover(b.Context(), id); err != nil {
					rest = append(rest, id)
				} else if firstTaken.IsZero() {
					firstTaken = time.Now()
				}
			}
			ids = rest
			if len(ids) > 0 {
				time.Sleep(ttl / 20)
			}
		}
		done := time.Now()
		b.ReportMetric(float64(done.Sub(killed).Milliseconds()), "ms-to-all-taken")
		b.ReportMetric(sessions/done.Sub(firstTaken).Seconds(), "takeovers/s")
		b.StopTimer()
		taker.Close()
		e.Shutdown()
	}
}

// BenchmarkTakeoverState takes over sessions that have state, reading it
// as the serve wiring does when it claims one (server.clusterState.claim
// and the journal adoption after it): the lease, the last event's seq,
// the transcript restored to a file, and the command journal, each read
// ending with its fence. Each session has a transcript of a header and
// 20 entries and a journal of 5 commands (10 records); a session with a
// transcript and no journal is in the "no-journal" case. It reports the
// time per session taken over.
func BenchmarkTakeoverState(b *testing.B) {
	const sessions = 100
	for _, bc := range []struct {
		name     string
		entries  int
		commands int
	}{
		{"typical", 20, 5},
		{"no-journal", 20, 0},
		{"fresh", 0, 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			entry := []byte(`{"type":"message","message":"` + strings.Repeat("x", 400) + `"}` + "\n")
			header := []byte(`{"type":"session","version":3,"id":"s"}` + "\n")
			b.StopTimer()
			var perSession time.Duration
			for range b.N {
				owner, taker := benchNodes(b)
				ctx := b.Context()
				ids := make([]string, sessions)
				for i := range ids {
					ids[i] = "s" + strconv.Itoa(i)
					l, err := owner.Acquire(ctx, ids[i])
					if err != nil {
						b.Fatal(err)
					}
					if _, err := owner.Publish(ctx, ids[i], 1, []byte("event")); err != nil {
						b.Fatal(err)
					}
					mirror := l.TranscriptMirror()
					if err := mirror(header); err != nil {
						b.Fatal(err)
					}
					for range bc.entries {
						if err := mirror(entry); err != nil {
							b.Fatal(err)
						}
					}
					j := owner.Journal()
					for c := range bc.commands {
						r := pipeline.Record{Op: pipeline.OpBegin, Command: "set_name", ID: "c" + strconv.Itoa(c),
							Scope: "session:" + ids[i], At: time.Now(), Expires: time.Now().Add(time.Hour)}
						if err := j.Append(r); err != nil {
							b.Fatal(err)
						}
						r.Op = pipeline.OpFinish
						r.Response = &pipeline.Response{ID: r.ID, Command: r.Command, Success: true}
						if err := j.Append(r); err != nil {
							b.Fatal(err)
						}
					}
				}
				if err := owner.Drain(ctx); err != nil {
					b.Fatal(err)
				}
				dir := b.TempDir()
				b.StartTimer()
				start := time.Now()
				for _, id := range ids {
					if _, err := taker.Acquire(ctx, id); err != nil {
						b.Fatal(err)
					}
					if _, err := taker.LastSeq(ctx, id); err != nil {
						b.Fatal(err)
					}
					if _, err := taker.RestoreTranscript(ctx, id, filepath.Join(dir, id+".jsonl")); err != nil {
						b.Fatal(err)
					}
					if _, err := taker.JournalFor(ctx, id); err != nil {
						b.Fatal(err)
					}
				}
				perSession += time.Since(start) / sessions
				b.StopTimer()
			}
			b.ReportMetric(float64(perSession.Microseconds())/float64(b.N), "µs/session")
		})
	}
}
