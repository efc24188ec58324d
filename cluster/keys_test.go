package cluster

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// Every node gets the same key, and a node joining later (as after a
// restart of the whole cluster's nodes) gets it again.
func TestFingerprintKeyShared(t *testing.T) {
	a, b, ctx := pair(t)
	ka, kb := a.FingerprintKey(), b.FingerprintKey()
	if len(ka) != FingerprintKeyBytes || !bytes.Equal(ka, kb) {
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
	if _, err := Join(jctx, Config{NodeID: "c", URL: a.nc.ConnectedUrl(), LeaseTTL: testTTL}); !errors.Is(err, errDamagedKey) {
		t.Fatalf("join with a damaged key: %v", err)
	}
	if e, err := kv.Get(ctx, fingerprintKeyName); err != nil || string(e.Value()) != "short" {
		t.Fatalf("the damaged key was replaced: %v", err)
	}
}
