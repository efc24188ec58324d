package pipeline

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/agentd-dev/agentd/internal/fault"
)

// A journal written before its fingerprints were keyed (by a version
// without Options.FingerprintKey, or a cluster node before the cluster
// had its key) still answers replays once they are: a client repeating a
// command across the restart of an upgrade gets the recorded outcome,
// not a conflict, and a different request under its id or key is still
// one.
func TestUnkeyedJournalReplaysUnderKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	byID := Command{Type: "list_sessions", ID: "c1", Payload: json.RawMessage(`{"a":1}`)}
	byKey := Command{Type: "health_check", IdempotencyKey: "k1", Payload: json.RawMessage(`{"b":2}`)}

	j, err := OpenFileJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, j, nil) // no key: fingerprints as before keys existed
	first := h.p.Do(byID)
	h.p.Do(byKey)
	h.p.Close()
	j.Close()

	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i + 1)
	}
	j, err = OpenFileJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	h = newHarness(t, j, func(o *Options) { o.FingerprintKey = key })
	tests := []struct {
		name     string
		cmd      Command
		replayed bool
	}{
		{"same command by id", byID, true},
		{"same request by key", byKey, true},
		{"other payload by id", Command{Type: "list_sessions", ID: "c1", Payload: json.RawMessage(`{"a":2}`)}, false},
		{"other payload by key", Command{Type: "health_check", IdempotencyKey: "k1", Payload: json.RawMessage(`{"b":3}`)}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := h.p.Do(tc.cmd)
			if tc.replayed {
				if !r.Success || !r.Replayed {
					t.Fatalf("not replayed: %+v (%s)", r, errMsg(r))
				}
				if tc.cmd.ID != "" && string(r.Data) != string(first.Data) {
					t.Fatalf("replayed %s, want %s", r.Data, first.Data)
				}
				return
			}
			if r.Err == nil || r.Err.Code != fault.Conflict {
				t.Fatalf("a different request was not refused: %+v", r)
			}
		})
	}
	if n := h.count("list_sessions") + h.count("health_check"); n != 0 {
		t.Fatalf("%d commands ran again", n)
	}
}
