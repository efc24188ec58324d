package cluster

import (
	"context"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// linkProxy is one node's link to NATS, which a test can cut (every
// connection closed, new ones refused) and heal: a partition of that
// node alone.
type linkProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns []net.Conn
	wg    sync.WaitGroup
}

func newLinkProxy(t *testing.T, target string) *linkProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.setCut(true)
		p.wg.Wait()
	})
	return p
}

func (p *linkProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *linkProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); _, _ = io.Copy(up, c); up.Close() }()
		go func() { defer p.wg.Done(); _, _ = io.Copy(c, up); c.Close() }()
	}
}

func (p *linkProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

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
	proxy := newLinkProxy(t, u.Host)
	b := join(t, proxy.url(), "b")
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
	proxy.setCut(true)
	waitConnected(t, b, false)
	publish(21, 120) // while b is cut off
	proxy.setCut(false)
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
