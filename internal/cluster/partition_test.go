package cluster

import (
	"context"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd-dev/agentd/internal/cluster/clustertest"
)

// A node cut off from NATS while it follows a session (the owner, on
// another link, goes on publishing) delivers every event once its link
// heals: it follows again from the last seq it delivered, with nothing
// missed and nothing twice. Before, such a follow could stay silent,
// without an error, for good.
func TestFollowAfterPartitionHeals(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	srv := startServer(t)
	a := join(t, srv.ClientURL(), "a")
	u, err := url.Parse(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := clustertest.NewLink(t, u.Host)
	b := join(t, "nats://"+proxy.Addr(), "b")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	l := acquire(ctx, t, a, "cut")
	_ = l

	var (
		mu  sync.Mutex
		got []uint64
	)
	progress := make(chan struct{}, 1)
	f, err := b.Follow(ctx, "cut", 0, func(e Event) {
		mu.Lock()
		got = append(got, e.Seq)
		mu.Unlock()
		select {
		case progress <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	publish := func(from, to uint64) {
		t.Helper()
		for seq := from; seq <= to; seq++ {
			if _, err := a.Publish(ctx, "cut", seq, []byte(strconv.FormatUint(seq, 10))); err != nil {
				t.Fatalf("event %d: %v", seq, err)
			}
		}
	}
	waitGot := func(want uint64) {
		t.Helper()
		deadline := time.After(time.Minute)
		for {
			mu.Lock()
			n := len(got)
			last := uint64(0)
			if n > 0 {
				last = got[n-1]
			}
			mu.Unlock()
			if last >= want {
				return
			}
			select {
			case <-progress:
			case <-f.Done():
				t.Fatalf("the follow stopped at %d: %v", last, f.Err())
			case <-deadline:
				t.Fatalf("the follow is silent at seq %d of %d, no error", last, want)
			}
		}
	}
	publish(1, 20)
	waitGot(20)
	proxy.SetCut(true)
	waitConnected(t, b, false)
	publish(21, 120) // while b is cut off
	proxy.SetCut(false)
	healed := time.Now()
	waitConnected(t, b, true)
	publish(121, 150)
	waitGot(150)
	mu.Lock()
	lost, dup := countSeqs(got, 150)
	mu.Unlock()
	if lost != 0 || dup != 0 {
		t.Errorf("the follow across the partition: %d lost, %d duplicated", lost, dup)
	}
	t.Logf("partition of one node healed: 150 events, lost 0, duplicated 0, caught up %v after the heal", time.Since(healed).Round(time.Millisecond))
}
