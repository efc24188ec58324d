package pipeline

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
)

// updateJournal rewrites testdata/journal-v1*.jsonl with the code as it
// is. It was run once, with the code that wrote journals before the
// journal had record types of its own: the files are what an agentd of
// that version left on disk, and must stay readable.
var updateJournal = flag.Bool("update-journal", false, "rewrite testdata/journal-v1*.jsonl")

var (
	compatAt      = time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.UTC)
	compatExpires = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

func compatInt(n int) *int { return &n }

// compatRecords are the records of testdata/journal-v1.jsonl, in the
// order they were appended: every field of a record and of its response
// set somewhere, and left out somewhere else.
func compatRecords() []Record {
	fp := func(c Command) string { return Fingerprint(nil, c) }
	ok := Command{Type: "list_sessions", ID: "ok-1"}
	keyed := Command{Type: "prompt", SessionID: "s1", IdempotencyKey: "k1", Payload: json.RawMessage(`{"message":"hi"}`)}
	both := Command{Type: "set_session_name", ID: "both-1", SessionID: "s1", IdempotencyKey: "k2", DependsOn: []string{"ok-1"}, IfSessionVersion: compatInt(2)}
	inflight := Command{Type: "server_block", ID: "inflight-1"}
	dropped := Command{Type: "get_messages", ID: "dropped-1", SessionID: "s1"}
	old := Command{Type: "health_check", ID: "expired-1"}
	return []Record{
		{Op: OpBegin, Command: ok.Type, ID: ok.ID, Scope: "server", Fingerprint: fp(ok), At: compatAt, Expires: compatExpires},
		{Op: OpFinish, Command: ok.Type, ID: ok.ID, Scope: "server", Fingerprint: fp(ok), At: compatAt, Expires: compatExpires,
			Response: &Response{ID: ok.ID, Command: ok.Type, Success: true, Data: json.RawMessage(`{"ok":true,"html":"<a>&"}`)}},
		{Op: OpBegin, Command: keyed.Type, Scope: "session:s1", Key: "k1", Fingerprint: fp(keyed), At: compatAt, KeyExpires: compatExpires, Expires: compatExpires},
		{Op: OpFinish, Command: keyed.Type, Scope: "session:s1", Key: "k1", Fingerprint: fp(keyed), At: compatAt, KeyExpires: compatExpires, Expires: compatExpires,
			Response: &Response{Command: keyed.Type, Err: fault.New(fault.Invalid, "Validation failed: message: Too long"), TimedOut: true}},
		{Op: OpBegin, Command: both.Type, ID: both.ID, Scope: "session:s1", Key: "k2", Fingerprint: fp(both), At: compatAt, KeyExpires: compatExpires, Expires: compatExpires},
		{Op: OpFinish, Command: both.Type, ID: both.ID, Scope: "session:s1", Key: "k2", Fingerprint: fp(both), At: compatAt, KeyExpires: compatExpires, Expires: compatExpires,
			Response: &Response{ID: both.ID, Command: both.Type, Success: true, SessionVersion: compatInt(3), Replayed: true}},
		{Op: OpBegin, Command: inflight.Type, ID: inflight.ID, Scope: "server", Fingerprint: fp(inflight), At: compatAt, Expires: compatExpires},
		{Op: OpFinish, Command: dropped.Type, ID: dropped.ID, Scope: "session:s1", Fingerprint: fp(dropped), At: compatAt, Expires: compatExpires,
			Response: &Response{ID: dropped.ID, Command: dropped.Type, Success: true, DataDropped: true}},
		{Op: OpFinish, Command: "abort", ID: "recovered-1", Scope: "session:s1", Fingerprint: fp(Command{Type: "abort", ID: "recovered-1", SessionID: "s1"}),
			At: compatAt, Expires: compatExpires, Recovered: true,
			Response: &Response{ID: "recovered-1", Command: "abort", Err: fault.New(fault.Interrupted, msgInterrupted)}},
		{Op: OpFinish, Command: old.Type, ID: old.ID, Scope: "server", Fingerprint: fp(old), At: compatAt, Expires: compatAt.Add(-time.Hour),
			Response: &Response{ID: old.ID, Command: old.Type, Success: true}},
	}
}

// TestJournalReadsVersion1 reads a journal file written by an earlier
// agentd: the same outcomes come back (the one in flight failed, the
// expired one gone, the torn last line counted as malformed), a replay
// answers from them, and the file as rewritten at open is byte for byte
// what that version rewrote it to.
func TestJournalReadsVersion1(t *testing.T) {
	const written, rewritten = "testdata/journal-v1.jsonl", "testdata/journal-v1-compacted.jsonl"
	if *updateJournal {
		os.Remove(written)
		j, err := OpenFileJournal(written)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range compatRecords() {
			if err := j.Append(r); err != nil {
				t.Fatal(err)
			}
		}
		j.Close()
		f, err := os.OpenFile(written, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(`{"op":"finish","command":"pro`)
		f.Close()
	}
	image, err := os.ReadFile(written)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	if err := os.WriteFile(path, image, 0o600); err != nil {
		t.Fatal(err)
	}
	j, err := OpenFileJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if *updateJournal {
		if err := os.WriteFile(rewritten, after, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(rewritten)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after, want) {
		t.Errorf("the journal as rewritten at open:\n%s\nwant:\n%s", after, want)
	}

	recs := compatRecords()
	interrupted := recs[6]
	interrupted.Op, interrupted.Recovered, interrupted.Interrupted = OpFinish, true, true
	interrupted.Response = &Response{ID: interrupted.ID, Command: interrupted.Command, Err: &fault.Error{Code: fault.Interrupted, Message: msgInterrupted}}
	// The journal's encoder escapes HTML in the data (it is the same JSON).
	escaped := *recs[1].Response
	escaped.Data = json.RawMessage(`{"ok":true,"html":"\u003ca\u003e\u0026"}`)
	recs[1].Response = &escaped
	wantRecs := []Record{recs[1], recs[3], recs[5], interrupted, recs[7], recs[8]}
	got, err := j.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(wantRecs) {
		t.Fatalf("Load gave %d records, want %d: %+v", len(got), len(wantRecs), got)
	}
	for i := range got {
		g, w := got[i], wantRecs[i]
		if !g.At.Equal(w.At) || !g.Expires.Equal(w.Expires) || !g.KeyExpires.Equal(w.KeyExpires) {
			t.Errorf("record %d times %v %v %v, want %v %v %v", i, g.At, g.Expires, g.KeyExpires, w.At, w.Expires, w.KeyExpires)
		}
		g.At, g.Expires, g.KeyExpires, w.At, w.Expires, w.KeyExpires = time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("record %d:\n got %+v %+v\nwant %+v %+v", i, g, g.Response, w, w.Response)
		}
	}

	h := newHarness(t, j, nil)
	sr := h.p.StartupRecovery()
	if sr.EntriesScanned != 11 || sr.MalformedEntries != 1 || sr.RecoveredOutcomes != 5 || sr.RecoveredInFlightFailures != 1 ||
		!reflect.DeepEqual(sr.RecoveredOutcomeIDs, []string{"ok-1", "both-1", "inflight-1", "dropped-1", "recovered-1"}) {
		t.Errorf("startup recovery %+v", sr)
	}
	r := h.p.Do(Command{Type: "list_sessions", ID: "ok-1"})
	if !r.Replayed || !r.Success || string(r.Data) != string(escaped.Data) || h.count("list_sessions") != 0 {
		t.Errorf("replay of ok-1: %+v (ran %d times)", r, h.count("list_sessions"))
	}
	r = h.p.Do(Command{Type: "server_block", ID: "inflight-1"})
	if !r.Replayed || r.Err == nil || r.Err.Code != fault.Interrupted {
		t.Errorf("replay of inflight-1: %+v", r)
	}
}
