package cluster

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// Reading a subject's messages with batched direct gets instead of an
// ordered consumer. A consumer costs its creation, a fetch and its
// deletion, about a millisecond against a local server whatever it then
// reads (and in a clustered JetStream its creation goes through the
// stream's leader); a node taking a session over read two subjects that
// way, its transcript and its journal, about half of what the takeover
// took (BenchmarkTakeoverState). A batched direct get returns up to a
// batch of a subject's messages from a stream position in one request,
// answered by any replica.
//
// It is only a fast path: whenever its answer cannot be trusted to be
// complete (a server that does not batch direct gets, which answers with
// one message and no pending count; a replica that has not stored the
// messages up to the position asked for yet; a message of the answer
// missing; no answer) the caller goes on with a consumer from the first
// message not delivered. The request goes to the default JetStream API
// prefix, as jetstream.New(nc) uses it.

const (
	// directBatch is how many messages one request asks for.
	directBatch = 256
	// directMaxBytes bounds one answer, well under the client's pending
	// limit for a subscription (64 MiB), above which messages would be
	// dropped; the server stops after the message that crosses it.
	directMaxBytes = 8 << 20
	// directWait bounds the wait for each message of an answer.
	directWait = fetchWait

	hdrStatus     = "Status"
	hdrNumPending = "Nats-Num-Pending"
	hdrSequence   = "Nats-Sequence"
	hdrLastSeq    = "Nats-Last-Sequence"
	statusEOB     = "204"
	// statusNoResponders answers a request that nobody serves (SendNode).
	statusNoResponders = "503"
)

type directGetRequest struct {
	Seq      uint64 `json:"seq"`
	NextFor  string `json:"next_by_subj"`
	Batch    int    `json:"batch"`
	MaxBytes int    `json:"max_bytes"`
}

// readDirect calls fn with each message on subject from stream position
// from up to upTo, oldest first. done says it reached upTo; otherwise
// next is the first position not delivered, where the caller continues
// with a consumer. err is fn's error or ctx's.
func (n *Node) readDirect(ctx context.Context, stream, subject string, from, upTo uint64, fn func(subjectMsg) error) (next uint64, done bool, err error) {
	next = from
	batch, requests := n.st.directBatch, n.st.directRequests
	for r := 0; requests == 0 || r < requests; r++ {
		more, err := n.getBatch(ctx, stream, subject, &next, upTo, batch, fn)
		if err != nil || next > upTo {
			return next, err == nil, err
		}
		if !more {
			return next, false, nil
		}
	}
	return next, false, nil
}

// getBatch makes one request from *next and delivers its answer,
// advancing *next. more says the answer was complete and the subject has
// messages after it: another request may go on.
func (n *Node) getBatch(ctx context.Context, stream, subject string, next *uint64, upTo uint64, batch int, fn func(subjectMsg) error) (more bool, err error) {
	req := directGetRequest{Seq: *next, NextFor: subject, Batch: batch, MaxBytes: directMaxBytes}
	end, pending, err := n.directAnswer(ctx, stream, req, func(pos uint64, m *nats.Msg) (bool, error) {
		if pos > upTo {
			// Nothing left up to upTo: removed meanwhile (age, purge), as
			// a consumer would find.
			*next = upTo + 1
			return false, nil
		}
		if err := fn(subjectMsg{pos: pos, hdr: m.Header, data: m.Data}); err != nil {
			return false, err
		}
		*next = pos + 1
		return pos != upTo, nil
	})
	if err != nil && ctx.Err() == nil {
		return false, err // fn's
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	return end && pending > 0, nil
}

// directAnswer sends one batched direct get and hands each message of its
// answer, in stream order, to each, which says whether to go on (an
// error from it ends the answer and is returned). end says the answer's
// end arrived (EOB), with pending the messages the subject has after it;
// without it the answer stopped short: no answer in directWait, nothing
// at or after the request's position (404), a server without batched
// gets (one message, not the batch), a message of the answer lost or out
// of order, or each stopped it. Both readers of a subject's messages and
// of a bucket's records read answers here, with the same checks.
func (n *Node) directAnswer(ctx context.Context, stream string, r directGetRequest, each func(pos uint64, m *nats.Msg) (bool, error)) (end bool, pending uint64, err error) {
	req, _ := json.Marshal(r)
	replies, inbox, _, err := n.replies(&n.direct)
	if err != nil {
		return false, 0, nil
	}
	// The batch and the end of the answer.
	ch, token := replies.wait(r.Batch + 1)
	defer replies.drop(token)
	if err := n.nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox+token, req); err != nil {
		return false, 0, nil
	}
	var prev uint64 // the answer's previous message; each one names it
	t := time.NewTimer(directWait)
	defer t.Stop()
	for {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-ctx.Done():
			return false, 0, ctx.Err()
		case <-t.C:
			return false, 0, nil
		case <-n.ncClosed:
			return false, 0, nil
		}
		t.Reset(directWait)
		if status := m.Header.Get(hdrStatus); status != "" {
			if status != statusEOB {
				return false, 0, nil
			}
			pending, err := strconv.ParseUint(m.Header.Get(hdrNumPending), 10, 64)
			return err == nil, pending, nil
		}
		if m.Header.Get(hdrNumPending) == "" {
			return false, 0, nil
		}
		pos, err := strconv.ParseUint(m.Header.Get(hdrSequence), 10, 64)
		if err != nil || pos < r.Seq || (prev != 0 && pos <= prev) || m.Header.Get(hdrLastSeq) != strconv.FormatUint(prev, 10) {
			return false, 0, nil
		}
		prev = pos
		if goOn, err := each(pos, m); err != nil || !goOn {
			return false, 0, err
		}
	}
}
