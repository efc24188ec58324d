package cluster

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// directRecords reads the latest value of every key of a KV bucket with
// History 1 (the stream keeps one message a key, so reading all of it
// reads the latest of each) with batched direct gets: any replica
// answers them, a stream without a leader too. stream is the bucket's
// stream, prefix its keys' subject prefix ("$KV.<bucket>."). ok is false
// when the answer cannot be trusted to be complete (a server that does
// not batch direct gets, a message of the answer missing, no answer, an
// empty answer: a node reading the node list has announced itself, so
// "no records" means a replica that lags), and the caller reads another
// way.
func (n *Node) directRecords(ctx context.Context, stream, prefix string) (map[string][]byte, bool) {
	recs := map[string][]byte{}
	next := uint64(1)
	for {
		more, ok := n.directRecordsBatch(ctx, stream, prefix, &next, recs)
		if !ok {
			return nil, false
		}
		if !more {
			return recs, len(recs) > 0
		}
	}
}

// directRecordsBatch asks for one batch from *next and puts its records
// in recs (a delete or purge marker removes the key), advancing *next.
// more says the stream has messages after the batch; ok false that the
// answer was not what was asked for.
func (n *Node) directRecordsBatch(ctx context.Context, stream, prefix string, next *uint64, recs map[string][]byte) (more, ok bool) {
	req, _ := json.Marshal(directGetRequest{Seq: *next, NextFor: prefix + ">", Batch: directBatch, MaxBytes: directMaxBytes})
	replies, inbox, _, err := n.replies(&n.direct)
	if err != nil {
		return false, false
	}
	ch, token := replies.wait(directBatch + 1)
	defer replies.drop(token)
	if err := n.nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox+token, req); err != nil {
		return false, false
	}
	var prev uint64 // the answer's previous message; each one names it
	t := time.NewTimer(directWait)
	defer t.Stop()
	for {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-ctx.Done():
			return false, false
		case <-t.C:
			return false, false
		case <-n.ncClosed:
			return false, false
		}
		t.Reset(directWait)
		if status := m.Header.Get(hdrStatus); status != "" {
			if status != statusEOB {
				return false, false // 404: nothing at or after *next here
			}
			pending, err := strconv.ParseUint(m.Header.Get(hdrNumPending), 10, 64)
			return pending > 0, err == nil
		}
		if m.Header.Get(hdrNumPending) == "" {
			return false, false // a server without batched gets: one message, not the batch
		}
		pos, err := strconv.ParseUint(m.Header.Get(hdrSequence), 10, 64)
		if err != nil || pos < *next || m.Header.Get(hdrLastSeq) != strconv.FormatUint(prev, 10) {
			return false, false // not the answer expected, or a message of it lost
		}
		prev, *next = pos, pos+1
		key, found := strings.CutPrefix(m.Header.Get(jetstream.SubjectHeader), prefix)
		if !found {
			return false, false
		}
		switch m.Header.Get(kvOperationHeader) {
		case "DEL", "PURGE":
			delete(recs, key)
		default:
			recs[key] = m.Data
		}
	}
}

// kvOperationHeader marks a KV delete ("DEL") or purge ("PURGE").
const kvOperationHeader = "KV-Operation"
