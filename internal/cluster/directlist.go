package cluster

import (
	"context"
	"strings"

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
	req := directGetRequest{Seq: *next, NextFor: prefix + ">", Batch: directBatch, MaxBytes: directMaxBytes}
	end, pending, err := n.directAnswer(ctx, stream, req, func(pos uint64, m *nats.Msg) (bool, error) {
		key, found := strings.CutPrefix(m.Header.Get(jetstream.SubjectHeader), prefix)
		if !found {
			return false, nil
		}
		*next = pos + 1
		switch m.Header.Get(kvOperationHeader) {
		case "DEL", "PURGE":
			delete(recs, key)
		default:
			recs[key] = m.Data
		}
		return true, nil
	})
	if err != nil || !end {
		return false, false
	}
	return pending > 0, true
}

// kvOperationHeader marks a KV delete ("DEL") or purge ("PURGE").
const kvOperationHeader = "KV-Operation"
