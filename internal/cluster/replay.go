package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// replayBatch is how many events one fetch asks for.
const replayBatch = 256

// Replay returns the session's events with a seq above afterSeq, in seq
// order, as the stream holds them when Replay starts: what a client that
// saw afterSeq needs to resume, on whichever node it reconnected to.
// Events published while Replay runs are left for the next call (or a live
// subscription) so it always ends. It reads with batched direct gets, and
// an ordered consumer where those cannot finish (directget.go). An event whose seq does not exceed one
// already returned is skipped, so a client never sees a seq twice or go
// back.
func (n *Node) Replay(ctx context.Context, sessionID string, afterSeq uint64) ([]Event, error) {
	if err := CheckSessionID(sessionID); err != nil {
		return nil, err
	}
	subject := evPrefix + sessionID
	last, err := n.events.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: replaying session %s: %w", sessionID, err)
	}
	lastEv, err := rawEvent(last)
	if err != nil {
		return nil, err
	}
	if lastEv.Seq <= afterSeq {
		return nil, nil
	}
	start, err := n.firstAfter(ctx, subject, afterSeq, last.Sequence)
	if err != nil {
		return nil, fmt.Errorf("cluster: replaying session %s: %w", sessionID, err)
	}
	r := replay{sessionID: sessionID, last: last.Sequence, maxSeq: afterSeq}
	start, done, err := n.readDirect(ctx, EventStream, subject, start, last.Sequence, func(m subjectMsg) error {
		evs, err := parseEvents(subject, m.hdr, m.pos, m.data)
		if err != nil {
			return err
		}
		r.add(evs)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: replaying session %s: %w", sessionID, err)
	}
	if done {
		return r.out, nil
	}
	n.consumerReads.Add(1)
	cons, err := n.js.OrderedConsumer(ctx, EventStream, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{subject},
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       start,
		InactiveThreshold: consumerIdle,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: replaying session %s: %w", sessionID, err)
	}
	defer func() {
		// Best effort: the server drops an idle one after InactiveThreshold.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), consumerDelete)
		defer cancel()
		if info := cons.CachedInfo(); info != nil {
			_ = n.js.DeleteConsumer(dctx, EventStream, info.Name)
		}
	}()
	for {
		done, err := r.fetch(ctx, cons)
		if err != nil {
			return nil, err
		}
		if done {
			return r.out, nil
		}
	}
}

// replay is the state of one Replay call across its fetches.
type replay struct {
	sessionID string
	last      uint64 // stream position of the last event to return
	maxSeq    uint64 // highest session seq returned (or the cursor)
	out       []Event
	retries   int
}

// add keeps each of one message's events (a batch's, or the one) unless
// its seq does not exceed one already kept.
func (r *replay) add(evs []Event) {
	for _, ev := range evs {
		if ev.Seq > r.maxSeq {
			r.out = append(r.out, ev)
			r.maxSeq = ev.Seq
		}
	}
}

// fetch reads one batch; done says the replay is complete. The fetch has
// its own context, cancelled and drained before returning, so the client
// library's fetch goroutine never outlives the call.
func (r *replay) fetch(ctx context.Context, cons jetstream.Consumer) (done bool, err error) {
	fctx, cancel := context.WithTimeout(ctx, fetchWait)
	batch, err := cons.Fetch(replayBatch, jetstream.FetchContext(fctx))
	if err != nil {
		cancel()
		return false, fmt.Errorf("cluster: replaying session %s: %w", r.sessionID, err)
	}
	defer func() {
		cancel()
		for range batch.Messages() {
		}
	}()
	got := 0
	for m := range batch.Messages() {
		got++
		md, err := m.Metadata()
		if err != nil {
			return false, fmt.Errorf("cluster: replaying session %s: %w", r.sessionID, err)
		}
		evs, err := parseEvents(m.Subject(), m.Headers(), md.Sequence.Stream, m.Data())
		if err != nil {
			return false, err
		}
		r.add(evs)
		if md.Sequence.Stream >= r.last {
			return true, nil
		}
	}
	if err := batch.Error(); err != nil {
		// In a cluster the new consumer's interest may not have reached
		// this client's server yet.
		if errors.Is(err, nats.ErrNoResponders) && got == 0 && r.retries < 50 {
			r.retries++
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
			return false, nil
		}
		if errors.Is(err, context.DeadlineExceeded) && got > 0 && ctx.Err() == nil {
			return false, nil // this fetch's own time ran out; go on
		}
		return false, fmt.Errorf("cluster: replaying session %s after seq %d: %w", r.sessionID, r.maxSeq, err)
	}
	if got == 0 {
		if err := ctx.Err(); err != nil {
			return false, fmt.Errorf("cluster: replaying session %s after seq %d: %w", r.sessionID, r.maxSeq, err)
		}
		// The events up to the last one seen at the start were removed
		// meanwhile (limits, purge): nothing more to return.
		return true, nil
	}
	return false, nil
}

// firstAfter finds the stream position of the session's first event with a
// seq above afterSeq, by bisecting stream positions with "next message on
// this subject" reads: a few round trips instead of reading the session's
// whole history. It relies on a session's seqs growing along the stream,
// which holds while one owner at a time publishes them in order; a batch
// reads as its last event, so the position found may be a batch holding
// events at or below afterSeq, which the reader skips. last is
// the position of the session's last event, whose seq is above afterSeq.
func (n *Node) firstAfter(ctx context.Context, subject string, afterSeq, last uint64) (uint64, error) {
	if afterSeq == 0 {
		return 1, nil
	}
	lo, hi := uint64(1), last
	for lo < hi {
		mid := lo + (hi-lo)/2
		m, err := n.events.GetMsg(ctx, mid, jetstream.WithGetMsgSubject(subject))
		if err != nil {
			return 0, fmt.Errorf("reading the event at or after stream seq %d: %w", mid, err)
		}
		ev, err := rawEvent(m)
		if err != nil {
			return 0, err
		}
		if ev.Seq > afterSeq {
			hi = mid
		} else {
			lo = m.Sequence + 1
		}
	}
	return lo, nil
}
