package cluster

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/cluster/embeddednats"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"go.uber.org/goleak"
)

// Every node gets the same key, and a node joining later (as after a
// restart of the whole cluster's nodes) gets it again.
func TestFingerprintKeyShared(t *testing.T) {
	a, b, ctx := pair(t)
	ka, kb := a.FingerprintKey(), b.FingerprintKey()
	if len(ka) != pipeline.FingerprintKeyBytes || !bytes.Equal(ka, kb) {
		t.Fatalf("keys differ or are short: %x, %x", ka, kb)
	}
	if again, err := a.fingerprintKey(ctx); err != nil || !bytes.Equal(again, ka) {
		t.Fatalf("again: %x, %v", again, err)
	}

	// A damaged key is an error naming the fix, never replaced.
	kv, err := a.js.KeyValue(ctx, KeyBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, fingerprintKeyName, []byte("short")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.fingerprintKey(ctx); !errors.Is(err, errDamagedKey) || !strings.Contains(err.Error(), "delete key "+fingerprintKeyName) {
		t.Fatalf("damaged key: %v", err)
	}
	// Joining stops at once on it, rather than retrying until its
	// context ends.
	jctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := Join(jctx, Config{Key: testKey, NodeID: "c", URL: a.nc.ConnectedUrl(), LeaseTTL: testTTL}); !errors.Is(err, errDamagedKey) {
		t.Fatalf("join with a damaged key: %v", err)
	}
	// (Retried, it would end with the context, its error still wrapping
	// the damage.)
	if err := jctx.Err(); err != nil {
		t.Fatalf("join with a damaged key retried until its context ended: %v", err)
	}
	if e, err := kv.Get(ctx, fingerprintKeyName); err != nil || string(e.Value()) != "short" {
		t.Fatalf("the damaged key was replaced: %v", err)
	}
}

// The key is kept with the cluster's state: after every node and the
// NATS server stopped, the nodes of the restarted cluster read the same
// key (else requests journaled before could not be recognised again).
func TestFingerprintKeySurvivesRestart(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	dir := t.TempDir()
	var keys [2][]byte
	for i := range keys {
		srv, err := embeddednats.Start(embeddednats.Config{StoreDir: dir, Nkey: testKey.PublicKey()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		n, err := Join(ctx, Config{Key: testKey, NodeID: "a", URL: srv.ClientURL(), LeaseTTL: testTTL})
		cancel()
		if err != nil {
			srv.Shutdown()
			t.Fatal(err)
		}
		keys[i] = n.FingerprintKey()
		n.Close()
		srv.Shutdown()
	}
	if len(keys[0]) != pipeline.FingerprintKeyBytes || !bytes.Equal(keys[0], keys[1]) {
		t.Fatalf("key before the restart %x, after %x", keys[0], keys[1])
	}
}
