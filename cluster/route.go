package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers on command replies and events.
const (
	hdrError = "Agentd-Error"
	hdrNode  = "Agentd-Node"
	hdrEpoch = "Agentd-Epoch"
	hdrSeq   = "Agentd-Seq"
)

// Handler answers one command for a session this node owns. ctx is the
// lease's context: it is cancelled when the lease ends. Commands for one
// session reach the handler one at a time, in arrival order. A returned
// error reaches the requester as a *RemoteError with its text.
type Handler func(ctx context.Context, payload []byte) ([]byte, error)

// NoOwnerError says no node answered for a session: nobody owns it, or its
// owner is gone and the lease has not been taken over yet.
type NoOwnerError struct {
	SessionID string
}

func (e *NoOwnerError) Error() string {
	return fmt.Sprintf("cluster: no node is serving session %s (it is not owned, or its owner is gone and it has not been taken over yet)", e.SessionID)
}

// RemoteError is a command's failure as the owner's handler reported it.
type RemoteError struct {
	SessionID string
	Node      string
	Message   string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("cluster: node %s, session %s: %s", e.Node, e.SessionID, e.Message)
}

// NotOwnerError says this node may not act for a session: it holds no live
// lease on it.
type NotOwnerError struct {
	SessionID string
	Node      string
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("cluster: node %s does not own session %s", e.Node, e.SessionID)
}

// Serve answers commands for a session on this node, which must hold its
// lease. Serving stops by itself when the lease ends, so a node that lost
// a session stops answering for it. There is one server per session: the
// subject has no queue group, and a second Serve on the same lease fails.
func (n *Node) Serve(sessionID string, h Handler) error {
	if err := n.subscribe(sessionID, h); err != nil {
		return err
	}
	// Wait until the server has the subscription, so a Request sent right
	// after Serve returns finds it.
	if err := n.nc.Flush(); err != nil {
		return fmt.Errorf("cluster: serving session %s: %w", sessionID, err)
	}
	return nil
}

func (n *Node) subscribe(sessionID string, h Handler) error {
	l := n.Lease(sessionID)
	if l == nil {
		return &NotOwnerError{SessionID: sessionID, Node: n.cfg.NodeID}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return &NotOwnerError{SessionID: sessionID, Node: n.cfg.NodeID}
	}
	if l.sub != nil {
		return fmt.Errorf("cluster: session %s is already served on node %s", sessionID, n.cfg.NodeID)
	}
	sub, err := n.nc.Subscribe(cmdPrefix+sessionID, func(m *nats.Msg) {
		reply := nats.NewMsg(m.Reply)
		reply.Header.Set(hdrNode, n.cfg.NodeID)
		reply.Header.Set(hdrEpoch, strconv.FormatUint(l.epoch, 10))
		out, err := h(l.ctx, m.Data)
		if err != nil {
			reply.Header.Set(hdrError, err.Error())
		} else {
			reply.Data = out
		}
		if err := m.RespondMsg(reply); err != nil {
			n.log.Warn("cluster: replying to a command", "session", sessionID, "err", err)
		}
	})
	if err != nil {
		return fmt.Errorf("cluster: serving session %s: %w", sessionID, err)
	}
	l.sub = sub
	return nil
}

// Request sends a command to the session's owner, whichever node that is,
// and returns its reply. It fails with *NoOwnerError when nobody serves the
// session, *RemoteError when the owner's handler failed, and an error
// wrapping context.DeadlineExceeded when the owner did not answer in time
// (Config.RequestTimeout unless ctx has a deadline).
func (n *Node) Request(ctx context.Context, sessionID string, payload []byte) ([]byte, error) {
	if err := checkSessionID(sessionID); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.cfg.RequestTimeout)
		defer cancel()
	}
	m, err := n.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: cmdPrefix + sessionID, Data: payload})
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, &NoOwnerError{SessionID: sessionID}
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("cluster: the owner of session %s did not answer in time: %w", sessionID, err)
	case err != nil:
		return nil, fmt.Errorf("cluster: sending a command to session %s: %w", sessionID, err)
	}
	if msg := m.Header.Get(hdrError); msg != "" {
		return nil, &RemoteError{SessionID: sessionID, Node: m.Header.Get(hdrNode), Message: msg}
	}
	return m.Data, nil
}

// Event is one session event as kept in the stream.
type Event struct {
	Seq       uint64 // the session's own seq, as published
	Epoch     uint64 // the publishing owner's lease epoch
	Node      string // the publishing node
	StreamSeq uint64 // position in the stream, for diagnostics
	Data      []byte
}

// Publish appends a session event to the stream. This node must hold the
// session's live lease. The stream itself fences the write: each publish
// expects the session's last stream position this owner knows of, so once
// another owner has published, a stale owner's event is refused (a
// *StaleError, and the lease ends) even if the stale owner has not noticed
// yet. seq is the session's event seq: the stream drops a second event
// with the same session and seq within its duplicate window, which makes a
// retried publish safe; Publish then reports duplicate true. Publishes for
// one session are serialized.
func (n *Node) Publish(ctx context.Context, sessionID string, seq uint64, payload []byte) (duplicate bool, err error) {
	l := n.Lease(sessionID)
	if l == nil || l.Err() != nil {
		return false, &NotOwnerError{SessionID: sessionID, Node: n.cfg.NodeID}
	}
	return l.publish(ctx, seq, payload)
}

func (l *Lease) publish(ctx context.Context, seq uint64, payload []byte) (bool, error) {
	n := l.node
	l.pub.Lock()
	defer l.pub.Unlock()
	l.mu.Lock()
	deadline := l.deadline
	l.mu.Unlock()
	if time.Now().After(deadline) {
		return false, l.lose("it was not renewed in time", "", 0)
	}
	subject := evPrefix + l.sessionID
	if !l.evKnown {
		if err := l.readLastEvent(ctx); err != nil {
			return false, fmt.Errorf("cluster: publishing event %d of session %s: %w", seq, l.sessionID, err)
		}
	}
	for attempt := 0; ; attempt++ {
		if err := l.checkLastEvent(seq); err != nil {
			return false, err
		}
		m := nats.NewMsg(subject)
		m.Data = payload
		m.Header.Set(hdrSeq, strconv.FormatUint(seq, 10))
		m.Header.Set(hdrEpoch, strconv.FormatUint(l.epoch, 10))
		m.Header.Set(hdrNode, n.cfg.NodeID)
		ack, err := n.js.PublishMsg(ctx, m,
			jetstream.WithMsgID(l.sessionID+":"+strconv.FormatUint(seq, 10)),
			jetstream.WithExpectLastSequencePerSubject(l.evLast.pos))
		if err == nil {
			if ack.Sequence > l.evLast.pos {
				l.evLast = lastEvent{pos: ack.Sequence, seq: seq, epoch: l.epoch, node: n.cfg.NodeID}
			}
			return ack.Duplicate, nil
		}
		if !isWrongLastSeq(err) || attempt > 0 {
			return false, fmt.Errorf("cluster: publishing event %d of session %s: %w", seq, l.sessionID, err)
		}
		// The session's events moved past what this owner knew: read who
		// wrote the last one and decide again.
		if err := l.readLastEvent(ctx); err != nil {
			return false, fmt.Errorf("cluster: publishing event %d of session %s: %w", seq, l.sessionID, err)
		}
	}
}

// lastEvent is what an owner knows of its session's last event.
type lastEvent struct {
	pos   uint64 // stream position; 0 for none
	seq   uint64
	epoch uint64
	node  string
}

func (l *Lease) readLastEvent(ctx context.Context) error {
	m, err := l.node.events.GetLastMsgForSubject(ctx, evPrefix+l.sessionID)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		l.evLast, l.evKnown = lastEvent{}, true
		return nil
	}
	if err != nil {
		return err
	}
	ev, err := rawEvent(m)
	if err != nil {
		return err
	}
	l.evLast, l.evKnown = lastEvent{pos: m.Sequence, seq: ev.Seq, epoch: ev.Epoch, node: ev.Node}, true
	return nil
}

// checkLastEvent decides whether event seq may follow the last one. After
// this owner's own event, anything may (a seq already used is a retry, and
// the duplicate check drops it). After a newer owner's, nothing may: this
// lease is stale. After an older owner's (the one this lease took the
// session from, writing before it noticed), only a seq above it: the same
// seq would be dropped as a duplicate of a different event.
func (l *Lease) checkLastEvent(seq uint64) error {
	last := l.evLast
	switch {
	case last.pos == 0 || (last.epoch == l.epoch && last.node == l.node.cfg.NodeID):
		return nil
	case last.epoch > l.epoch:
		return l.lose(fmt.Sprintf("node %s published event %d at epoch %d", last.node, last.seq, last.epoch), last.node, last.epoch)
	case seq <= last.seq:
		return &SeqTakenError{SessionID: l.sessionID, Seq: seq, Last: last.seq, Node: last.node, Epoch: last.epoch}
	}
	return nil
}

// SeqTakenError says the session's events already reach Last, written by a
// previous owner: the new owner continues numbering after Last.
type SeqTakenError struct {
	SessionID string
	Seq       uint64
	Last      uint64
	Node      string
	Epoch     uint64
}

func (e *SeqTakenError) Error() string {
	return fmt.Sprintf("cluster: event %d of session %s cannot be published: node %s already published up to %d at epoch %d; continue after %d",
		e.Seq, e.SessionID, e.Node, e.Last, e.Epoch, e.Last)
}

// isWrongLastSeq tells the stream's "expected last sequence" refusal;
// replicated streams report it with a different code.
func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// LastSeq is the seq of the session's latest event in the stream, 0 if it
// has none: where a new owner continues numbering after a takeover.
func (n *Node) LastSeq(ctx context.Context, sessionID string) (uint64, error) {
	if err := checkSessionID(sessionID); err != nil {
		return 0, err
	}
	m, err := n.events.GetLastMsgForSubject(ctx, evPrefix+sessionID)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("cluster: reading the last event of session %s: %w", sessionID, err)
	}
	ev, err := rawEvent(m)
	if err != nil {
		return 0, err
	}
	return ev.Seq, nil
}

func rawEvent(m *jetstream.RawStreamMsg) (Event, error) {
	return parseEvent(m.Subject, m.Header, m.Sequence, m.Data)
}

func parseEvent(subject string, h nats.Header, streamSeq uint64, data []byte) (Event, error) {
	seq, err := strconv.ParseUint(h.Get(hdrSeq), 10, 64)
	if err != nil {
		return Event{}, fmt.Errorf("cluster: event at stream seq %d on %s has no valid %s header: %w", streamSeq, subject, hdrSeq, err)
	}
	epoch, _ := strconv.ParseUint(h.Get(hdrEpoch), 10, 64)
	return Event{Seq: seq, Epoch: epoch, Node: h.Get(hdrNode), StreamSeq: streamSeq, Data: data}, nil
}
