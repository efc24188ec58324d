package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd-dev/agentd/internal/cluster/clustertest"
	"github.com/agentd-dev/agentd/internal/cluster/embeddednats"
)

// These tests run real NATS servers in the process on 127.0.0.1. They use
// short lease TTLs and poll with deadlines instead of testing/synctest:
// synctest's fake clock cannot govern NATS's network I/O or the server's
// own goroutines, which would leave the bubble.

// testTTL is short for quick takeovers, yet long enough that a node busy
// under -race on two loaded cores (a 3 MiB transcript write in parts)
// still renews its leases in time.
const testTTL = time.Second

// testKey is the cluster key of every test server and node here; never
// changed after it is made.
var testKey = func() *Key {
	k, err := GenerateKey()
	if err != nil {
		panic(err)
	}
	return k
}()

func startServer(t *testing.T) *embeddednats.Server {
	t.Helper()
	e, err := embeddednats.Start(embeddednats.Config{StoreDir: t.TempDir(), Nkey: testKey.PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

func join(t *testing.T, url, id string) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	n, err := Join(ctx, Config{Key: testKey, NodeID: id, URL: url, LeaseTTL: testTTL, RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// nodes starts one embedded server and the given nodes on it. goleak is
// checked after everything the test started has been stopped.
func nodes(t *testing.T, ids ...string) []*Node {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t) })
	srv := startServer(t)
	out := make([]*Node, len(ids))
	for i, id := range ids {
		out[i] = join(t, srv.ClientURL(), id)
	}
	return out
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// pair starts nodes a and b on one server, with a context the test's
// waits are bounded by.
func pair(t *testing.T) (a, b *Node, ctx context.Context) {
	t.Helper()
	ns := nodes(t, "a", "b")
	return ns[0], ns[1], ctxT(t)
}

// acquire takes id's lease on n, failing the test if it cannot.
func acquire(ctx context.Context, t *testing.T, n *Node, id string) *Lease {
	t.Helper()
	l, err := n.Acquire(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLeaseAcquireRenewRelease(t *testing.T) {
	a, b, ctx := pair(t)

	la := acquire(ctx, t, a, "s1")
	if la.Epoch() == 0 || la.SessionID() != "s1" || la.Err() != nil {
		t.Fatalf("lease: epoch %d session %q err %v", la.Epoch(), la.SessionID(), la.Err())
	}
	if _, err := a.Acquire(ctx, "s1"); !errors.Is(err, ErrAlreadyHeld) {
		t.Fatalf("second Acquire on the owner: %v, want ErrAlreadyHeld", err)
	}

	var held *HeldError
	if _, err := b.Acquire(ctx, "s1"); !errors.As(err, &held) || held.Owner != "a" || held.Epoch != la.Epoch() {
		t.Fatalf("Acquire of a held lease: %v, want HeldError naming a at epoch %d", err, la.Epoch())
	}

	// Outlive several TTLs: the renewal goroutine keeps the lease, so it
	// stays valid and cannot be taken over.
	time.Sleep(3 * testTTL)
	if err := la.Valid(ctx); err != nil {
		t.Fatalf("Valid after renewals: %v", err)
	}
	if err := la.Renew(ctx); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if _, err := b.Takeover(ctx, "s1"); !errors.As(err, &held) {
		t.Fatalf("Takeover of a live lease: %v, want HeldError", err)
	}
	if la.Epoch() != held.Epoch {
		t.Fatalf("renewals changed the epoch: %d, then %d", la.Epoch(), held.Epoch)
	}

	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-la.Done():
	default:
		t.Fatal("Done not closed after Release")
	}
	if !errors.Is(la.Err(), ErrReleased) || !errors.Is(la.Release(ctx), ErrReleased) || a.Lease("s1") != nil {
		t.Fatalf("after Release: Err %v, Lease %v", la.Err(), a.Lease("s1"))
	}

	lb, err := b.Acquire(ctx, "s1")
	if err != nil {
		t.Fatalf("Acquire after release: %v", err)
	}
	if lb.Epoch() <= la.Epoch() {
		t.Fatalf("epoch after release and re-acquire: %d, not above %d", lb.Epoch(), la.Epoch())
	}
	if err := la.Fence().Admit(lb.Epoch()); err == nil {
		t.Fatal("the released owner's fence admitted a write after the new owner's")
	}
}

func TestLeaseBadSessionID(t *testing.T) {
	a := nodes(t, "a")[0]
	ctx := ctxT(t)
	for _, id := range []string{"", "a.b", "a*", ">", "has space", strings.Repeat("x", 201)} {
		if _, err := a.Acquire(ctx, id); err == nil || !strings.Contains(err.Error(), "session id") {
			t.Errorf("Acquire(%q): %v, want an error naming the session id", id, err)
		}
		// Ids reach NATS subjects: one that is not a single token must
		// never be sent.
		if _, err := a.Replay(ctx, id, 0); err == nil || !strings.Contains(err.Error(), "session id") {
			t.Errorf("Replay(%q): %v, want an error naming the session id", id, err)
		}
		if _, _, _, err := a.LeaseOwner(ctx, id); err == nil || !strings.Contains(err.Error(), "session id") {
			t.Errorf("LeaseOwner(%q): %v, want an error naming the session id", id, err)
		}
		done := make(chan error, 1)
		a.SendNode(ctx, id, nil, func(_ []byte, err error) { done <- err })
		if err := <-done; err == nil {
			t.Errorf("SendNode to node %q succeeded", id)
		}
	}
}

func TestTakeoverAfterOwnerStopsRenewing(t *testing.T) {
	ns := nodes(t, "a", "b", "c")
	a, b, c := ns[0], ns[1], ns[2]
	ctx := ctxT(t)

	la := acquire(ctx, t, a, "s1")
	if _, err := a.Publish(ctx, "s1", 1, []byte("from a")); err != nil {
		t.Fatal(err)
	}
	if owner, live, ok, err := c.LeaseOwner(ctx, "s1"); err != nil || owner != "a" || !live || !ok {
		t.Fatalf("LeaseOwner while a renews: %q live %v held %v, %v; want a, live", owner, live, ok, err)
	}

	// a freezes: it keeps its connection and believes it owns s1, but no
	// longer renews.
	a.renewPaused.Store(true)
	frozen := time.Now()
	// Commands are routed by what LeaseOwner reads: a lease nobody renews
	// is reported not live once it runs out (the router then places the
	// session on a live node), and can be taken over from then on.
	deadline := time.Now().Add(10 * testTTL)
	for {
		owner, live, ok, err := c.LeaseOwner(ctx, "s1")
		if err != nil || owner != "a" || !ok {
			t.Fatalf("LeaseOwner after a froze: %q held %v, %v; want a's lease", owner, ok, err)
		}
		if !live {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's lease still live %s after a stopped renewing it", 10*testTTL)
		}
		time.Sleep(testTTL / 10)
	}
	lb, err := b.Takeover(ctx, "s1")
	if err != nil {
		t.Fatalf("Takeover of a lease reported expired: %v", err)
	}
	took := time.Since(frozen)
	t.Logf("takeover %s after the owner stopped renewing (TTL %s)", took.Round(time.Millisecond), testTTL)
	// The lease was last renewed at most TTL/3 before the freeze.
	if took > testTTL+testTTL/3+testTTL {
		t.Errorf("takeover took %s, want within about one TTL (%s)", took, testTTL)
	}
	if lb.Epoch() <= la.Epoch() {
		t.Fatalf("new epoch %d not above the old owner's %d", lb.Epoch(), la.Epoch())
	}

	// The old owner finds out before writing, and its fence is refused.
	var stale *StaleError
	if err := la.Valid(ctx); !errors.As(err, &stale) || stale.Epoch != la.Epoch() {
		t.Fatalf("old owner's Valid: %v, want StaleError at epoch %d", err, la.Epoch())
	}
	if err := la.Fence().Admit(lb.Epoch()); !errors.As(err, &stale) {
		t.Fatalf("old owner's fence against the new epoch: %v, want StaleError", err)
	}
	if err := lb.Fence().Admit(la.Epoch()); err != nil {
		t.Fatalf("new owner's fence against the old epoch: %v", err)
	}
	select {
	case <-la.Done():
	default:
		t.Fatal("old lease's Done still open")
	}
	var notOwner *NotOwnerError
	if _, err := a.Publish(ctx, "s1", 2, []byte("stale")); !errors.As(err, &notOwner) {
		t.Fatalf("stale owner's Publish: %v, want NotOwnerError", err)
	}

	// The old owner no longer acts for the session, and the router sends
	// its commands to the new one.
	if a.Lease("s1") != nil || len(a.Leases()) != 0 {
		t.Fatalf("the stale owner still tracks its lease: %v", a.Leases())
	}
	if owner, live, ok, err := c.LeaseOwner(ctx, "s1"); err != nil || owner != "b" || !live || !ok {
		t.Fatalf("LeaseOwner after the takeover: %q live %v held %v, %v; want b, live", owner, live, ok, err)
	}

	// The new owner continues the session's events where they stopped.
	last, err := b.LastSeq(ctx, "s1")
	if err != nil || last != 1 {
		t.Fatalf("LastSeq: %d, %v; want 1", last, err)
	}
	if _, err := b.Publish(ctx, "s1", last+1, []byte("from b")); err != nil {
		t.Fatal(err)
	}
	evs, err := c.Replay(ctx, "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"1 from a " + strconv.FormatUint(la.Epoch(), 10), "2 from b " + strconv.FormatUint(lb.Epoch(), 10)}
	if got := eventKeys(evs); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events after takeover: %v, want %v", got, want)
	}
}

// TestValidReadsTheBucket changes the bucket under an owner whose lease
// has not run out locally: only reading the bucket can tell it lost.
func TestValidReadsTheBucket(t *testing.T) {
	a, b, ctx := pair(t)
	a.renewPaused.Store(true) // so only Valid can notice
	la := acquire(ctx, t, a, "s1")
	if err := la.Valid(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.kv.Put(ctx, "s1", b.value(0, time.Now())); err != nil {
		t.Fatal(err)
	}
	var stale *StaleError
	if err := la.Valid(ctx); !errors.As(err, &stale) || stale.Owner != "b" || stale.CurrentEpoch <= la.Epoch() {
		t.Fatalf("Valid after the bucket changed: %v, want StaleError naming b at a later epoch", err)
	}
	if !errors.As(la.Err(), &stale) {
		t.Fatalf("lease Err after Valid found it stale: %v", la.Err())
	}
}

// TestRenewalReportsLostLease changes the bucket under a live owner (as a
// takeover forced by an operator would) and checks that the renewal
// goroutine, not a caller, finds out and ends the lease.
func TestRenewalReportsLostLease(t *testing.T) {
	a, b, ctx := pair(t)
	la := acquire(ctx, t, a, "s1")
	if _, err := b.kv.Put(ctx, "s1", b.value(0, time.Now())); err != nil {
		t.Fatal(err)
	}
	select {
	case <-la.Done():
	case <-time.After(5 * testTTL):
		t.Fatal("the renewal goroutine did not report the lost lease")
	}
	var stale *StaleError
	if !errors.As(la.Err(), &stale) || stale.Owner != "b" {
		t.Fatalf("lost lease's Err: %v, want StaleError naming b", la.Err())
	}
	if a.Lease("s1") != nil {
		t.Fatal("the lost lease is still tracked")
	}
}

// forceTakeover makes b the owner of a session a still believes it owns,
// as a takeover a did not notice (renewals paused) looks from a's side.
func forceTakeover(ctx context.Context, t *testing.T, a, b *Node, id string) *Lease {
	t.Helper()
	a.renewPaused.Store(true)
	rev, err := b.kv.Put(ctx, id, b.value(0, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.newLease(ctx, id, rev, rev, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return lb
}

// TestStreamFencesStaleOwner checks that the event stream itself refuses
// a stale owner's event, before the stale owner has noticed anything.
func TestStreamFencesStaleOwner(t *testing.T) {
	ctx := ctxT(t)
	t.Run("new owner published first", func(t *testing.T) {
		ns := nodes(t, "a", "b")
		a, b := ns[0], ns[1]
		la := acquire(ctx, t, a, "s1")
		if _, err := a.Publish(ctx, "s1", 1, []byte("a1")); err != nil {
			t.Fatal(err)
		}
		lb := forceTakeover(ctx, t, a, b, "s1")
		if _, err := b.Publish(ctx, "s1", 2, []byte("b2")); err != nil {
			t.Fatal(err)
		}
		var stale *StaleError
		if _, err := a.Publish(ctx, "s1", 2, []byte("a2")); !errors.As(err, &stale) || stale.Owner != "b" {
			t.Fatalf("stale owner's Publish: %v, want StaleError naming b", err)
		}
		if !errors.As(la.Err(), &stale) {
			t.Fatalf("stale lease still live: %v", la.Err())
		}
		if _, err := b.Publish(ctx, "s1", 3, []byte("b3")); err != nil {
			t.Fatal(err)
		}
		evs, err := b.Replay(ctx, "s1", 0)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprint([]string{
			fmt.Sprintf("1 a1 %d", la.Epoch()), fmt.Sprintf("2 b2 %d", lb.Epoch()), fmt.Sprintf("3 b3 %d", lb.Epoch())})
		if got := fmt.Sprint(eventKeys(evs)); got != want {
			t.Fatalf("events: %s, want %s", got, want)
		}
	})
	t.Run("old owner published first", func(t *testing.T) {
		ns := nodes(t, "a", "b")
		a, b := ns[0], ns[1]
		la := acquire(ctx, t, a, "s1")
		lb := forceTakeover(ctx, t, a, b, "s1")
		// a writes before b's first event: the stream has nothing newer to
		// refuse it with, so it stays, and b must not reuse its seq (the
		// duplicate check would drop b's event in its place).
		if _, err := a.Publish(ctx, "s1", 1, []byte("a1")); err != nil {
			t.Fatal(err)
		}
		var taken *SeqTakenError
		if dup, err := b.Publish(ctx, "s1", 1, []byte("b1")); !errors.As(err, &taken) || taken.Last != 1 || taken.Node != "a" {
			t.Fatalf("new owner reusing the old owner's seq: dup %v, %v; want SeqTakenError", dup, err)
		}
		if _, err := b.Publish(ctx, "s1", 2, []byte("b2")); err != nil {
			t.Fatal(err)
		}
		var stale *StaleError
		if _, err := a.Publish(ctx, "s1", 3, []byte("a3")); !errors.As(err, &stale) {
			t.Fatalf("stale owner's Publish after the new owner's: %v, want StaleError", err)
		}
		evs, err := a.Replay(ctx, "s1", 0)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprint([]string{fmt.Sprintf("1 a1 %d", la.Epoch()), fmt.Sprintf("2 b2 %d", lb.Epoch())})
		if got := fmt.Sprint(eventKeys(evs)); got != want {
			t.Fatalf("events: %s, want %s", got, want)
		}
	})
}

// TestLeaseOwner reads leases as the router does to pick a session's
// node: nobody (the session goes to its home node), a live owner, and
// nobody again at once after a release, not a TTL later.
func TestLeaseOwner(t *testing.T) {
	a, b, ctx := pair(t)
	la := acquire(ctx, t, a, "s1")
	type owner struct {
		node     string
		live, ok bool
	}
	check := func(name, id string, want owner) {
		t.Helper()
		node, live, ok, err := b.LeaseOwner(ctx, id)
		if got := (owner{node, live, ok}); err != nil || got != want {
			t.Errorf("%s: LeaseOwner(%s) = %+v, %v; want %+v", name, id, got, err, want)
		}
	}
	check("nobody ever owned it", "s2", owner{})
	check("held", "s1", owner{"a", true, true})
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	check("released", "s1", owner{})
}

// TestSendNodeAnswers covers what a request sent with SendNode comes
// back with: the handler's answer from another node or from the sender
// itself, the handler's failure, a node nobody serves (answered by NATS
// at once, not by a timeout) and a node that never answers.
func TestSendNodeAnswers(t *testing.T) {
	a, b, ctx := pair(t)
	stop, err := a.ServeNode(ctx, func(_ context.Context, p []byte, reply func([]byte, error)) {
		switch string(p) {
		case "fail":
			reply(nil, errors.New("the tool is not allowed"))
		case "hang":
			// Never answered: the sender's deadline ends the wait.
		default:
			reply(append([]byte("a got "), p...), nil)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)

	tests := []struct {
		name    string
		from    *Node
		to      string
		payload string
		want    string
		check   func(error) bool
	}{
		{"from another node", b, "a", "hi", "a got hi", nil},
		{"from the node itself", a, "a", "me", "a got me", nil},
		{"handler error", b, "a", "fail", "", func(err error) bool {
			var re *RemoteError
			return errors.As(err, &re) && re.Node == "a" && re.Message == "the tool is not allowed"
		}},
		{"nobody serves the node", b, "c", "hi", "", func(err error) bool {
			var gone *NodeGoneError
			return errors.As(err, &gone) && gone.Node == "c"
		}},
		{"no answer in time", b, "a", "hang", "", func(err error) bool {
			return errors.Is(err, context.DeadlineExceeded)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Only the request never answered needs a short deadline; the
			// others get the test's, so a loaded machine does not fail them.
			rctx, cancel := ctx, context.CancelFunc(func() {})
			if tc.payload == "hang" {
				rctx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
			}
			defer cancel()
			type answer struct {
				out []byte
				err error
			}
			done := make(chan answer, 1)
			tc.from.SendNode(rctx, tc.to, []byte(tc.payload), func(out []byte, err error) { done <- answer{out, err} })
			got := <-done
			if tc.check != nil {
				if !tc.check(got.err) {
					t.Fatalf("error %v (%T) is not the one expected", got.err, got.err)
				}
				return
			}
			if got.err != nil || string(got.out) != tc.want {
				t.Fatalf("got %q, %v; want %q", got.out, got.err, tc.want)
			}
		})
	}
}

func eventKeys(evs []Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = fmt.Sprintf("%d %s %d", e.Seq, e.Data, e.Epoch)
	}
	return out
}

func TestEventsReplay(t *testing.T) {
	a, b, ctx := pair(t)
	la := acquire(ctx, t, a, "s1")
	acquire(ctx, t, a, "other")
	const n = 40
	for seq := uint64(1); seq <= n; seq++ {
		if dup, err := a.Publish(ctx, "s1", seq, []byte("e"+strconv.FormatUint(seq, 10))); err != nil || dup {
			t.Fatalf("Publish %d: dup %v, %v", seq, dup, err)
		}
		// Another session's events interleave in the stream.
		if _, err := a.Publish(ctx, "other", seq, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if seq%10 == 3 {
			// A retried publish of an event already kept is dropped.
			dup, err := a.Publish(ctx, "s1", seq, []byte("retry"))
			if err != nil || !dup {
				t.Fatalf("republish of %d: dup %v, %v; want a duplicate", seq, dup, err)
			}
		}
	}
	var notOwner *NotOwnerError
	if _, err := b.Publish(ctx, "s1", n+1, nil); !errors.As(err, &notOwner) {
		t.Fatalf("Publish by a node without the lease: %v, want NotOwnerError", err)
	}

	wantFrom := func(after uint64) []string {
		var w []string
		for s := after + 1; s <= n; s++ {
			w = append(w, fmt.Sprintf("%d e%d %d", s, s, la.Epoch()))
		}
		return w
	}
	for _, after := range []uint64{0, 1, 4, 13, 20, 39, 40, 100} {
		t.Run("after "+strconv.FormatUint(after, 10), func(t *testing.T) {
			evs, err := b.Replay(ctx, "s1", after)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := eventKeys(evs), wantFrom(after); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("Replay after %d:\n got %v\nwant %v", after, got, want)
			}
			for _, e := range evs {
				if e.Node != "a" {
					t.Fatalf("event %d from node %q", e.Seq, e.Node)
				}
			}
		})
	}
	if evs, err := b.Replay(ctx, "nothing-here", 0); err != nil || len(evs) != 0 {
		t.Fatalf("Replay of a session without events: %v, %v", evs, err)
	}
	if last, err := b.LastSeq(ctx, "s1"); err != nil || last != n {
		t.Fatalf("LastSeq: %d, %v; want %d", last, err, n)
	}
}

func TestDrainHandsSessionsOver(t *testing.T) {
	a, b, ctx := pair(t)
	var leases []*Lease
	for _, id := range []string{"s1", "s2", "s3"} {
		l, err := a.Acquire(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	if err := a.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		if !errors.Is(l.Err(), ErrReleased) {
			t.Fatalf("%s after Drain: %v, want ErrReleased", l.SessionID(), l.Err())
		}
		// At once, not after a TTL.
		if _, err := b.Acquire(ctx, l.SessionID()); err != nil {
			t.Fatalf("Acquire of a drained session: %v", err)
		}
	}
	if _, err := a.Acquire(ctx, "s4"); !errors.Is(err, ErrNodeClosed) {
		t.Fatalf("Acquire on a closed node: %v, want ErrNodeClosed", err)
	}
}

func TestCloseEndsLeasesWithoutReleasing(t *testing.T) {
	a, b, ctx := pair(t)
	la := acquire(ctx, t, a, "s1")
	a.Close()
	if !errors.Is(la.Err(), ErrNodeClosed) {
		t.Fatalf("lease after Close: %v, want ErrNodeClosed", la.Err())
	}
	// As after a crash, the lease stays until it expires.
	var held *HeldError
	if _, err := b.Takeover(ctx, "s1"); !errors.As(err, &held) {
		t.Fatalf("Takeover right after Close: %v, want HeldError", err)
	}
}

// TestTwoClusteredServers runs two embedded servers forming one JetStream
// cluster, with a node on each: the lease bucket, command routing and the
// event stream work across the route between them.
func TestTwoClusteredServers(t *testing.T) {
	if testing.Short() {
		t.Skip("forming a JetStream cluster takes seconds")
	}
	t.Cleanup(func() { goleak.VerifyNone(t) })
	r1, r2 := clustertest.FreeAddr(t), clustertest.FreeAddr(t)
	routes := []string{"nats://" + r1, "nats://" + r2}
	var srvs [2]*embeddednats.Server
	for i, r := range []string{r1, r2} {
		e, err := embeddednats.Start(embeddednats.Config{
			StoreDir: t.TempDir(), ServerName: "n" + strconv.Itoa(i+1), Nkey: testKey.PublicKey(),
			ClusterName: "agentd-test", ClusterListen: r, Routes: routes, RouteSecret: testKey.RouteSecret(),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Shutdown)
		srvs[i] = e
	}
	a := join(t, srvs[0].ClientURL(), "a")
	b := join(t, srvs[1].ClientURL(), "b")
	ctx := ctxT(t)

	acquire(ctx, t, a, "s1")
	if _, err := b.Acquire(ctx, "s1"); !errors.As(err, new(*HeldError)) {
		t.Fatalf("Acquire across servers: %v, want HeldError", err)
	}
	stop, err := a.ServeNode(ctx, func(_ context.Context, p []byte, reply func([]byte, error)) { reply(p, nil) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// Interest crosses the route asynchronously: until it has, the other
	// server answers that nobody serves node a.
	deadline := time.Now().Add(5 * time.Second)
	for {
		done := make(chan error, 1)
		b.SendNode(ctx, "a", []byte("ping"), func(got []byte, err error) {
			if err == nil && string(got) != "ping" {
				err = fmt.Errorf("answer %q", got)
			}
			done <- err
		})
		err := <-done
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SendNode across servers: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		if _, err := a.Publish(ctx, "s1", seq, []byte("e")); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := b.Replay(ctx, "s1", 1)
	if err != nil || len(evs) != 2 || evs[0].Seq != 2 || evs[1].Seq != 3 {
		t.Fatalf("Replay across servers: %v, %v", evs, err)
	}
}

// TestPublishRetryAfterLostAck retries an event whose first publish was
// stored but whose ack never arrived (played by rewinding what the owner
// knows of the stream): the retry is reported as a duplicate, not refused.
func TestPublishRetryAfterLostAck(t *testing.T) {
	a := nodes(t, "a")[0]
	ctx := ctxT(t)
	la := acquire(ctx, t, a, "s1")
	if _, err := a.Publish(ctx, "s1", 1, []byte("e1")); err != nil {
		t.Fatal(err)
	}
	before := la.evLast
	if _, err := a.Publish(ctx, "s1", 2, []byte("e2")); err != nil {
		t.Fatal(err)
	}
	la.evLast = before // the ack of event 2 was "lost"
	dup, err := a.Publish(ctx, "s1", 2, []byte("e2"))
	if err != nil || !dup {
		t.Fatalf("retry of a stored event: dup %v, %v; want a duplicate", dup, err)
	}
	if _, err := a.Publish(ctx, "s1", 3, []byte("e3")); err != nil {
		t.Fatal(err)
	}
	evs, err := a.Replay(ctx, "s1", 0)
	if err != nil || len(evs) != 3 {
		t.Fatalf("events: %v, %v", eventKeys(evs), err)
	}
}

// A node restarted under the same id (its process killed, the new one
// joining at once) drops the leases its previous process left, so its
// sessions can be taken over at once instead of a lease TTL later; a
// lease another node holds stays.
func TestJoinDropsOwnLeases(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	srv := startServer(t)
	ctx := ctxT(t)
	old := join(t, srv.ClientURL(), "a")
	other := join(t, srv.ClientURL(), "b")
	acquire(ctx, t, old, "s1")
	acquire(ctx, t, other, "s2")
	old.renewPaused.Store(true) // the killed process renews nothing
	restarted := join(t, srv.ClientURL(), "a")
	if _, _, held, err := other.LeaseOwner(ctx, "s1"); err != nil || held {
		t.Errorf("s1 after a restarted: held %v, %v; want its lease gone", held, err)
	}
	if _, err := other.Takeover(ctx, "s1"); err != nil {
		t.Errorf("taking s1 over after a restarted: %v", err)
	}
	if owner, live, held, err := restarted.LeaseOwner(ctx, "s2"); err != nil || owner != "b" || !live || !held {
		t.Errorf("s2 after a restarted: %q live %v held %v, %v; want b's live lease", owner, live, held, err)
	}
}
