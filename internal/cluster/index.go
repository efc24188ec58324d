package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// SessionRecord is a session's entry in the cluster's index (the bucket
// SessionBucket, key = session id): what a single server keeps in its
// sessions.jsonl, so any node can list a session, find its transcript and
// continue its event seq.
type SessionRecord struct {
	ID string `json:"sessionId"`
	// File is the session's transcript file: a path, or a name under the
	// sessions directory, as the serve wiring chooses. A node that takes
	// the session over restores the file there (RestoreTranscript).
	File string `json:"sessionFile,omitempty"`
	Cwd  string `json:"cwd,omitempty"`
	// Owner is the principal subject that created the session, "" for
	// none. Not the node that runs it: that is the lease.
	Owner   string    `json:"owner,omitempty"`
	Created time.Time `json:"createdAt,omitzero"`
	Name    string    `json:"name,omitempty"`
	// LastSeq is at or above every event seq the session used (the
	// single server's reservation; in a cluster the event stream's
	// LastSeq is exact).
	LastSeq uint64 `json:"seq,omitempty"`
	// Deleted is set when a client deleted the session: its id is free
	// again and it is not reloaded by id; its state stays until purged.
	Deleted bool `json:"deleted,omitempty"`
	// Sandbox is the stricter sandbox mode a client chose for the
	// session's tools; "" is the server's.
	Sandbox string `json:"sandbox,omitempty"`
	// Epoch is the lease epoch of the owner that last wrote the record
	// (Lease.UpdateSession); an owner with an older lease may not write.
	Epoch uint64 `json:"epoch,omitempty"`

	// Revision is the bucket revision the record was read at or written
	// as; UpdateSession uses it to detect a concurrent change.
	Revision uint64 `json:"-"`
}

// PutSession writes a session's record, replacing any, and returns its
// new revision.
func (n *Node) PutSession(ctx context.Context, rec SessionRecord) (uint64, error) {
	if err := CheckSessionID(rec.ID); err != nil {
		return 0, err
	}
	b, err := json.Marshal(&rec)
	if err != nil {
		return 0, fmt.Errorf("cluster: encoding the index record of session %s: %w", rec.ID, err)
	}
	rev, err := whileLeaderless(ctx, func() (uint64, error) { return n.st.index.Put(ctx, rec.ID, b) })
	if err != nil {
		return 0, fmt.Errorf("cluster: writing the index record of session %s: %w", rec.ID, err)
	}
	return rev, nil
}

// GetSession reads a session's record; found is false if there is none.
func (n *Node) GetSession(ctx context.Context, id string) (rec SessionRecord, found bool, err error) {
	if err := CheckSessionID(id); err != nil {
		return SessionRecord{}, false, err
	}
	e, err := n.st.index.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return SessionRecord{}, false, nil
	}
	if err != nil {
		return SessionRecord{}, false, fmt.Errorf("cluster: reading the index record of session %s: %w", id, err)
	}
	rec, err = decodeSession(e)
	return rec, err == nil, err
}

func decodeSession(e jetstream.KeyValueEntry) (SessionRecord, error) {
	var rec SessionRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return SessionRecord{}, fmt.Errorf("cluster: the index record of session %s at revision %d does not decode: %w", e.Key(), e.Revision(), err)
	}
	rec.ID, rec.Revision = e.Key(), e.Revision()
	return rec, nil
}

// UpdateSession is Node.UpdateSession fenced by the lease: it refuses
// with *StaleError when the record was written under a later lease, so a
// stale owner cannot overwrite what the new owner recorded, and it marks
// the record with this lease's epoch.
func (l *Lease) UpdateSession(ctx context.Context, fn func(*SessionRecord) error) (SessionRecord, error) {
	return l.node.UpdateSession(ctx, l.sessionID, func(r *SessionRecord) error {
		if r.Epoch > l.epoch {
			return &StaleError{SessionID: l.sessionID, Epoch: l.epoch, CurrentEpoch: r.Epoch, Reason: "the session's index record was written under a later lease"}
		}
		if err := fn(r); err != nil {
			return err
		}
		r.Epoch = l.epoch
		return nil
	})
}

// UpdateSession changes a session's record with fn (given a zero record
// with the id if there is none) and writes it only if nobody changed it
// meanwhile, reading and calling fn again if someone did. An error from fn
// is returned as is and nothing is written.
func (n *Node) UpdateSession(ctx context.Context, id string, fn func(*SessionRecord) error) (SessionRecord, error) {
	if err := CheckSessionID(id); err != nil {
		return SessionRecord{}, err
	}
	for {
		rec, found, err := n.GetSession(ctx, id)
		if err != nil {
			return SessionRecord{}, err
		}
		if !found {
			rec = SessionRecord{ID: id}
		}
		if err := fn(&rec); err != nil {
			return SessionRecord{}, err
		}
		rec.ID = id
		b, err := json.Marshal(&rec)
		if err != nil {
			return SessionRecord{}, fmt.Errorf("cluster: encoding the index record of session %s: %w", id, err)
		}
		var rev uint64
		rev, err = whileLeaderless(ctx, func() (uint64, error) {
			if found {
				return n.st.index.Update(ctx, id, b, rec.Revision)
			}
			return n.st.index.Create(ctx, id, b)
		})
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			if ctx.Err() != nil {
				return SessionRecord{}, fmt.Errorf("cluster: updating the index record of session %s: %w", id, context.Cause(ctx))
			}
			continue
		}
		if err != nil {
			return SessionRecord{}, fmt.Errorf("cluster: writing the index record of session %s: %w", id, err)
		}
		rec.Revision = rev
		return rec, nil
	}
}

// ListSessions returns every record in the index, oldest first (by
// Created, then id), deleted ones included as in the single server's
// index. A record that does not decode is logged and left out.
func (n *Node) ListSessions(ctx context.Context) ([]SessionRecord, error) {
	w, err := n.st.index.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("cluster: listing sessions: %w", err)
	}
	defer w.Stop()
	var out []SessionRecord
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster: listing sessions: %w", context.Cause(ctx))
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("cluster: listing sessions: the watch ended early")
			}
			if e == nil {
				// Everything present when the watch started has arrived.
				slices.SortFunc(out, func(a, b SessionRecord) int {
					if c := a.Created.Compare(b.Created); c != 0 {
						return c
					}
					return cmp.Compare(a.ID, b.ID)
				})
				return out, nil
			}
			rec, err := decodeSession(e)
			if err != nil {
				n.log.Warn("cluster: skipping an index record", "err", err)
				continue
			}
			out = append(out, rec)
		}
	}
}

// DeleteSession removes a session's record from the index. Its transcript
// and journal stay (as a single server leaves the file); PurgeSession
// removes them too. Deleting a record that does not exist is not an error.
func (n *Node) DeleteSession(ctx context.Context, id string) error {
	if err := CheckSessionID(id); err != nil {
		return err
	}
	if err := n.st.index.Delete(ctx, id); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("cluster: deleting the index record of session %s: %w", id, err)
	}
	return nil
}

// PurgeSession removes everything the cluster keeps of a session: its
// index record, transcript, journal and events. The session must have no
// owner: a lease on it, live or expired, fails with *HeldError.
func (n *Node) PurgeSession(ctx context.Context, id string) error {
	if err := CheckSessionID(id); err != nil {
		return err
	}
	e, err := n.kv.Get(ctx, id)
	if err == nil {
		r, epoch, derr := decodeEntry(e)
		if derr != nil {
			return derr
		}
		return &HeldError{SessionID: id, Owner: r.Node, Epoch: epoch, Expires: r.expires()}
	}
	if !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted) {
		return fmt.Errorf("cluster: purging session %s: reading its lease: %w", id, err)
	}
	for _, p := range []struct {
		st      jetstream.Stream
		subject string
	}{{n.st.state, txPrefix + id}, {n.st.journal, journalPrefix + id}, {n.events, evPrefix + id}} {
		if err := p.st.Purge(ctx, jetstream.WithPurgeSubject(p.subject)); err != nil {
			return fmt.Errorf("cluster: purging session %s (%s): %w", id, p.subject, err)
		}
	}
	return n.DeleteSession(ctx, id)
}
