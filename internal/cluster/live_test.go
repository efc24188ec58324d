package cluster

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"
)

// liveCollector gathers the events a Follow delivers, with their data.
type liveCollector struct {
	mu   sync.Mutex
	evs  []Event
	more chan struct{}
}

func newLiveCollector() *liveCollector { return &liveCollector{more: make(chan struct{}, 1)} }

func (c *liveCollector) deliver(e Event) {
	c.mu.Lock()
	c.evs = append(c.evs, e)
	c.mu.Unlock()
	select {
	case c.more <- struct{}{}:
	default:
	}
}

// got is what was delivered, as seq:data, with a + after an event marked
// More.
func (c *liveCollector) got() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := ""
	for _, e := range c.evs {
		if out != "" {
			out += " "
		}
		out += fmt.Sprintf("%d:%s", e.Seq, e.Data)
		if e.More {
			out += "+"
		}
	}
	return out
}

func (c *liveCollector) last() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.evs) == 0 {
		return 0
	}
	return c.evs[len(c.evs)-1].Seq
}

// waitFor waits until an event with seq at or past seq was delivered.
func (c *liveCollector) waitFor(t *testing.T, seq uint64) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for c.last() < seq {
		select {
		case <-c.more:
		case <-deadline:
			t.Fatalf("delivered %s, want up to seq %d", c.got(), seq)
		}
	}
}

// evs makes events from..to whose data is tag and the seq.
func evs(tag string, from, to uint64) []Event {
	var out []Event
	for s := from; s <= to; s++ {
		out = append(out, Event{Seq: s, Data: []byte(tag + strconv.FormatUint(s, 10))})
	}
	return out
}

// A follow delivers what the owner sends live at once, before the stream
// has it; never a seq twice when the stream's copy comes too; nothing
// live that does not continue where it is (the stream fills the gap, in
// order); nothing after Stop.
func TestFollowLive(t *testing.T) {
	ns := nodes(t, "a", "c")
	a, c := ns[0], ns[1]
	ctx := ctxT(t)
	acquire(ctx, t, a, "s1")
	if _, err := a.PublishEvents(ctx, "s1", evs("s", 1, 3)); err != nil {
		t.Fatal(err)
	}
	col := newLiveCollector()
	f, err := c.Follow(ctx, "s1", 0, col.deliver)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	control := newLiveCollector() // a second follow, still running after the first stops
	g, err := c.Follow(ctx, "s1", 0, control.deliver)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	col.waitFor(t, 3)

	// Live only: the stream has nothing past 3, so these came live.
	if err := a.PublishLive("s1", evs("l", 4, 5)); err != nil {
		t.Fatal(err)
	}
	col.waitFor(t, 5)
	// A gap (6 is missing): left to the stream.
	if err := a.PublishLive("s1", evs("l", 7, 8)); err != nil {
		t.Fatal(err)
	}
	// The stream's 4..8: 4 and 5 were delivered live, 6..8 come from it.
	if _, err := a.PublishEvents(ctx, "s1", evs("s", 4, 8)); err != nil {
		t.Fatal(err)
	}
	col.waitFor(t, 8)
	if err := a.PublishLive("s1", evs("l", 9, 9)); err != nil {
		t.Fatal(err)
	}
	col.waitFor(t, 9)
	want := "1:s1+ 2:s2+ 3:s3 4:l4+ 5:l5 6:s6+ 7:s7+ 8:s8 9:l9"
	if got := col.got(); got != want {
		t.Fatalf("delivered %s\nwant      %s", got, want)
	}
	f.Stop()
	if err := a.PublishLive("s1", evs("l", 10, 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PublishEvents(ctx, "s1", evs("s", 9, 10)); err != nil {
		t.Fatal(err)
	}
	control.waitFor(t, 10)
	if got := col.got(); got != want {
		t.Fatalf("delivered after Stop: %s", got)
	}
}

// A live message a node of the cluster did not sign as it arrives (none
// at all, another key, a seq or epoch header changed after signing, a
// replay) is refused; one from an owner older than the newest the follow
// has seen is dropped; and a node whose lease is not valid sends nothing.
func TestFollowLiveDropsForgeriesAndStaleOwners(t *testing.T) {
	ns := nodes(t, "a", "b", "c")
	a, b, c := ns[0], ns[1], ns[2]
	ctx := ctxT(t)
	if err := c.PublishLive("s1", evs("x", 1, 1)); !errors.Is(err, errNotLive) {
		t.Fatalf("PublishLive without the lease: %v", err)
	}
	la := acquire(ctx, t, a, "s1")
	if _, err := a.PublishEvents(ctx, "s1", evs("s", 1, 2)); err != nil {
		t.Fatal(err)
	}
	col := newLiveCollector()
	f, err := c.Follow(ctx, "s1", 0, col.deliver)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	col.waitFor(t, 2)

	spy := outsider(t, a.nc.ConnectedUrl())
	signed, _ := eventsMsg(livePrefix+"s1", "s1", evs("f", 3, 4), la.Epoch(), "a")
	a.sig.sign(liveKind(signed.Header), signed)
	unsigned, _ := eventsMsg(livePrefix+"s1", "s1", evs("f", 3, 4), la.Epoch(), "a")
	otherKey, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := eventsMsg(livePrefix+"s1", "s1", evs("f", 3, 4), la.Epoch(), "a")
	newSigner(otherKey, "a").sign(liveKind(foreign.Header), foreign)
	reEpoched, _ := eventsMsg(livePrefix+"s1", "s1", evs("f", 3, 4), la.Epoch(), "a")
	a.sig.sign(liveKind(reEpoched.Header), reEpoched)
	reEpoched.Header.Set(hdrEpoch, strconv.FormatUint(la.Epoch()+1000, 10))
	reSeqed, _ := eventsMsg(livePrefix+"s1", "s1", evs("f", 3, 3), la.Epoch(), "a")
	a.sig.sign(liveKind(reSeqed.Header), reSeqed)
	reSeqed.Header.Set(hdrSeq, "4") // one event: its seq is in the header only

	refused := c.Refused()
	for i, m := range []struct {
		name string
		send func() error
	}{
		{"unsigned", func() error { return spy.PublishMsg(unsigned) }},
		{"another key", func() error { return spy.PublishMsg(foreign) }},
		{"epoch changed", func() error { return spy.PublishMsg(reEpoched) }},
		{"seq changed", func() error { return spy.PublishMsg(reSeqed) }},
	} {
		if err := m.send(); err != nil {
			t.Fatal(m.name, err)
		}
		waitRefused(t, c, refused+int64(i)+1)
	}
	// The real one passes, once: its replay is refused.
	if err := spy.PublishMsg(signed); err != nil {
		t.Fatal(err)
	}
	col.waitFor(t, 4)
	refused = c.Refused()
	if err := spy.PublishMsg(signed); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, c, refused+1)

	// b takes over; once the follow has seen b's epoch (from the stream),
	// a's live messages are dropped although they continue its seqs.
	lb := forceTakeover(ctx, t, a, b, "s1")
	if _, err := b.PublishEvents(ctx, "s1", evs("b", 5, 5)); err != nil {
		t.Fatal(err)
	}
	col.waitFor(t, 5)
	if err := a.PublishLive("s1", evs("stale", 6, 6)); err != nil {
		t.Fatal(err) // a has not noticed: its lease is valid on its clock
	}
	if err := b.PublishLive("s1", evs("b", 6, 7)); err != nil {
		t.Fatal(err)
	}
	col.waitFor(t, 7)
	want := "1:s1+ 2:s2 3:f3+ 4:f4 5:b5 6:b6+ 7:b7"
	if got := col.got(); got != want {
		t.Fatalf("delivered %s\nwant      %s", got, want)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishLive("s1", evs("b", 8, 8)); !errors.Is(err, errNotLive) {
		t.Fatalf("PublishLive after Release: %v", err)
	}
}
