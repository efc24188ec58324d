package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/agentd-dev/agentd/internal/cluster"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// Ownership of hosted sessions.

// claim takes session id's lease for this node before it is opened here,
// and says where its seq continues: after the last event any owner
// published. A session taken over (restore) first gets its transcript
// from the cluster, written to file; a stored file loaded into the
// cluster is copied to it. topts mirror every later write of the
// session's transcript to the cluster, fenced by the lease.
func (cs *clusterState) claim(ctx context.Context, id string, first uint64, file string, restore bool) (*cluster.Lease, uint64, []transcript.Option, error) {
	if ctx == nil || ctx.Err() != nil {
		ctx = cs.ctx
	}
	ctx, cancel := context.WithTimeout(ctx, clusterOpenTimeout)
	defer cancel()
	if cs.isDraining() {
		return nil, 0, nil, fault.Errorf(fault.Unavailable, "Session %s cannot be opened on node %s: the node is leaving the cluster; try again", id, cs.node.ID())
	}
	l, err := cs.node.Acquire(ctx, id)
	var held *cluster.HeldError
	switch {
	case errors.Is(err, cluster.ErrAlreadyHeld):
		l = cs.node.Lease(id)
		if l == nil {
			return nil, 0, nil, fault.Errorf(fault.Conflict, "Session %s is being released by this node; try again", id)
		}
	case errors.As(err, &held):
		if l, err = cs.node.Takeover(ctx, id); err != nil {
			if errors.As(err, &held) && held.Owner == cs.node.ID() {
				// This node is taking it over on another path (a
				// follower's takeover, a command's): wait for that.
				if l = cs.node.AwaitLease(ctx, id); l != nil {
					break
				}
			}
			if errors.As(err, &held) {
				return nil, 0, nil, fault.Errorf(fault.Conflict, "Session %s is owned by node %s", id, held.Owner)
			}
			return nil, 0, nil, fault.Wrap(fault.Unavailable, err, "Session "+id+" could not be taken over: "+err.Error())
		}
		cs.takeovers.Add(1)
	case err != nil:
		return nil, 0, nil, fault.Wrap(fault.Unavailable, err, "Session "+id+" could not be claimed in the cluster: "+err.Error())
	}
	// A claim that fails lets the lease go even when it failed because
	// its caller gave up: else the session stays locked until the lease
	// runs out.
	release := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), clusterReadTimeout)
		defer cancel()
		_ = l.Release(rctx)
	}
	fail := func(msg string, err error) (*cluster.Lease, uint64, []transcript.Option, error) {
		release()
		return nil, 0, nil, fault.Wrap(fault.Unavailable, err, "Session "+id+": "+msg+": "+err.Error())
	}
	last, err := cs.node.LastSeq(ctx, id)
	if err != nil {
		return fail("its events could not be read", err)
	}
	switch {
	case restore:
		if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
			return fail("its transcript could not be restored", err)
		}
		found, err := cs.node.RestoreTranscript(ctx, id, file)
		if err != nil {
			return fail("its transcript could not be restored", err)
		}
		if !found {
			if _, serr := os.Stat(file); serr != nil {
				release()
				return nil, 0, nil, fault.Errorf(fault.NotFound, "Session %s not found (the cluster holds no transcript for it)", id)
			}
			if err := l.SeedTranscript(ctx, file); err != nil {
				return fail("its transcript could not be copied to the cluster", err)
			}
		}
	case file != "":
		if err := l.SeedTranscript(ctx, file); err != nil {
			return fail("its transcript could not be copied to the cluster", err)
		}
	}
	return l, nextSeq(first, last, cs.s.cfg.EventLogSize), []transcript.Option{transcript.WithMirror(l.TranscriptMirror())}, nil
}

// nextSeq is where a session's seq continues on a node that claims it:
// reserved is the highest seq its previous owner may have used (its
// reservation; exactly its last seq after a clean handover), published
// the last seq in the stream. The previous owner's clients may have seen
// events it never published (it died first), but no more than its event
// log holds: the publisher reads from there, and skips what left it. So
// the seq continues after the stream's last one plus that (logSize, 0
// for the default), or after the reservation if that is lower: a jump of
// at most the event log's size after a crash, none after a handover.
//
// A session with nothing in the stream keeps its reservation: one from
// before the cluster continues after what its single server numbered.
func nextSeq(reserved, published uint64, logSize int) uint64 {
	if published == 0 {
		return reserved
	}
	if logSize <= 0 {
		logSize = session.DefaultEventLogSize
	}
	return max(published, min(reserved, published+uint64(logSize)))
}

func (cs *clusterState) isDraining() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.draining
}

// lookup completes what the node's own index knows of session id (e, ok)
// with the cluster's index. restore says the session's transcript is to
// be taken from the cluster (to e.File): it may have run on another node
// since this one last had it.
func (cs *clusterState) lookup(ctx context.Context, id string, e indexEntry, ok bool) (indexEntry, bool, bool, error) {
	if cluster.CheckSessionID(id) != nil {
		return e, ok, false, nil // not a cluster session: local only
	}
	ctx, cancel := context.WithTimeout(ctx, clusterReadTimeout)
	defer cancel()
	rec, found, err := cs.node.GetSession(ctx, id)
	if err != nil {
		return e, false, false, fault.Wrap(fault.Unavailable, err, "Session "+id+" could not be looked up in the cluster: "+err.Error())
	}
	if !found {
		return e, ok, false, nil // from before the cluster: its file is here
	}
	if rec.Deleted {
		e.ID, e.Deleted = id, true
		return e, true, false, nil
	}
	file := e.File
	if !ok || e.Deleted || file == "" {
		file = filepath.Join(cs.s.cfg.SessionsDir, "cluster", id+".jsonl")
	}
	cwd := rec.Cwd
	if st, err := os.Stat(cwd); cwd == "" || err != nil || !st.IsDir() {
		cwd = cs.s.cfg.Cwd
	}
	ne := indexEntry{ID: id, File: file, Cwd: cwd, Owner: rec.Owner, Created: rec.Created,
		Seq: rec.LastSeq, Sandbox: rec.Sandbox}
	if rec.LastSeq == 0 {
		// A record from before seqs were kept in it.
		ne.Seq = e.Seq
	}
	// open reads where the seq continues, the owner and the sandbox from
	// this node's index.
	if err := cs.s.index.put(ne, false); err != nil {
		return e, false, false, fault.Wrap(fault.Internal, err, "Session "+id+" could not be recorded on this node: "+err.Error())
	}
	return ne, true, true, nil
}

// reserve records in the cluster's index that session id may use seqs up
// to limit, so that a node taking it over numbers after every event its
// owner may have shown a client, published or not.
func (cs *clusterState) reserve(id string, limit uint64) {
	ctx, cancel := context.WithTimeout(cs.ctx, clusterReadTimeout)
	defer cancel()
	if _, err := cs.node.UpdateSession(ctx, id, func(r *cluster.SessionRecord) error {
		r.LastSeq = max(r.LastSeq, limit)
		return nil
	}); err != nil {
		cs.s.log.Error("cluster: reserving event seqs", "session", id, "err", err)
	}
}

// free refuses to create a session whose id the cluster already has.
func (cs *clusterState) free(ctx context.Context, id string) error {
	if cluster.CheckSessionID(id) != nil {
		return fault.Errorf(fault.Invalid, "Validation failed: sessionId: in a cluster, a session id may hold only letters, digits, '-' and '_'")
	}
	ctx, cancel := context.WithTimeout(ctx, clusterReadTimeout)
	defer cancel()
	rec, found, err := cs.node.GetSession(ctx, id)
	if err != nil {
		return fault.Wrap(fault.Unavailable, err, "Session "+id+" could not be looked up in the cluster: "+err.Error())
	}
	if found && !rec.Deleted {
		return fault.Errorf(fault.Conflict, "Session %s already exists", id)
	}
	return nil
}

// known adds to local (the sessions this node's index knows and does not
// host) the cluster's other sessions, as its index has them: every node
// lists every session. A session the cluster deleted is left out.
func (cs *clusterState) known(local []Known) []Known {
	ctx, cancel := context.WithTimeout(cs.ctx, clusterReadTimeout)
	defer cancel()
	recs, err := cs.node.ListSessions(ctx)
	if err != nil {
		cs.s.log.Warn("cluster: listing the cluster's sessions", "err", err)
		return local
	}
	byID := make(map[string]Known, len(local))
	for _, k := range local {
		byID[k.ID] = k
	}
	out := make([]Known, 0, len(recs)+len(local))
	for _, r := range recs {
		k, here := byID[r.ID]
		delete(byID, r.ID)
		if r.Deleted || cs.hostsOrMakes(r.ID) {
			continue
		}
		if !here {
			k = Known{ID: r.ID, File: r.File, Cwd: r.Cwd, Owner: r.Owner, Created: r.Created,
				Info: transcript.Info{ID: r.ID, Name: r.Name, Cwd: r.Cwd, Created: r.Created}}
		}
		out = append(out, k)
	}
	for _, k := range local {
		if _, ok := byID[k.ID]; ok {
			out = append(out, k) // from before the cluster
		}
	}
	return out
}

// visible answers Visible for a session this node's index does not know.
func (cs *clusterState) visible(id string, p Principal) bool {
	if cluster.CheckSessionID(id) != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(cs.ctx, clusterReadTimeout)
	defer cancel()
	rec, found, err := cs.node.GetSession(ctx, id)
	return err == nil && found && !rec.Deleted && p.MaySee(id, rec.Owner)
}
