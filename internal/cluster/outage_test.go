package cluster

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd-dev/agentd/internal/cluster/embeddednats"
)

// A renewal whose write landed but whose answer was lost (NATS went away
// between the two) leaves the bucket a revision ahead of the lease. The
// next renewal finds the bucket still naming this node at this epoch and
// goes on; it ended the lease before ("the bucket changed under it"), and
// every owner lost its sessions over a restart of NATS.
func TestRenewAfterUnansweredWrite(t *testing.T) {
	a, b, ctx := pair(t)
	cases := []struct {
		name string
		// land plays what reached the bucket behind the lease's back.
		land     func(l *Lease)
		wantLost bool
	}{
		{"own write landed", func(l *Lease) {
			if _, err := a.kv.Update(ctx, l.sessionID, a.value(l.epoch, time.Now()), l.rev); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"two own writes landed", func(l *Lease) {
			rev, err := a.kv.Update(ctx, l.sessionID, a.value(l.epoch, time.Now()), l.rev)
			if err == nil {
				_, err = a.kv.Update(ctx, l.sessionID, a.value(l.epoch, time.Now()), rev)
			}
			if err != nil {
				t.Fatal(err)
			}
		}, false},
		{"another node's", func(l *Lease) {
			if _, err := a.kv.Update(ctx, l.sessionID, b.value(0, time.Now()), l.rev); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"this node at another epoch", func(l *Lease) {
			if _, err := a.kv.Update(ctx, l.sessionID, a.value(l.epoch+100, time.Now()), l.rev); err != nil {
				t.Fatal(err)
			}
		}, true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a.renewPaused.Store(true)
			defer a.renewPaused.Store(false)
			l := acquire(ctx, t, a, "unanswered-"+strconv.Itoa(i))
			tc.land(l)
			err := l.Renew(ctx)
			if lost := l.Err() != nil; lost != tc.wantLost {
				t.Fatalf("lease lost = %v (Renew: %v), want %v", lost, err, tc.wantLost)
			}
			if tc.wantLost {
				return
			}
			if err != nil {
				t.Fatalf("Renew: %v", err)
			}
			if err := l.Valid(ctx); err != nil {
				t.Fatalf("Valid after the renewal: %v", err)
			}
			tc.land(l) // and once more before a release
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release after an unanswered write: %v", err)
			}
		})
	}
}

// NATS restarts (same address, same store) for a few seconds, shorter
// than the lease, while the owner of a session publishes its events and
// appends its transcript: the owner keeps its lease at the same epoch, its
// writes wait for NATS and go on in order, and the stream has every event
// and every transcript line exactly once. A node that follows the session
// from before the outage gets every event after it, each once.
func TestNATSRestartShorterThanTheLease(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	dir := t.TempDir()
	srv, err := embeddednats.Start(embeddednats.Config{StoreDir: dir, Nkey: testKey.PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	var again *embeddednats.Server
	t.Cleanup(func() {
		if again != nil {
			again.Shutdown()
		}
	})
	// A lease of 9 s renewed every 3 s: the outage below is well inside it
	// on a loaded machine.
	joinTTL := func(id string) *Node {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		n, err := Join(ctx, Config{Key: testKey, NodeID: id, URL: srv.ClientURL(), LeaseTTL: 9 * time.Second, RequestTimeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	a, b := joinTTL("a"), joinTTL("b")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	l := acquire(ctx, t, a, "outage")
	epoch := l.Epoch()

	var (
		mu   sync.Mutex
		got  []uint64
		seen = make(chan uint64, 1024)
	)
	f, err := b.Follow(ctx, "outage", 0, func(e Event) {
		mu.Lock()
		got = append(got, e.Seq)
		mu.Unlock()
		select {
		case seen <- e.Seq:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()

	const total = 300
	mirror := l.TranscriptMirror()
	written := make(chan uint64, total)
	writeErr := make(chan error, 1)
	go func() {
		defer close(written)
		if err := mirror([]byte(`{"type":"session","id":"outage"}` + "\n")); err != nil {
			writeErr <- err
			return
		}
		for seq := uint64(1); seq <= total; seq++ {
			if _, err := a.Publish(ctx, "outage", seq, []byte(`{"n":`+strconv.FormatUint(seq, 10)+`}`)); err != nil {
				writeErr <- fmt.Errorf("event %d: %w", seq, err)
				return
			}
			if err := mirror([]byte(`{"line":` + strconv.FormatUint(seq, 10) + "}\n")); err != nil {
				writeErr <- fmt.Errorf("transcript line %d: %w", seq, err)
				return
			}
			written <- seq
		}
	}()
	waitSeq := func(ch <-chan uint64, want uint64, what string) {
		t.Helper()
		for {
			select {
			case s, ok := <-ch:
				if !ok {
					t.Fatalf("%s: the writer stopped: %v", what, <-writeErr)
				}
				if s >= want {
					return
				}
			case err := <-writeErr:
				t.Fatalf("%s: %v", what, err)
			case <-ctx.Done():
				t.Fatalf("%s: %v", what, ctx.Err())
			}
		}
	}
	waitSeq(written, 50, "before the outage")
	srv.Shutdown()
	down := time.Now()
	waitConnected(t, a, false)
	// The outage: a few seconds with NATS gone, as a restart of it.
	time.Sleep(3 * time.Second)
	again, err = embeddednats.Start(embeddednats.Config{StoreDir: dir, Nkey: testKey.PublicKey(), Listen: u.Host})
	if err != nil {
		t.Fatal(err)
	}
	waitConnected(t, a, true)
	waitSeq(written, total, "after the outage")
	recovered := time.Since(down)
	if err := l.Err(); err != nil {
		t.Fatalf("the owner lost its lease over a NATS restart shorter than it: %v", err)
	}
	if err := l.Valid(ctx); err != nil || l.Epoch() != epoch {
		t.Fatalf("after the outage: Valid %v, epoch %d (was %d)", err, l.Epoch(), epoch)
	}
	evs, err := b.Replay(ctx, "outage", 0)
	if err != nil {
		t.Fatal(err)
	}
	lost, dup := countSeqs(eventSeqs(evs), total)
	if lost != 0 || dup != 0 {
		t.Errorf("the stream after the outage: %d events lost, %d duplicated", lost, dup)
	}
	data, _, err := b.readTranscript(ctx, "outage")
	if err != nil {
		t.Fatal(err)
	}
	for seq := 1; seq <= total; seq++ {
		if c := bytes.Count(data, []byte(`{"line":`+strconv.Itoa(seq)+"}\n")); c != 1 {
			t.Errorf("transcript line %d is stored %d times", seq, c)
		}
	}
	// The follower on b catches up, or says why it stopped.
	deadline := time.After(time.Minute)
	for {
		mu.Lock()
		n := len(got)
		var last uint64
		if n > 0 {
			last = got[n-1]
		}
		mu.Unlock()
		if last == total {
			break
		}
		select {
		case <-seen:
		case <-f.Done():
			t.Fatalf("the follow on b stopped: %v", f.Err())
		case <-deadline:
			t.Fatalf("the follow on b stopped at %d of %d, no error (%v)", last, total, f.Err())
		}
	}
	mu.Lock()
	flost, fdup := countSeqs(got, total)
	mu.Unlock()
	if flost != 0 || fdup != 0 {
		t.Errorf("the follower: %d events lost, %d duplicated", flost, fdup)
	}
	// The follow's live subscription came back with the connection: an
	// event sent only live reaches it.
	if err := a.PublishLive("outage", []Event{{Seq: total + 1, Data: []byte(`{"live":true}`)}}); err != nil {
		t.Fatal(err)
	}
	for last := uint64(0); last != total+1; {
		select {
		case last = <-seen:
		case <-deadline:
			t.Fatalf("the follow on b did not get the live event after the outage")
		}
	}
	t.Logf("NATS restart of ~3 s: %d events and transcript lines, lost 0, duplicated 0; the writer was done %v after NATS went down", total, recovered.Round(time.Millisecond))
}

func eventSeqs(evs []Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

// countSeqs counts the seqs of 1..total missing from seqs, and those
// that came more than once.
func countSeqs(seqs []uint64, total uint64) (lost, dup int) {
	seen := map[uint64]int{}
	for _, s := range seqs {
		seen[s]++
	}
	for s := uint64(1); s <= total; s++ {
		switch c := seen[s]; {
		case c == 0:
			lost++
		case c > 1:
			dup += c - 1
		}
	}
	return lost, dup
}
