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

// Headers on replies to SendNode and on events.
const (
	hdrError = "Agentd-Error"
	hdrNode  = "Agentd-Node"
	hdrEpoch = "Agentd-Epoch"
	hdrSeq   = "Agentd-Seq"
)

// NotOwnerError says this node may not act for a session: it holds no live
// lease on it.
type NotOwnerError struct {
	SessionID string
	Node      string
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("cluster: node %s does not own session %s", e.Node, e.SessionID)
}

// Event is one session event as kept in the stream.
type Event struct {
	Seq       uint64 // the session's own seq, as published
	Epoch     uint64 // the publishing owner's lease epoch
	Node      string // the publishing node
	StreamSeq uint64 // position in the stream, for diagnostics
	Data      []byte
	// More says that Follow delivers more events of the same stream
	// message right after this one: a subscriber's queue may hold this
	// event's frame for them and send them together.
	More bool
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
	l.pub.Lock()
	defer l.pub.Unlock()
	return l.append(ctx, []Event{{Seq: seq, Data: payload}}, false)
}

// append publishes evs (ascending seqs, one message's worth: batchLen) as
// one message under the fence; l.pub is held. With trim, events the
// stream's last event already covers are dropped first (untaken), and
// again if the fence refuses the message; duplicate is true when none
// were left.
func (l *Lease) append(ctx context.Context, evs []Event, trim bool) (duplicate bool, err error) {
	n := l.node
	l.mu.Lock()
	deadline := l.deadline
	l.mu.Unlock()
	if time.Now().After(deadline) {
		return false, l.lose("it was not renewed in time", "", 0)
	}
	seq := evs[len(evs)-1].Seq
	subject := evPrefix + l.sessionID
	if !l.evKnown {
		if err := l.readLastEvent(ctx); err != nil {
			return false, fmt.Errorf("cluster: publishing event %d of session %s: %w", seq, l.sessionID, err)
		}
	}
	refused := 0
	for attempt := 0; ; attempt++ {
		if trim {
			if evs = l.untaken(evs); len(evs) == 0 {
				return true, nil
			}
		}
		if err := l.checkLastEvent(evs[0].Seq); err != nil {
			return false, err
		}
		m, id := eventsMsg(subject, l.sessionID, evs, l.epoch, n.cfg.NodeID)
		ack, err := publishAttempt(ctx, n.js, m,
			jetstream.WithMsgID(id),
			jetstream.WithExpectLastSequencePerSubject(l.evLast.pos))
		if err == nil {
			if ack.Sequence > l.evLast.pos {
				l.evLast = lastEvent{pos: ack.Sequence, seq: seq, epoch: l.epoch, node: n.cfg.NodeID}
			}
			return ack.Duplicate, nil
		}
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) && ctx.Err() == nil && l.Err() == nil {
			// NATS away or an answer lost: the same id again, once NATS
			// is back (the stream keeps one copy).
			if perr := l.pauseRetry(ctx, attempt); perr != nil {
				return false, fmt.Errorf("cluster: publishing event %d of session %s: %w", seq, l.sessionID, perr)
			}
			continue
		}
		if !isWrongLastSeq(err) || refused > 0 {
			return false, fmt.Errorf("cluster: publishing event %d of session %s: %w", seq, l.sessionID, err)
		}
		refused++
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
	if err := CheckSessionID(sessionID); err != nil {
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

// LastEvent is the session's latest event in the stream; ok is false if
// it has none.
func (n *Node) LastEvent(ctx context.Context, sessionID string) (ev Event, ok bool, err error) {
	if err := CheckSessionID(sessionID); err != nil {
		return Event{}, false, err
	}
	// Tried again within ctx, each try bounded: a node taking a session
	// over after a kill -9 reads this while the stream may be electing a
	// leader, when NATS drops a request instead of refusing it. One read
	// that waited out all of ctx left the previous owner's run without
	// its end for every watcher (and the session's record unwritten).
	var m *jetstream.RawStreamMsg
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, min(fetchWait, reconnectMax))
		m, err = n.events.GetLastMsgForSubject(actx, evPrefix+sessionID)
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrMsgNotFound) || ctx.Err() != nil || n.nc.IsClosed() {
			break
		}
		t := time.NewTimer(min(reconnectMax, 50*time.Millisecond<<min(attempt, 6)))
		select {
		case <-ctx.Done():
		case <-n.reconn.wait():
		case <-t.C:
		}
		t.Stop()
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Event{}, false, nil
	}
	if err != nil {
		return Event{}, false, fmt.Errorf("cluster: reading the last event of session %s: %w", sessionID, err)
	}
	evs, err := parseEvents(m.Subject, m.Header, m.Sequence, m.Data)
	if err != nil {
		return Event{}, false, err
	}
	return evs[len(evs)-1], true, nil
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
