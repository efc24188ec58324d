package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Errors a lease's holder branches on.
var (
	// ErrNodeClosed ends the leases of a node that was closed.
	ErrNodeClosed = errors.New("cluster: the node was closed")
	// ErrReleased ends a lease its holder released.
	ErrReleased = errors.New("cluster: the lease was released")
	// ErrAlreadyHeld is returned by Acquire and Takeover when this node
	// already holds a live lease on the session.
	ErrAlreadyHeld = errors.New("cluster: this node already holds the session's lease")
)

// HeldError says another node holds a session's lease.
type HeldError struct {
	SessionID string
	Owner     string
	Epoch     uint64
	Expires   time.Time
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("cluster: session %s is owned by node %s (epoch %d, lease expires %s)",
		e.SessionID, e.Owner, e.Epoch, e.Expires.UTC().Format(time.RFC3339Nano))
}

// StaleError says a lease is no longer this holder's: it expired before it
// could be renewed, or another node took the session over. Whatever the
// holder was about to write for the session must not be written.
type StaleError struct {
	SessionID string
	Epoch     uint64 // the holder's epoch
	// Owner and CurrentEpoch describe who holds the session now, when
	// known; Owner is empty if nobody does.
	Owner        string
	CurrentEpoch uint64
	Reason       string
}

func (e *StaleError) Error() string {
	s := fmt.Sprintf("cluster: lease on session %s at epoch %d is stale: %s", e.SessionID, e.Epoch, e.Reason)
	if e.Owner != "" {
		s += fmt.Sprintf(" (now owned by node %s at epoch %d)", e.Owner, e.CurrentEpoch)
	}
	return s
}

// record is a lease's value in the bucket.
type record struct {
	Node string `json:"node"`
	// Epoch is 0 in the write that acquires a lease and means "the
	// revision of this entry"; renewals repeat it explicitly. See Lease.Epoch.
	Epoch uint64 `json:"epoch,omitempty"`
	// Expires is when the lease ends unless renewed, in Unix milliseconds
	// of the writer's clock (nodes' clocks must agree to well within a TTL).
	Expires int64 `json:"expires"`
}

func decodeEntry(e jetstream.KeyValueEntry) (record, uint64, error) {
	var r record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return r, 0, fmt.Errorf("cluster: lease entry %s at revision %d is not a lease record: %w", e.Key(), e.Revision(), err)
	}
	epoch := r.Epoch
	if epoch == 0 {
		epoch = e.Revision()
	}
	return r, epoch, nil
}

func (r record) expires() time.Time { return time.UnixMilli(r.Expires) }

// Lease is this node's ownership of one session. While it is live, the
// node's renewal goroutine keeps it; when it ends (lost, released, node
// closed), Done closes and Err says why.
type Lease struct {
	node      *Node
	sessionID string
	epoch     uint64

	ctx    context.Context
	cancel context.CancelCauseFunc

	// Lock order within a lease: write, pub and a fencedLog's mu (each
	// held across a NATS round trip, never two of them at once) are
	// taken before mu, which is a leaf held only to read or set the two
	// fields it guards. No lease lock is taken under Node.mu: Close and
	// the reconnect path copy the lease list first and release after.
	write sync.Mutex // serializes the bucket writes of Renew and Release

	pub     sync.Mutex // serializes Publish, and guards the two fields below
	evLast  lastEvent  // the session's last event, as this owner knows it
	evKnown bool       // evLast was read from the stream

	// The session's transcript and journal in the state streams, as this
	// owner knows them (store.go); writes counts fenced writes for their
	// message ids.
	txLog, jrLog fencedLog
	writes       atomic.Uint64

	mu       sync.Mutex
	rev      uint64    // the bucket revision of our latest write
	deadline time.Time // past it (monotonic clock) the lease may be someone else's
}

// SessionID is the session this lease owns.
func (l *Lease) SessionID() string { return l.sessionID }

// Epoch identifies this ownership of the session. It is the bucket
// revision of the write that acquired the lease, so it only grows, across
// takeovers and across a release followed by a new acquisition (an epoch
// counter kept in the value would restart after the release deletes the
// key). Durable writes for the session carry it; see Fence.
func (l *Lease) Epoch() uint64 { return l.epoch }

// Done is closed when the lease ends.
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Err is nil while the lease is live, then why it ended: a *StaleError
// when it was lost, ErrReleased, or ErrNodeClosed.
func (l *Lease) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// Context is cancelled, with Err as its cause, when the lease ends: the
// parent for work that only the owner may do, such as a session's run.
func (l *Lease) Context() context.Context { return l.ctx }

// Fence is what a durable write for the session carries.
func (l *Lease) Fence() Fence { return Fence{SessionID: l.sessionID, Epoch: l.epoch} }

// Fence is a session id and an owner's epoch, stamped on durable writes. A
// store refuses a write whose epoch is below the highest it has seen for
// the session: that write comes from an owner that lost the session.
type Fence struct {
	SessionID string
	Epoch     uint64
}

// Admit checks this fence against the highest epoch a store has recorded
// for the session; the store then records max(highest, f.Epoch).
func (f Fence) Admit(highest uint64) error {
	if f.Epoch < highest {
		return &StaleError{SessionID: f.SessionID, Epoch: f.Epoch, CurrentEpoch: highest,
			Reason: fmt.Sprintf("a write at epoch %d was already accepted", highest)}
	}
	return nil
}

// Acquire takes a session that no node owns. If a node does, even one whose
// lease has expired, it fails with *HeldError; Takeover takes an expired one.
func (n *Node) Acquire(ctx context.Context, sessionID string) (*Lease, error) {
	if err := n.checkAcquire(sessionID); err != nil {
		return nil, err
	}
	start := time.Now()
	val := n.value(0, start)
	rev, err := whileLeaderless(ctx, func() (uint64, error) { return n.kv.Create(ctx, sessionID, val) })
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil, n.heldBy(ctx, sessionID, err)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: acquiring session %s: %w", sessionID, err)
	}
	return n.newLease(ctx, sessionID, rev, rev, start)
}

// Takeover takes a session whose owner's lease has expired (or that nobody
// owns). The new lease's epoch is above the old owner's, so a write the old
// owner still attempts is refused by Fence.Admit, and the old owner's own
// Valid and renewals report it stale. A live owner's session fails with
// *HeldError.
func (n *Node) Takeover(ctx context.Context, sessionID string) (*Lease, error) {
	if err := n.checkAcquire(sessionID); err != nil {
		return nil, err
	}
	e, err := n.kv.Get(ctx, sessionID)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return n.Acquire(ctx, sessionID)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: reading the lease of session %s: %w", sessionID, err)
	}
	r, epoch, err := decodeEntry(e)
	start := time.Now()
	if err == nil && start.Before(r.expires()) {
		return nil, &HeldError{SessionID: sessionID, Owner: r.Node, Epoch: epoch, Expires: r.expires()}
	}
	// An unreadable record is taken over like an expired one: nobody can
	// renew it meaningfully either.
	rev, err := n.kv.Update(ctx, sessionID, n.value(0, start), e.Revision())
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
		// Another node took it, or the owner renewed just in time.
		return nil, n.heldBy(ctx, sessionID, err)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: taking over session %s: %w", sessionID, err)
	}
	n.log.Info("cluster: took a session over", "session", sessionID, "from", r.Node, "old_epoch", epoch, "epoch", rev)
	return n.newLease(ctx, sessionID, rev, rev, start)
}

func (n *Node) checkAcquire(sessionID string) error {
	if err := CheckSessionID(sessionID); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrNodeClosed
	}
	if n.leases[sessionID] != nil {
		return fmt.Errorf("%w: %s", ErrAlreadyHeld, sessionID)
	}
	return nil
}

func (n *Node) value(epoch uint64, now time.Time) []byte {
	b, _ := json.Marshal(record{Node: n.cfg.NodeID, Epoch: epoch, Expires: now.Add(n.cfg.LeaseTTL).UnixMilli()})
	return b
}

// heldBy describes who holds a session after a write lost the race; cause
// is returned if the lease has gone again in the meantime.
func (n *Node) heldBy(ctx context.Context, sessionID string, cause error) error {
	e, err := n.kv.Get(ctx, sessionID)
	if err != nil {
		return fmt.Errorf("cluster: session %s is held by another node: %w", sessionID, cause)
	}
	r, epoch, err := decodeEntry(e)
	if err != nil {
		return err
	}
	return &HeldError{SessionID: sessionID, Owner: r.Node, Epoch: epoch, Expires: r.expires()}
}

func (n *Node) newLease(ctx context.Context, sessionID string, epoch, rev uint64, start time.Time) (*Lease, error) {
	lctx, cancel := context.WithCancelCause(context.Background())
	l := &Lease{node: n, sessionID: sessionID, epoch: epoch, ctx: lctx, cancel: cancel,
		rev: rev, deadline: start.Add(n.cfg.LeaseTTL)}
	if err := n.track(l); err != nil {
		// Closed meanwhile: give the session back rather than leave it
		// unowned until it expires.
		_ = n.kv.Delete(ctx, sessionID, jetstream.LastRevision(rev))
		cancel(err)
		return nil, err
	}
	return l, nil
}

// Renew extends the lease by LeaseTTL if it is still this node's. The
// renewal goroutine calls it; a caller may too, before a long write. A
// lease found taken, or not renewed before its deadline, ends with a
// *StaleError, which Renew returns.
func (l *Lease) Renew(ctx context.Context) error {
	l.write.Lock()
	defer l.write.Unlock()
	if err := l.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	rev, deadline := l.rev, l.deadline
	l.mu.Unlock()
	start := time.Now()
	if start.After(deadline) {
		return l.lose("its time ran out before it could be renewed", "", 0)
	}
	// While the bucket has no leader (a NATS server of the cluster died
	// and the others are electing one), try again as soon as it has one
	// rather than at the next renewal, a third of a TTL later: an
	// election takes 6-10 s, most of a default lease. Never past the
	// deadline: a lease renewed after it would have been stale meanwhile.
	wctx, cancel := context.WithDeadline(ctx, deadline)
	newRev, err := whileLeaderless(wctx, func() (uint64, error) {
		if start = time.Now(); start.After(deadline) {
			return 0, errors.New("the lease bucket had no leader until the lease's time ran out")
		}
		return l.node.kv.Update(ctx, l.sessionID, l.node.value(l.epoch, start), rev)
	})
	cancel()
	switch {
	case err == nil:
		l.mu.Lock()
		l.rev, l.deadline = newRev, start.Add(l.node.cfg.LeaseTTL)
		l.mu.Unlock()
		return nil
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		// A renewal whose answer was lost (NATS restarted, the connection
		// broke after the write) moved the revision although this node
		// never heard: the bucket still names this node at this epoch,
		// so the lease is ours and goes on from the revision it holds.
		// Only another node's name, or another epoch, means it was lost.
		cur, ours, owner, epoch, gerr := l.stillOurs(ctx)
		switch {
		case gerr != nil:
			if time.Now().After(deadline) {
				return l.lose(fmt.Sprintf("renewal failed until its time ran out: %v", gerr), "", 0)
			}
			return fmt.Errorf("cluster: renewing the lease on session %s (will retry): %w", l.sessionID, gerr)
		case !ours:
			return l.lose("the bucket changed under it", owner, epoch)
		}
		l.node.log.Info("cluster: a lease write landed unanswered; going on from its revision", "session", l.sessionID, "epoch", l.epoch, "revision", cur)
		l.mu.Lock()
		l.rev = cur
		l.mu.Unlock()
		newRev, err := l.node.kv.Update(ctx, l.sessionID, l.node.value(l.epoch, start), cur)
		if err == nil {
			l.mu.Lock()
			l.rev, l.deadline = newRev, start.Add(l.node.cfg.LeaseTTL)
			l.mu.Unlock()
			return nil
		}
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
			owner, cur := l.currentOwner(ctx)
			return l.lose("the bucket changed under it", owner, cur)
		}
		return fmt.Errorf("cluster: renewing the lease on session %s (will retry): %w", l.sessionID, err)
	case errors.Is(err, jetstream.ErrKeyNotFound):
		owner, cur := l.currentOwner(ctx)
		return l.lose("the bucket changed under it", owner, cur)
	default:
		if time.Now().After(deadline) {
			return l.lose(fmt.Sprintf("renewal failed until its time ran out: %v", err), "", 0)
		}
		return fmt.Errorf("cluster: renewing the lease on session %s (will retry): %w", l.sessionID, err)
	}
}

// Valid checks, with one read of the bucket, that the lease is still this
// node's: call it before a write that must not come from a stale owner.
// A lease past its local deadline is stale without asking anyone, so an
// owner cut off from NATS stops writing on time.
func (l *Lease) Valid(ctx context.Context) error {
	if err := l.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	deadline := l.deadline
	l.mu.Unlock()
	if time.Now().After(deadline) {
		return l.lose("it was not renewed in time", "", 0)
	}
	e, err := l.node.kv.Get(ctx, l.sessionID)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return l.lose("it is no longer in the bucket", "", 0)
	}
	if err != nil {
		return fmt.Errorf("cluster: checking the lease on session %s: %w", l.sessionID, err)
	}
	r, epoch, err := decodeEntry(e)
	if err != nil {
		return err
	}
	if r.Node != l.node.cfg.NodeID || epoch != l.epoch {
		return l.lose("another node took the session over", r.Node, epoch)
	}
	return nil
}

// Release gives the session up: the lease is deleted from the bucket if it
// is still this one (another node may acquire it at once) and ends with
// ErrReleased. Releasing a lease that already ended returns why it ended.
func (l *Lease) Release(ctx context.Context) error {
	l.write.Lock()
	defer l.write.Unlock()
	if err := l.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	rev := l.rev
	l.mu.Unlock()
	err := l.node.kv.Delete(ctx, l.sessionID, jetstream.LastRevision(rev))
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		// A renewal that landed unanswered, as in Renew.
		cur, ours, owner, epoch, gerr := l.stillOurs(ctx)
		if gerr != nil {
			return fmt.Errorf("cluster: releasing session %s: %w", l.sessionID, gerr)
		}
		if !ours {
			return l.lose("it was taken over before it was released", owner, epoch)
		}
		l.mu.Lock()
		l.rev = cur
		l.mu.Unlock()
		err = l.node.kv.Delete(ctx, l.sessionID, jetstream.LastRevision(cur))
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			owner, cur := l.currentOwner(ctx)
			return l.lose("it was taken over before it was released", owner, cur)
		}
	}
	if err != nil {
		return fmt.Errorf("cluster: releasing session %s: %w", l.sessionID, err)
	}
	l.end(ErrReleased)
	return nil
}

func (l *Lease) currentOwner(ctx context.Context) (string, uint64) {
	e, err := l.node.kv.Get(ctx, l.sessionID)
	if err != nil {
		return "", 0
	}
	r, epoch, err := decodeEntry(e)
	if err != nil {
		return "", 0
	}
	return r.Node, epoch
}

// stillOurs reads the session's lease after a write of this lease was
// refused for its revision: ours says the bucket still names this node at
// this lease's epoch (a write of ours landed without its answer reaching
// us), and rev is the entry's revision then. Otherwise owner and epoch
// say who holds it ("" when nobody does). err is a failed read, which
// says nothing either way.
func (l *Lease) stillOurs(ctx context.Context) (rev uint64, ours bool, owner string, epoch uint64, err error) {
	e, err := l.node.kv.Get(ctx, l.sessionID)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return 0, false, "", 0, nil
	}
	if err != nil {
		return 0, false, "", 0, err
	}
	r, epoch, derr := decodeEntry(e)
	if derr != nil {
		return 0, false, "", 0, nil
	}
	return e.Revision(), r.Node == l.node.cfg.NodeID && epoch == l.epoch, r.Node, epoch, nil
}

func (l *Lease) lose(reason, owner string, cur uint64) error {
	err := &StaleError{SessionID: l.sessionID, Epoch: l.epoch, Owner: owner, CurrentEpoch: cur, Reason: reason}
	l.node.log.Warn("cluster: lost a session's lease", "session", l.sessionID, "epoch", l.epoch, "owner", owner, "reason", reason)
	l.end(err)
	return err
}

// end stops tracking the lease and closes Done; the first cause wins (the
// context keeps it).
func (l *Lease) end(cause error) {
	l.node.untrack(l)
	l.cancel(cause)
}

// dropOwnLeases deletes the leases that name this node, which a new
// process holds none of: they are its previous process's, killed (kill
// -9, a crash) before it could release them. A node id names one process
// at a time, so nothing renews them; deleting them at once spares the
// sessions a lease TTL in which every command for them is refused, and
// the next command takes each over as after any crash. A lease another
// node took since is left alone (the delete is fenced by revision). It
// returns how many it dropped.
func (n *Node) dropOwnLeases(ctx context.Context) (int, error) {
	w, err := n.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return 0, fmt.Errorf("cluster: reading the leases: %w", err)
	}
	defer w.Stop()
	var mine []jetstream.KeyValueEntry
	for {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("cluster: reading the leases: %w", context.Cause(ctx))
		case e, ok := <-w.Updates():
			if !ok {
				return 0, errors.New("cluster: reading the leases: the watch ended early")
			}
			if e != nil {
				if r, _, err := decodeEntry(e); err == nil && r.Node == n.cfg.NodeID {
					mine = append(mine, e)
				}
				continue
			}
			// Everything present when the watch started has arrived.
			dropped := 0
			for _, e := range mine {
				err := n.kv.Delete(ctx, e.Key(), jetstream.LastRevision(e.Revision()))
				switch {
				case err == nil:
					dropped++
				case !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists):
					// A revision mismatch: another node took it meanwhile.
					return dropped, fmt.Errorf("cluster: dropping the lease of session %s: %w", e.Key(), err)
				}
			}
			return dropped, nil
		}
	}
}
