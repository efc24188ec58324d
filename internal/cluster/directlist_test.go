package cluster

import (
	"fmt"
	"maps"
	"slices"
	"testing"
)

// The node records read with direct gets (what a node falls back to
// while the node bucket elects a leader) are the ones the key listing
// reads: every key's latest value, across several batches, without the
// keys deleted since.
func TestDirectRecordsReadTheNodeList(t *testing.T) {
	a, b, ctx := pair(t)
	ma, err := a.Announce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ma.Stop()
	mb, err := b.Announce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := mb.Advertise(ctx, "127.0.0.1:3142"); err != nil {
		t.Fatal(err)
	}
	kv, err := a.nodeBucket(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// More keys than one batch holds, some written twice and some
	// deleted.
	for i := range directBatch + 40 {
		if _, err := kv.Put(ctx, fmt.Sprintf("x%03d", i), []byte("v1")); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < directBatch+40; i += 7 {
		if _, err := kv.Put(ctx, fmt.Sprintf("x%03d", i), []byte("v2")); err != nil {
			t.Fatal(err)
		}
	}
	for i := 3; i < directBatch+40; i += 11 {
		if err := kv.Delete(ctx, fmt.Sprintf("x%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := mb.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	// Node a's record stays as it is from here: renewed every TTL/3, it
	// could change between the listing below and the direct read, and
	// the two would differ in a's expiry (seen on a loaded machine).
	ma.Stop()
	want := map[string]string{}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		want[k] = string(e.Value())
	}
	got, ok := a.directRecords(ctx, "KV_"+NodeBucket, "$KV."+NodeBucket+".")
	if !ok {
		t.Fatal("the direct read of the node bucket was not complete")
	}
	gotS := map[string]string{}
	for k, v := range got {
		gotS[k] = string(v)
	}
	if !maps.Equal(gotS, want) {
		t.Errorf("direct read: %d keys %v\nlisting: %d keys %v", len(gotS), slices.Sorted(maps.Keys(gotS)), len(want), slices.Sorted(maps.Keys(want)))
	}
	if _, ok := gotS["b"]; ok {
		t.Error("the direct read has node b, which was removed")
	}
	if !json0(gotS["a"]) {
		t.Errorf("node a's record: %q", gotS["a"])
	}
	// A bucket with nothing in it: not an answer to trust.
	if _, ok := a.directRecords(ctx, "KV_"+NodeBucket, "$KV.none."); ok {
		t.Error("an empty direct read was taken as complete")
	}
}

func json0(s string) bool { return len(s) > 0 && s[0] == '{' }
