package cluster

import (
	"bytes"
	"strings"
	"testing"
)

// Every node gets the same key, and a node joining later (as after a
// restart of the whole cluster's nodes) gets it again.
func TestFingerprintKeyShared(t *testing.T) {
	a, b, ctx := pair(t)
	ka, err := a.FingerprintKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := b.FingerprintKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ka) != FingerprintKeyBytes || !bytes.Equal(ka, kb) {
		t.Fatalf("keys differ or are short: %x, %x", ka, kb)
	}
	if again, err := a.FingerprintKey(ctx); err != nil || !bytes.Equal(again, ka) {
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
	if _, err := b.FingerprintKey(ctx); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("damaged key: %v", err)
	}
	if e, err := kv.Get(ctx, fingerprintKeyName); err != nil || string(e.Value()) != "short" {
		t.Fatalf("the damaged key was replaced: %v", err)
	}
}
