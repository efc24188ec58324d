package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// collector gathers what a Follow delivers.
type collector struct {
	mu   sync.Mutex
	seqs []uint64
	ends []uint64 // the seqs delivered without More: each message's last
	more chan struct{}
}

func newCollector() *collector { return &collector{more: make(chan struct{}, 1)} }

func (c *collector) deliver(e Event) {
	c.mu.Lock()
	c.seqs = append(c.seqs, e.Seq)
	if !e.More {
		c.ends = append(c.ends, e.Seq)
	}
	c.mu.Unlock()
	select {
	case c.more <- struct{}{}:
	default:
	}
}

// waitFor waits until the last seq delivered is last, and returns all.
func (c *collector) waitFor(t *testing.T, last uint64) []uint64 {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		got := slices.Clone(c.seqs)
		c.mu.Unlock()
		if len(got) > 0 && got[len(got)-1] >= last {
			return got
		}
		select {
		case <-c.more:
		case <-deadline:
			t.Fatalf("delivered %v, want up to %d", got, last)
		}
	}
}

func seqRange(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// A follow delivers the events after its cursor that the stream holds,
// then each new one, from whichever node publishes it (across a
// takeover), in seq order and never one twice; Stop ends it.
func TestFollow(t *testing.T) {
	ns := nodes(t, "a", "b", "c")
	a, b, c := ns[0], ns[1], ns[2]
	ctx := ctxT(t)
	acquire(ctx, t, a, "s1")
	publish := func(n *Node, from, to uint64) {
		t.Helper()
		for seq := from; seq <= to; seq++ {
			if _, err := n.Publish(ctx, "s1", seq, []byte(strconv.FormatUint(seq, 10))); err != nil {
				t.Fatal(err)
			}
			if _, err := n.Publish(ctx, "s1", seq, []byte("retry")); err != nil {
				t.Fatal(err) // a duplicate, dropped by the stream
			}
		}
	}
	publish(a, 1, 10)

	tests := []struct {
		after uint64
		want  []uint64 // before the live ones
	}{{0, seqRange(1, 10)}, {4, seqRange(5, 10)}, {10, nil}, {50, nil}}
	var follows []*Follow
	var cols []*collector
	for _, tt := range tests {
		col := newCollector()
		f, err := c.Follow(ctx, "s1", tt.after, col.deliver)
		if err != nil {
			t.Fatal(err)
		}
		follows = append(follows, f)
		cols = append(cols, col)
	}
	// b takes the session over and goes on numbering; the follows on c
	// carry on without noticing.
	forceTakeover(ctx, t, a, b, "s1")
	publish(b, 11, 15)
	for i, tt := range tests {
		want := append(slices.Clone(tt.want), seqRange(max(11, tt.after+1), 15)...)
		if tt.after >= 15 {
			want = nil
		}
		if want == nil {
			continue
		}
		if got := cols[i].waitFor(t, 15); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("follow after %d: %v, want %v", tt.after, got, want)
		}
	}
	cols[3].mu.Lock()
	if len(cols[3].seqs) != 0 {
		t.Errorf("follow after 50 delivered %v", cols[3].seqs)
	}
	cols[3].mu.Unlock()
	for _, f := range follows {
		f.Stop()
		if f.Err() != nil {
			t.Errorf("Err after Stop: %v", f.Err())
		}
	}
	// A follow of a session with no events yet gets its first one.
	col := newCollector()
	f, err := c.Follow(ctx, "fresh", 0, col.deliver)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	acquire(ctx, t, b, "fresh")
	if _, err := b.Publish(ctx, "fresh", 1, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if got := col.waitFor(t, 1); fmt.Sprint(got) != "[1]" {
		t.Errorf("follow of a new session: %v", got)
	}
}

// A node announces itself; Leave takes it out of Members (nothing new is
// placed on it) but not out of Nodes (it still answers); Remove and a
// stopped renewal's expiry take it out of both.
func TestMembership(t *testing.T) {
	a, b, ctx := pair(t)
	ma, err := a.Announce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := b.Announce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	members := func() string {
		m, err := a.Members(ctx)
		if err != nil {
			t.Fatal(err)
		}
		all, err := a.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leaving := map[string]bool{}
		for id, info := range all {
			leaving[id] = info.Leaving
		}
		return fmt.Sprint(m, leaving)
	}
	if got := members(); got != "[a b] map[a:false b:false]" {
		t.Fatalf("both announced: %s", got)
	}
	if err := mb.Advertise(ctx, "127.0.0.1:3142"); err != nil {
		t.Fatal(err)
	}
	if all, err := a.Nodes(ctx); err != nil || all["b"].Addr != "127.0.0.1:3142" {
		t.Fatalf("b's address: %+v, %v", all, err)
	}
	if err := mb.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if got := members(); got != "[a] map[a:false b:true]" {
		t.Fatalf("b leaving: %s", got)
	}
	if err := mb.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if got := members(); got != "[a] map[a:false]" {
		t.Fatalf("b removed: %s", got)
	}
	// A crash: the record stays until a lease TTL after its last renewal.
	ma.Stop()
	deadline := time.Now().Add(3 * testTTL)
	for members() != "[] map[]" {
		if time.Now().After(deadline) {
			t.Fatalf("a stopped renewing %v ago and is still listed: %s", 3*testTTL, members())
		}
		time.Sleep(testTTL / 10)
	}
}

// SendNode delivers one caller's requests in order and answers each when
// its handler does, in any order; a node nobody serves is NodeGoneError.
func TestSendNode(t *testing.T) {
	a, b, ctx := pair(t)
	var mu sync.Mutex
	var order []string
	held := make(chan func([]byte, error), 1)
	stop, err := b.ServeNode(ctx, func(_ context.Context, p []byte, reply func([]byte, error)) {
		mu.Lock()
		order = append(order, string(p))
		mu.Unlock()
		if string(p) == "0" {
			held <- reply // answered later: must not hold up the others
			return
		}
		reply(append([]byte("re "), p...), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		out string
		err error
	}
	answers := make(chan answer, 10)
	for i := range 10 {
		a.SendNode(ctx, "b", []byte(strconv.Itoa(i)), func(out []byte, err error) { answers <- answer{string(out), err} })
	}
	got := map[string]bool{}
	for range 9 {
		ans := <-answers
		if ans.err != nil {
			t.Fatal(ans.err)
		}
		got[ans.out] = true
	}
	(<-held)([]byte("re 0"), nil)
	if ans := <-answers; ans.out != "re 0" || len(got) != 9 {
		t.Fatalf("answers %v then %v", got, ans)
	}
	if want := "[0 1 2 3 4 5 6 7 8 9]"; fmt.Sprint(order) != want {
		t.Errorf("requests reached the node in order %v, want %s", order, want)
	}
	stop()
	done := make(chan error, 1)
	a.SendNode(ctx, "b", []byte("x"), func(_ []byte, err error) { done <- err })
	var gone *NodeGoneError
	if err := <-done; !errors.As(err, &gone) {
		t.Errorf("a request to a node nobody serves: %v, want NodeGoneError", err)
	}
	a.SendNode(ctx, "b.c", []byte("x"), func(_ []byte, err error) { done <- err })
	if err := <-done; err == nil || !strings.Contains(err.Error(), `"b.c" is not a node id`) {
		t.Errorf("a request to a node id that cannot be one: %v, want it named as no node id", err)
	}
}

// Close ends the requests a node has in flight and returns only once
// their done has returned, so nothing SendNode started outlives the node;
// a request sent after Close fails at once with ErrNodeClosed.
func TestSendNodeClose(t *testing.T) {
	a, b, ctx := pair(t)
	// b never answers: only Close ends the request.
	stop, err := b.ServeNode(ctx, func(context.Context, []byte, func([]byte, error)) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	var finished atomic.Bool
	ended := make(chan error, 1)
	a.SendNode(context.Background(), "b", []byte("x"), func(_ []byte, err error) {
		// Still busy when Close would return if it did not wait.
		time.Sleep(50 * time.Millisecond)
		ended <- err
		finished.Store(true)
	})
	a.Close()
	if !finished.Load() {
		t.Fatal("Close returned while a request's done was still running")
	}
	if err := <-ended; !errors.Is(err, ErrNodeClosed) {
		t.Errorf("the request in flight ended with %v, want ErrNodeClosed", err)
	}
	after := make(chan error, 1)
	a.SendNode(ctx, "b", []byte("y"), func(_ []byte, err error) { after <- err })
	if err := <-after; !errors.Is(err, ErrNodeClosed) {
		t.Errorf("a request sent after Close: %v, want ErrNodeClosed", err)
	}
}
