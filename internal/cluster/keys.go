package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentd-dev/agentd/internal/pipeline"
)

// KeyBucket is the KV bucket of secrets every node of a cluster shares.
const KeyBucket = "AGENTD_KEYS"

// fingerprintKeyName is the key, in KeyBucket, of the command journal's
// fingerprint key.
const fingerprintKeyName = "journal-fingerprint"

// clusterKeyName is the key, in KeyBucket, of the public part of the
// cluster key (Key.PublicKey): nodes with another key refuse to join, as
// they could neither send commands to the cluster's nodes nor take theirs.
const clusterKeyName = "cluster-key"

// FingerprintKey is the key of the command journal's request
// fingerprints (pipeline.Fingerprint), the same on every node: the node
// that takes a session over must fingerprint a repeated request as the
// node that journaled it did. The first node to join makes it; the
// others, and every later start, read it (in Join).
func (n *Node) FingerprintKey() []byte { return n.fpKey }

// errDamagedKey marks a key that is there but unusable: joining again
// will not mend it, so Join stops retrying.
var errDamagedKey = errors.New("damaged")

// errWrongKey marks a node whose cluster key is not the cluster's.
var errWrongKey = errors.New("not the cluster's key")

// checkClusterKey records this node's public cluster key if no node has
// yet, or checks that it is the one recorded.
func (n *Node) checkClusterKey(ctx context.Context, kv jetstream.KeyValue) error {
	pub := []byte(n.cfg.Key.PublicKey())
	if _, err := kv.Create(ctx, clusterKeyName, pub); err == nil {
		return nil
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("cluster: recording the cluster key: %w", err)
	}
	e, err := kv.Get(ctx, clusterKeyName)
	if err != nil {
		return fmt.Errorf("cluster: reading the cluster key: %w", err)
	}
	if string(e.Value()) != string(pub) {
		return fmt.Errorf("cluster: this node's cluster key (public key %s) is %w (%s): give every node the same key file, the one of the node that started the cluster, with --cluster-key",
			pub, errWrongKey, e.Value())
	}
	return nil
}

func (n *Node) fingerprintKey(ctx context.Context) ([]byte, error) {
	kv, err := n.keyValue(ctx, jetstream.KeyValueConfig{
		Bucket: KeyBucket, Description: "agentd cluster-wide keys", History: 1,
	})
	if err != nil {
		return nil, err
	}
	if err := n.checkClusterKey(ctx, kv); err != nil {
		return nil, err
	}
	key := make([]byte, pipeline.FingerprintKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("cluster: making the journal's fingerprint key: %w", err)
	}
	if _, err := kv.Create(ctx, fingerprintKeyName, key); err == nil {
		return key, nil
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return nil, fmt.Errorf("cluster: storing the journal's fingerprint key: %w", err)
	}
	e, err := kv.Get(ctx, fingerprintKeyName)
	if err != nil {
		return nil, fmt.Errorf("cluster: reading the journal's fingerprint key: %w", err)
	}
	if len(e.Value()) != pipeline.FingerprintKeyBytes {
		// Replacing it would make every journaled request look like
		// another one; an operator decides.
		return nil, fmt.Errorf("cluster: the journal's fingerprint key in bucket %s is %w (%d bytes, want %d); delete key %s there to make a new one, which makes idempotency keys of earlier requests unusable",
			KeyBucket, errDamagedKey, len(e.Value()), pipeline.FingerprintKeyBytes, fingerprintKeyName)
	}
	return e.Value(), nil
}

// keyValue opens the KV bucket of cfg, making it (file storage, the
// cluster's replicas) if no node has yet.
//
// The lookup is a stream info request, which only the stream's leader
// answers: one sent while the stream elects a leader (a server of the
// cluster was killed, or the node starts again while the one that led
// it is gone) is dropped, not refused. Each try has a deadline of its
// own, so the lookup goes on once a leader exists instead of waiting out
// ctx (a restarted node's start hung 10 s in it, 1 run in 8 of
// TestClusterEmbeddedHAKillANode under load).
func (n *Node) keyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	lookup := func(ctx context.Context) (jetstream.KeyValue, error) { return n.js.KeyValue(ctx, cfg.Bucket) }
	kv, err := readWhileLeaderless(ctx, lookup)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		cfg.Storage, cfg.Replicas = jetstream.FileStorage, n.cfg.Replicas
		kv, err = n.js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = readWhileLeaderless(ctx, lookup)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}
