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
// subscription) so it always ends. An event whose seq does not exceed one
// already returned is skipped, so a client never sees a seq twice or go
// back.
func (n *Node) Replay(ctx context.Context, sessionID string, afterSeq uint64) ([]Event, error) {
	if err := checkSessionID(sessionID); err != nil {
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
	cons, err := n.js.OrderedConsumer(ctx, EventStream, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{subject},
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       start,
		InactiveThreshold: 30 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: replaying session %s: %w", sessionID, err)
	}
	defer func() {
		// Best effort: the server drops an idle one after InactiveThreshold.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = n.js.DeleteConsumer(dctx, EventStream, cons.CachedInfo().Name)
	}()

	var out []Event
	maxSeq := afterSeq
	retries := 0
	for {
		wait := 5 * time.Second
		if d, ok := ctx.Deadline(); ok {
			wait = max(time.Until(d), time.Millisecond)
		}
		batch, err := cons.Fetch(replayBatch, jetstream.FetchMaxWait(wait))
		if err != nil {
			return nil, fmt.Errorf("cluster: replaying session %s: %w", sessionID, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("cluster: replaying session %s: %w", sessionID, err)
			}
			ev, err := parseEvent(m.Subject(), m.Headers(), md.Sequence.Stream, m.Data())
			if err != nil {
				return nil, err
			}
			if ev.Seq > maxSeq {
				out = append(out, ev)
				maxSeq = ev.Seq
			}
			if md.Sequence.Stream >= last.Sequence {
				return out, nil
			}
		}
		if err := batch.Error(); err != nil {
			// In a cluster the new consumer's interest may not have
			// reached this client's server yet.
			if errors.Is(err, nats.ErrNoResponders) && got == 0 && retries < 50 {
				retries++
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
				continue
			}
			return nil, fmt.Errorf("cluster: replaying session %s after seq %d: %w", sessionID, maxSeq, err)
		}
		if got == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("cluster: replaying session %s after seq %d: %w", sessionID, maxSeq, err)
			}
			// The events up to the last one seen at the start were removed
			// meanwhile (limits, purge): nothing more to return.
			return out, nil
		}
	}
}

// firstAfter finds the stream position of the session's first event with a
// seq above afterSeq, by bisecting stream positions with "next message on
// this subject" reads: a few round trips instead of reading the session's
// whole history. It relies on a session's seqs growing along the stream,
// which holds while one owner at a time publishes them in order. last is
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
