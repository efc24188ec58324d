package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/pipeline"
)

// TestReadPaths reads one session's transcript, journal and events
// through each way a read can go: batched direct gets alone (in one
// request, or in several small ones), direct gets handing over to a
// consumer part way, and a consumer alone (a server without batched
// gets). Each must return the same, and the fast path must not have
// quietly fallen back.
func TestReadPaths(t *testing.T) {
	a, b, ctx := pair(t)
	la := acquire(ctx, t, a, "s1")
	acquire(ctx, t, a, "other")
	part := a.st.part
	mirror := func(b []byte) error {
		a.st.part = 48 // so a line goes in several parts
		defer func() { a.st.part = part }()
		return la.TranscriptMirror()(b)
	}
	want := `{"type":"session","version":3,"id":"s1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}` + "\n"
	if err := mirror([]byte(want)); err != nil {
		t.Fatal(err)
	}
	j := a.Journal()
	for i := range 12 {
		// Lines of 1 to 3 parts, and each write a message apart from the
		// others' (a journal record, events between them).
		line := `{"id":"e` + strconv.Itoa(i) + `"` + strings.Repeat(" ", i%3*40) + "}\n"
		if err := mirror([]byte(line)); err != nil {
			t.Fatal(err)
		}
		want += line
		r := pipeline.Record{Op: pipeline.OpFinish, Command: "set_name", ID: "c" + strconv.Itoa(i), Scope: "session:s1",
			At: time.Now(), Expires: time.Now().Add(time.Hour), Response: &pipeline.Response{ID: "c" + strconv.Itoa(i), Success: true}}
		if err := j.Append(r); err != nil {
			t.Fatal(err)
		}
		// Another session's events interleave in the stream.
		for _, id := range []string{"s1", "other"} {
			if _, err := a.Publish(ctx, id, uint64(i+1), []byte("e"+strconv.Itoa(i+1))); err != nil {
				t.Fatal(err)
			}
		}
	}

	tests := []struct {
		name            string
		batch, requests int
		consumer        bool // a read goes on with a consumer
	}{
		{"direct gets", directBatch, 0, false},
		{"small batches", 3, 0, false},
		{"handover to a consumer", 3, 2, true},
		{"consumer only", directBatch, -1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b.st.directBatch, b.st.directRequests = tc.batch, tc.requests
			before := b.consumerReads.Load()
			path := filepath.Join(t.TempDir(), "s1.jsonl")
			if found, err := b.RestoreTranscript(ctx, "s1", path); err != nil || !found {
				t.Fatalf("RestoreTranscript: found %v, %v", found, err)
			}
			if got, _ := os.ReadFile(path); string(got) != want {
				t.Errorf("restored:\n%s\nwant:\n%s", got, want)
			}
			recs, err := b.JournalFor(ctx, "s1")
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, r := range recs {
				ids = append(ids, r.ID)
			}
			slices.Sort(ids)
			if got, want := fmt.Sprint(ids), "[c0 c1 c10 c11 c2 c3 c4 c5 c6 c7 c8 c9]"; got != want {
				t.Errorf("journal: %s, want %s", got, want)
			}
			for _, after := range []uint64{0, 5, 11, 12} {
				evs, err := b.Replay(ctx, "s1", after)
				if err != nil {
					t.Fatal(err)
				}
				var wantEvs []string
				for s := after + 1; s <= 12; s++ {
					wantEvs = append(wantEvs, fmt.Sprintf("%d e%d %d", s, s, la.Epoch()))
				}
				if got := eventKeys(evs); fmt.Sprint(got) != fmt.Sprint(wantEvs) {
					t.Errorf("Replay after %d: %v, want %v", after, got, wantEvs)
				}
			}
			if used := b.consumerReads.Load() > before; used != tc.consumer {
				t.Errorf("a read went on with a consumer: %v, want %v", used, tc.consumer)
			}
		})
	}
}
