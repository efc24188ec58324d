package cluster

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
)

// Several events to a message. An owner publishing each event on its own
// waited for JetStream's acknowledgement of one before sending the next
// (the per-subject expected-sequence fence needs the position the last one
// got), so a session emitting faster than one event per round trip queued
// behind its publisher: at 50 tokens per answer about 54 events waited at
// each flush, and watchers on other nodes trailed by p99 half a second.
// PublishEvents sends what waits at a flush as one message (or a few, each
// under maxBatchBytes and maxBatchEvents), under the same fence.
//
// A batch is a message on the session's subject with the Agentd-Batch
// header (its event count) whose Agentd-Seq header is the seq of its last
// event, so everything that reads only headers (the fence's last event,
// LastSeq, the bisection of firstAfter) reads a batch as its last event.
// Its body is, for each event in ascending seq order, the seq and the
// length of its data as uvarints, then the data. A message without the
// header is one event, as every message was before batches: readers take
// both (parseEvents).
//
// One message per session is in flight, not several: the fence of the
// next needs the stream position the last one got. A fence that needs no
// answer (every message expecting this owner's own marker on another
// subject, Nats-Expected-Last-Subject-Sequence-Subject) would not do:
// a replicated stream refuses a second message while one under the same
// expected subject is in process, and a standalone server drops a message
// when its ingest queue is full (429) while accepting the next, so a
// later batch could be stored, and followed, without an earlier one.

const (
	hdrBatch = "Agentd-Batch"
	// maxBatchEvents bounds the events of one message.
	maxBatchEvents = 1024
)

// batchBytes bounds a batch's body: what the state streams' messages may
// carry (the server's max_payload, at most MaxStateMsg), less room for
// headers.
func (n *Node) batchBytes() int {
	if n.st.part > 0 {
		return n.st.part
	}
	return MaxStateMsg - partHeadroom
}

// batchLen is how many of evs, from the first, go in one message: at least
// one (an event larger than the bound alone goes as it always did), at
// most maxBatchEvents, with a body of at most limit bytes.
func batchLen(evs []Event, limit int) int {
	size := 0
	for i, ev := range evs {
		size += 2*binary.MaxVarintLen64 + len(ev.Data)
		if i > 0 && (size > limit || i == maxBatchEvents) {
			return i
		}
	}
	return len(evs)
}

// eventsMsg is the message carrying evs (ascending seqs, at least one) for
// subject, and its id for JetStream's duplicate window: one event goes as
// before batches, id session:seq; several as a batch, id
// session:first-last. A retry of the same message is dropped as a
// duplicate; one that overlaps a stored message differently is refused by
// the fence and trimmed (Lease.untaken).
func eventsMsg(subject, sessionID string, evs []Event, epoch uint64, node string) (*nats.Msg, string) {
	m := nats.NewMsg(subject)
	first, last := evs[0].Seq, evs[len(evs)-1].Seq
	m.Header.Set(hdrSeq, strconv.FormatUint(last, 10))
	m.Header.Set(hdrEpoch, strconv.FormatUint(epoch, 10))
	m.Header.Set(hdrNode, node)
	if len(evs) == 1 {
		m.Data = evs[0].Data
		return m, sessionID + ":" + strconv.FormatUint(first, 10)
	}
	m.Header.Set(hdrBatch, strconv.Itoa(len(evs)))
	m.Data = encodeBatch(evs)
	return m, sessionID + ":" + strconv.FormatUint(first, 10) + "-" + strconv.FormatUint(last, 10)
}

func encodeBatch(evs []Event) []byte {
	size := 0
	for _, ev := range evs {
		size += 2*binary.MaxVarintLen64 + len(ev.Data)
	}
	b := make([]byte, 0, size)
	for _, ev := range evs {
		b = binary.AppendUvarint(b, ev.Seq)
		b = binary.AppendUvarint(b, uint64(len(ev.Data)))
		b = append(b, ev.Data...)
	}
	return b
}

// parseEvents reads the events of one stored message, a batch or a single
// event, in seq order.
func parseEvents(subject string, h nats.Header, streamSeq uint64, data []byte) ([]Event, error) {
	head, err := parseEvent(subject, h, streamSeq, data)
	if err != nil {
		return nil, err
	}
	count := h.Get(hdrBatch)
	if count == "" {
		return []Event{head}, nil
	}
	bad := func(why string) error {
		return fmt.Errorf("cluster: event batch at stream seq %d on %s: %s", streamSeq, subject, why)
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 || n > maxBatchEvents {
		return nil, bad("bad " + hdrBatch + " header " + strconv.Quote(count))
	}
	evs := make([]Event, 0, n)
	for len(data) > 0 {
		seq, k := binary.Uvarint(data)
		if k <= 0 {
			return nil, bad("truncated seq")
		}
		data = data[k:]
		size, k := binary.Uvarint(data)
		if k <= 0 || size > uint64(len(data)-k) {
			return nil, bad("truncated event")
		}
		data = data[k:]
		if len(evs) > 0 && seq <= evs[len(evs)-1].Seq {
			return nil, bad("seqs not ascending")
		}
		if len(evs) == n {
			return nil, bad("more events than its header says")
		}
		evs = append(evs, Event{Seq: seq, Epoch: head.Epoch, Node: head.Node, StreamSeq: streamSeq, Data: data[:size:size]})
		data = data[size:]
	}
	if len(evs) != n || evs[n-1].Seq != head.Seq {
		return nil, bad(fmt.Sprintf("%d events, header says %s ending at seq %d", len(evs), count, head.Seq))
	}
	return evs, nil
}

// PublishEvents appends a session's events (ascending seqs) to the stream,
// several to a message, each message under the fence Publish describes:
// a stale owner's is refused and its lease ends. Events whose seq the
// stream already has from this owner (a flush retried after its answer
// was lost) are not published again; those whose seq a previous owner
// already used are skipped and logged (Publish's SeqTakenError). through
// is the seq of the last event handled, published or skipped, also when
// err says a later one could not be: the caller goes on after it.
func (n *Node) PublishEvents(ctx context.Context, sessionID string, evs []Event) (through uint64, err error) {
	l := n.Lease(sessionID)
	if l == nil || l.Err() != nil {
		return 0, &NotOwnerError{SessionID: sessionID, Node: n.cfg.NodeID}
	}
	l.pub.Lock()
	defer l.pub.Unlock()
	limit := n.batchBytes()
	for len(evs) > 0 {
		k := batchLen(evs, limit)
		if _, err := l.append(ctx, evs[:k], true); err != nil {
			return through, err
		}
		through = evs[k-1].Seq
		evs = evs[k:]
	}
	return through, nil
}

// untaken drops the events of evs the stream's last event already covers:
// this owner's own (published by an attempt whose answer was lost) or an
// older owner's (seqs it used before it noticed the takeover). After a
// newer owner's it drops nothing: the fence's check ends this lease.
func (l *Lease) untaken(evs []Event) []Event {
	last := l.evLast
	if last.pos == 0 || last.epoch > l.epoch {
		return evs
	}
	own := last.epoch == l.epoch && last.node == l.node.cfg.NodeID
	i := 0
	for i < len(evs) && evs[i].Seq <= last.seq {
		i++
	}
	if i > 0 && !own {
		l.node.log.Warn("cluster: events' seqs were already used by the previous owner; skipped",
			"session", l.sessionID, "first", evs[0].Seq, "through", evs[i-1].Seq, "node", last.node, "epoch", last.epoch)
	}
	return evs[i:]
}
