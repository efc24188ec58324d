package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentd-dev/agentd/internal/pipeline"
)

// Journal is the node's command journal in JournalStream, for the
// pipeline (pipeline.Options.Journal). A command of a session (its record's
// scope is "session:<id>") goes to the session's subject, so the node that
// takes the session over finds its outcome (JournalFor); a server-level
// command goes to this node's own subject.
//
// A session's record is written only by the session's owner: with this
// node's live lease it is fenced like a transcript append (a stale owner's
// record is refused with *StaleError), and without one it is written only
// if no node has a lease on the session at all (a command that creates the
// session starts before its lease exists); otherwise Append fails with
// *NotOwnerError. A record is durable when Append returns in the sense
// JetStream gives: stored by the stream's replicas (on one server,
// written to its file store, which syncs on its own schedule).
//
// A record whose encoding exceeds a message (MaxStateMsg) is stored
// without its data, marked DataDropped, as pipeline.FileJournal does with
// outsized outcomes: a replay answers with the outcome, not the data, and
// never runs the command again.
func (n *Node) Journal() pipeline.Journal { return &journal{n: n} }

type journal struct{ n *Node }

// Append implements pipeline.Journal.
func (j *journal) Append(r pipeline.Record) error {
	n := j.n
	r.Interrupted = false // as stored
	data, err := n.encodeRecord(&r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RequestTimeout)
	defer cancel()
	if id, ok := sessionOf(r.Scope); ok {
		return n.appendSessionRecord(ctx, id, data)
	}
	m := nats.NewMsg(nodeJournalPrefix + n.cfg.NodeID)
	m.Data = data
	m.Header.Set(hdrNode, n.cfg.NodeID)
	if _, err := n.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("cluster: journal of node %s: %w", n.cfg.NodeID, err)
	}
	return nil
}

// Load implements pipeline.Journal: the outcomes of this node's
// server-level commands and of the sessions it holds leases on, as
// pipeline.Recover makes them (commands begun and never finished come back
// as interrupted; those are written back as finished, so they are
// reported interrupted once).
func (j *journal) Load() ([]pipeline.Record, error) {
	n := j.n
	ctx, cancel := context.WithTimeout(context.Background(), 4*n.cfg.RequestTimeout)
	defer cancel()
	subject := nodeJournalPrefix + n.cfg.NodeID
	last, err := readLast(ctx, n.st.journal, subject)
	if err != nil {
		return nil, fmt.Errorf("cluster: journal of node %s: %w", n.cfg.NodeID, err)
	}
	var out []pipeline.Record
	if last.pos != 0 {
		recs, err := n.readRecords(ctx, subject, last.pos)
		if err != nil {
			return nil, err
		}
		out = pipeline.Recover(recs, time.Now())
		for _, r := range out {
			if r.Interrupted {
				if err := j.Append(r); err != nil {
					n.log.Warn("cluster: writing back an interrupted command", "command", r.ID, "err", err)
				}
			}
		}
	}
	for _, l := range n.Leases() {
		recs, err := n.JournalFor(ctx, l.sessionID)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
	}
	return out, nil
}

// JournalFor returns the recorded outcomes of a session's commands, as a
// pipeline's Load would (pipeline.Recover): for the node taking the
// session over, which passes them to pipeline.(*Pipeline).Adopt so a
// command replayed by id returns its outcome and one the old owner was
// running answers as interrupted, never running again.
//
// When this node holds the session's lease, the read ends with a fence,
// as RestoreTranscript's does: a record the previous owner still tries to
// write is refused. The interrupted commands are then written back as
// finished, so a later takeover reports them as already recovered.
func (n *Node) JournalFor(ctx context.Context, sessionID string) ([]pipeline.Record, error) {
	if err := CheckSessionID(sessionID); err != nil {
		return nil, err
	}
	subject := journalPrefix + sessionID
	l := n.Lease(sessionID)
	for attempt := 0; ; attempt++ {
		last, err := readLast(ctx, n.st.journal, subject)
		if err != nil {
			return nil, fmt.Errorf("cluster: journal of session %s: %w", sessionID, err)
		}
		var recs []pipeline.Record
		if last.pos != 0 {
			if recs, err = n.readRecords(ctx, subject, last.pos); err != nil {
				return nil, err
			}
		}
		if l != nil {
			err := l.fence(ctx, &l.jrLog, n.st.journal, subject, last.pos)
			if errors.Is(err, errMoved) && attempt < 10 {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("cluster: journal of session %s: %w", sessionID, err)
			}
		}
		out := pipeline.Recover(recs, time.Now())
		if l == nil {
			return out, nil
		}
		for _, r := range out {
			if !r.Interrupted {
				continue
			}
			r.Interrupted = false
			data, err := n.encodeRecord(&r)
			if err == nil {
				err = n.appendSessionRecord(ctx, sessionID, data)
			}
			if err != nil {
				return nil, err
			}
		}
		return out, nil
	}
}

// sessionOf is the session a record's scope names, if it is one a lease
// can exist for. A scope naming a session id that is not usable as a
// subject token (no such session can be owned in a cluster) is kept with
// the node's server-level records.
func sessionOf(scope string) (string, bool) {
	id, ok := strings.CutPrefix(scope, "session:")
	return id, ok && CheckSessionID(id) == nil
}

func (n *Node) appendSessionRecord(ctx context.Context, sessionID string, data []byte) error {
	subject := journalPrefix + sessionID
	msg := func() *nats.Msg {
		m := nats.NewMsg(subject)
		m.Data = data
		return m
	}
	if l := n.Lease(sessionID); l != nil {
		_, err := l.appendFenced(ctx, &l.jrLog, n.st.journal, subject, []*nats.Msg{msg()}, nil)
		if err != nil {
			return fmt.Errorf("cluster: journal of session %s: %w", sessionID, err)
		}
		return nil
	}
	// Not ours: only a session nobody has a lease on, even an expired one
	// (whose holder may still believe it owns the session).
	notOwner := &NotOwnerError{SessionID: sessionID, Node: n.cfg.NodeID}
	for attempt := 0; attempt < 3; attempt++ {
		e, err := n.kv.Get(ctx, sessionID)
		switch {
		case err == nil:
			// This node's own acquire or takeover may be under way: its
			// lease is in the bucket a moment before the node holds it.
			// A command routed here by that entry waits for it.
			if r, _, derr := decodeEntry(e); derr == nil && r.Node == n.cfg.NodeID {
				if l := n.AwaitLease(ctx, sessionID); l != nil {
					if _, err := l.appendFenced(ctx, &l.jrLog, n.st.journal, subject, []*nats.Msg{msg()}, nil); err != nil {
						return fmt.Errorf("cluster: journal of session %s: %w", sessionID, err)
					}
					return nil
				}
			}
			return fmt.Errorf("cluster: journal of session %s: %w", sessionID, notOwner)
		case !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted):
			return fmt.Errorf("cluster: journal of session %s: reading its lease: %w", sessionID, err)
		}
		last, err := readLast(ctx, n.st.journal, subject)
		if err != nil {
			return fmt.Errorf("cluster: journal of session %s: %w", sessionID, err)
		}
		m := msg()
		m.Header.Set(hdrNode, n.cfg.NodeID)
		_, err = n.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(last.pos))
		if err == nil {
			return nil
		}
		if !isWrongLastSeq(err) {
			return fmt.Errorf("cluster: journal of session %s: %w", sessionID, err)
		}
		// Someone wrote meanwhile, perhaps a node that just acquired the
		// session: look again.
	}
	return fmt.Errorf("cluster: journal of session %s: %w", sessionID, notOwner)
}

// AwaitLease waits, for at most the request timeout, for this node to
// hold session id's lease, and returns it, or nil. The bucket names this
// node a moment before its Acquire or Takeover returns: a caller that
// found its own node there waits for the lease instead of failing.
func (n *Node) AwaitLease(ctx context.Context, id string) *Lease {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		if l := n.Lease(id); l != nil {
			return l
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// encodeRecord is r as stored (the journal's own record format,
// pipeline.MarshalRecord, as FileJournal's lines); data that would not fit in a message is
// dropped, as FileJournal drops outsized data.
func (n *Node) encodeRecord(r *pipeline.Record) ([]byte, error) {
	b, err := pipeline.MarshalRecord(r)
	if err != nil {
		return nil, fmt.Errorf("cluster: encoding a journal record: %w", err)
	}
	if len(b) <= n.st.part || r.Response == nil || len(r.Response.Data) == 0 {
		if len(b) > n.st.part {
			return nil, fmt.Errorf("cluster: a journal record of command %q is %d bytes, more than the %d a message takes", r.ID, len(b), n.st.part)
		}
		return b, nil
	}
	c := *r
	resp := *r.Response
	resp.Data, resp.DataDropped = nil, true
	c.Response = &resp
	return n.encodeRecord(&c)
}

// readRecords reads a journal subject's records up to position upTo,
// oldest first. A message that is not a record (a fence) is skipped, one
// that does not decode is logged and skipped.
func (n *Node) readRecords(ctx context.Context, subject string, upTo uint64) ([]pipeline.Record, error) {
	var recs []pipeline.Record
	bad := 0
	err := n.readSubject(ctx, JournalStream, subject, upTo, func(m subjectMsg) error {
		if m.hdr.Get(hdrKind) == kindFence {
			return nil
		}
		var r pipeline.Record
		if err := pipeline.UnmarshalRecord(m.data, &r); err != nil {
			bad++
			return nil
		}
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: reading the journal %s: %w", subject, err)
	}
	if bad > 0 {
		n.log.Warn("cluster: journal records that do not decode were skipped", "subject", subject, "records", bad)
	}
	return recs, nil
}
