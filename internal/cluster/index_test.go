package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/transcript"
)

func TestSessionIndex(t *testing.T) {
	a, b, ctx := pair(t)
	t0 := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

	if _, found, err := a.GetSession(ctx, "s1"); err != nil || found {
		t.Fatalf("GetSession before any Put: found %v, %v", found, err)
	}
	if list, err := a.ListSessions(ctx); err != nil || len(list) != 0 {
		t.Fatalf("ListSessions of an empty index: %v, %v", list, err)
	}
	recs := []SessionRecord{
		{ID: "s2", File: "--work--/2026_s2.jsonl", Cwd: "/work", Owner: "alice", Created: t0.Add(time.Second), Name: "second"},
		{ID: "s1", File: "/abs/s1.jsonl", Cwd: "/work", Created: t0, LastSeq: 42, Sandbox: "read-only"},
		{ID: "s3", Created: t0.Add(time.Second)},
	}
	for _, r := range recs {
		rev, err := a.PutSession(ctx, r)
		if err != nil || rev == 0 {
			t.Fatalf("PutSession(%s): rev %d, %v", r.ID, rev, err)
		}
	}
	got, found, err := b.GetSession(ctx, "s2")
	if err != nil || !found {
		t.Fatalf("GetSession on another node: found %v, %v", found, err)
	}
	got.Revision = 0
	if got != recs[0] {
		t.Fatalf("GetSession: %+v, want %+v", got, recs[0])
	}
	list, err := b.ListSessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range list {
		ids = append(ids, r.ID)
	}
	if strings.Join(ids, ",") != "s1,s2,s3" || list[0].LastSeq != 42 || list[0].Sandbox != "read-only" {
		t.Fatalf("ListSessions: %+v, want s1,s2,s3 oldest first with their fields", list)
	}

	// Two nodes update one record at once; neither change is lost.
	done := make(chan error, 2)
	for _, n := range []*Node{a, b} {
		go func() {
			var err error
			for i := 0; i < 5 && err == nil; i++ {
				_, err = n.UpdateSession(ctx, "s1", func(r *SessionRecord) error { r.LastSeq++; return nil })
			}
			done <- err
		}()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if got, _, _ := a.GetSession(ctx, "s1"); got.LastSeq != 52 || got.File != "/abs/s1.jsonl" {
		t.Fatalf("after concurrent updates: %+v, want seq 52 and the file kept", got)
	}
	wantErr := errors.New("no")
	if _, err := a.UpdateSession(ctx, "s1", func(*SessionRecord) error { return wantErr }); !errors.Is(err, wantErr) {
		t.Fatalf("UpdateSession whose fn fails: %v", err)
	}
	if r, err := a.UpdateSession(ctx, "s9", func(r *SessionRecord) error { r.Name = "new"; return nil }); err != nil || r.ID != "s9" || r.Revision == 0 {
		t.Fatalf("UpdateSession creating a record: %+v, %v", r, err)
	}

	if err := a.DeleteSession(ctx, "s2"); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteSession(ctx, "s2"); err != nil {
		t.Fatalf("deleting a deleted record: %v", err)
	}
	if _, found, err := b.GetSession(ctx, "s2"); err != nil || found {
		t.Fatalf("GetSession after DeleteSession: found %v, %v", found, err)
	}
	if list, _ := b.ListSessions(ctx); len(list) != 3 {
		t.Fatalf("ListSessions after a delete: %d records, want 3", len(list))
	}
}

func TestSessionIndexBadInput(t *testing.T) {
	a := nodes(t, "a")[0]
	ctx := ctxT(t)
	for _, id := range []string{"", "a.b", "a*", ">", "../etc", "has space", strings.Repeat("x", 201)} {
		if _, err := a.PutSession(ctx, SessionRecord{ID: id}); err == nil || !strings.Contains(err.Error(), "session id") {
			t.Errorf("PutSession(%q): %v, want an error naming the session id", id, err)
		}
		if _, _, err := a.GetSession(ctx, id); err == nil {
			t.Errorf("GetSession(%q) succeeded", id)
		}
		if err := a.DeleteSession(ctx, id); err == nil {
			t.Errorf("DeleteSession(%q) succeeded", id)
		}
		if err := a.PurgeSession(ctx, id); err == nil {
			t.Errorf("PurgeSession(%q) succeeded", id)
		}
	}
	// A record some other writer garbled is reported, and left out of lists.
	if _, err := a.st.index.Put(ctx, "junk", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.GetSession(ctx, "junk"); err == nil || !strings.Contains(err.Error(), "junk") {
		t.Fatalf("GetSession of a garbled record: %v", err)
	}
	if list, err := a.ListSessions(ctx); err != nil || len(list) != 0 {
		t.Fatalf("ListSessions with a garbled record: %+v, %v", list, err)
	}
}

// TestPurgeSession removes a session's whole state, and only once nobody
// owns it.
func TestPurgeSession(t *testing.T) {
	a, b, ctx := pair(t)
	la := acquire(ctx, t, a, "s1")
	path := filepath.Join(t.TempDir(), "s1.jsonl")
	f, err := transcript.CreateAt(path, "/p", transcript.WithMirror(la.TranscriptMirror()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.AppendMessage(userMsg("hi")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := a.Publish(ctx, "s1", 1, []byte("ev")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PutSession(ctx, SessionRecord{ID: "s1", File: path}); err != nil {
		t.Fatal(err)
	}
	var held *HeldError
	if err := b.PurgeSession(ctx, "s1"); !errors.As(err, &held) || held.Owner != "a" {
		t.Fatalf("PurgeSession of an owned session: %v, want HeldError", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.PurgeSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "s1.jsonl")
	if found, err := b.RestoreTranscript(ctx, "s1", out); err != nil || found {
		t.Fatalf("RestoreTranscript after a purge: found %v, %v", found, err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a purged transcript was restored")
	}
	if _, found, _ := b.GetSession(ctx, "s1"); found {
		t.Fatal("the index record survived the purge")
	}
	if seq, err := b.LastSeq(ctx, "s1"); err != nil || seq != 0 {
		t.Fatalf("LastSeq after a purge: %d, %v", seq, err)
	}
}

// A stale owner cannot overwrite the index record a later owner wrote.
func TestIndexRecordFencedByLease(t *testing.T) {
	a, b, ctx := pair(t)
	la := acquire(ctx, t, a, "s1")
	if _, err := la.UpdateSession(ctx, func(r *SessionRecord) error { r.File = "a.jsonl"; return nil }); err != nil {
		t.Fatal(err)
	}
	lb := takeover(ctx, t, a, b, "s1")
	if _, err := lb.UpdateSession(ctx, func(r *SessionRecord) error { r.File = "b.jsonl"; return nil }); err != nil {
		t.Fatalf("the new owner's update: %v", err)
	}
	var stale *StaleError
	if _, err := la.UpdateSession(ctx, func(r *SessionRecord) error { r.Deleted = true; return nil }); !errors.As(err, &stale) || stale.CurrentEpoch != lb.Epoch() {
		t.Fatalf("the stale owner's update: %v, want a StaleError naming epoch %d", err, lb.Epoch())
	}
	rec, _, err := b.GetSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.File != "b.jsonl" || rec.Deleted || rec.Epoch != lb.Epoch() {
		t.Fatalf("record after the stale write: %+v", rec)
	}
}
