package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
)

// crashedJournal leaves a journal as a crash would: "done" finished,
// "running" admitted and never finished; it returns its path.
func crashedJournal(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.jsonl")
	j, err := OpenFileJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, j, nil)
	h.p.Do(Command{Type: "list_sessions", ID: "done"})
	h.p.Do(Command{Type: "health_check", IdempotencyKey: "key"})
	h.p.Submit(Command{Type: "server_block", ID: "running"}, nil)
	<-h.started
	image, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	close(h.release)
	h.p.Close()
	j.Close()
	crashed := filepath.Join(dir, "crashed.jsonl")
	if err := os.WriteFile(crashed, append(image, `{"op":"fin`...), 0o600); err != nil {
		t.Fatal(err)
	}
	return crashed
}

// get_startup_recovery reports what the journal gave back: the outcomes
// by id, and the commands in flight at the crash, which a later restart
// no longer counts as in flight.
func TestStartupRecovery(t *testing.T) {
	path := crashedJournal(t)
	for restart, want := range []StartupRecovery{
		{
			Enabled: true, Initialized: true, InitState: "ready", JournalPath: path, SchemaVersion: 1,
			EntriesScanned: 6, MalformedEntries: 1, RecoveredOutcomes: 2, RecoveredOutcomeIDs: []string{"done", "running"},
			RecoveredInFlightFailures: 1, MaxItemsReturned: 100,
			RecoveredInFlight: []RecoveredCommand{{CommandID: "running", CommandType: "server_block", LaneKey: "server",
				LastPhase: "command_accepted", Reason: "Command interrupted by server restart"}},
		},
		{
			Enabled: true, Initialized: true, InitState: "ready", JournalPath: path, SchemaVersion: 1,
			EntriesScanned: 3, RecoveredOutcomes: 2, RecoveredOutcomeIDs: []string{"done", "running"},
			RecoveredInFlight: []RecoveredCommand{}, MaxItemsReturned: 100,
		},
	} {
		j, err := OpenFileJournal(path)
		if err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, j, nil)
		got := h.p.StartupRecovery()
		if g, w := fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want); g != w {
			t.Fatalf("restart %d:\n got %s\nwant %s", restart, g, w)
		}
		h.p.Close()
		j.Close()
	}
}

// The startup_recovery_summary event is the same data without the path
// and ids; its JSON has what pi-server's integration suite asserts.
func TestStartupRecoveryRedacted(t *testing.T) {
	path := crashedJournal(t)
	j, err := OpenFileJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	h := newHarness(t, j, nil)
	full, ev := h.p.StartupRecovery(), h.p.StartupRecovery().Redacted()
	if full.JournalPath != path || len(full.RecoveredOutcomeIDs) != 2 || full.MaxItemsReturned != 100 {
		t.Fatalf("get_startup_recovery data %+v", full)
	}
	want := StartupRecovery{
		Enabled: true, Initialized: true, InitState: "ready", JournalPath: "[redacted]", SchemaVersion: 1,
		EntriesScanned: full.EntriesScanned, MalformedEntries: full.MalformedEntries,
		RecoveredOutcomeIDs: []string{}, RecoveredInFlight: []RecoveredCommand{}, RecoveredOutcomes: 2,
		RecoveredOutcomeIDsTruncated: true, RecoveredInFlightTruncated: true, RecoveredInFlightFailures: 1, MaxItemsReturned: 100,
	}
	if !reflect.DeepEqual(ev, want) {
		t.Errorf("summary %+v, want %+v", ev, want)
	}

	// Without a durable journal there is nothing to recover.
	mem := newHarness(t, nil, nil).p.StartupRecovery()
	if mem.Enabled || mem.InitState != "disabled" || mem.JournalPath != "" || mem.RecoveredOutcomeIDs == nil {
		t.Fatalf("%+v", mem)
	}
}

// Only the first 100 ids are listed, as pi-server does.
func TestStartupRecoveryTruncated(t *testing.T) {
	j := NewMemJournal()
	exp := time.Now().Add(time.Hour)
	for i := range 150 {
		j.Append(Record{Op: OpBegin, Command: "list_sessions", ID: fmt.Sprint(i), Scope: "server", Expires: exp})
	}
	h := newHarness(t, j, nil)
	r := h.p.StartupRecovery()
	if r.RecoveredOutcomes != 150 || len(r.RecoveredOutcomeIDs) != 100 || !r.RecoveredOutcomeIDsTruncated ||
		r.RecoveredInFlightFailures != 150 || len(r.RecoveredInFlight) != 100 || !r.RecoveredInFlightTruncated {
		t.Fatalf("%d outcomes, %d listed (%v); %d in flight, %d listed (%v)", r.RecoveredOutcomes, len(r.RecoveredOutcomeIDs),
			r.RecoveredOutcomeIDsTruncated, r.RecoveredInFlightFailures, len(r.RecoveredInFlight), r.RecoveredInFlightTruncated)
	}
}

func entryKeys(es []HistoryEntry) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, e.CommandID+"/"+e.Phase)
	}
	return out
}

// get_command_history lists lifecycle entries newest first, filtered and
// limited as pi-server's does.
//
// It runs in a synctest bubble: the millisecond stamps come from the
// bubble's clock, so the 2ms that separate them are exact and cost no
// real time (t.Run cannot be called in a bubble: each case names itself).
func TestCommandHistory(t *testing.T) { synctest.Test(t, testCommandHistory) }

func testCommandHistory(t *testing.T) {
	h := newHarness(t, nil, nil)
	h.p.Do(Command{Type: "create_session", SessionID: "s", ID: "c"})
	h.p.Do(Command{Type: "get_messages", SessionID: "s", ID: "m"})
	h.p.Do(Command{Type: "get_messages", SessionID: "s", ID: "m"}) // replay
	h.p.Do(Command{Type: "fail", ID: "f"})
	time.Sleep(2 * time.Millisecond) // entries are stamped in milliseconds
	from := time.Now().UnixMilli()
	time.Sleep(2 * time.Millisecond)
	h.p.Do(Command{Type: "list_sessions", ID: "l"})
	future := time.Now().Add(time.Hour).UnixMilli()
	i64 := func(v int64) *int64 { return &v }
	all := []string{
		"l/command_finished", "l/command_started", "l/command_accepted",
		"f/command_finished", "f/command_started", "f/command_accepted",
		"m/command_finished", "m/command_accepted",
		"m/command_finished", "m/command_started", "m/command_accepted",
		"c/command_finished", "c/command_started", "c/command_accepted",
	}
	for _, tc := range []struct {
		name      string
		q         HistoryQuery
		want      []string
		truncated bool
		limit     int
	}{
		{"all", HistoryQuery{}, all, false, 100},
		{"limit", HistoryQuery{Limit: 5}, all[:5], true, 5},
		{"limit exact", HistoryQuery{Limit: len(all)}, all, false, len(all)},
		{"session", HistoryQuery{SessionID: "s"}, all[6:], false, 100},
		{"command", HistoryQuery{CommandID: "m", Limit: 2}, all[6:8], true, 2},
		{"from", HistoryQuery{FromTimestamp: &from}, all[:3], false, 100},
		{"to", HistoryQuery{ToTimestamp: i64(from - 1)}, all[3:], false, 100},
		{"future", HistoryQuery{FromTimestamp: &future}, []string{}, false, 100},
		{"over the maximum", HistoryQuery{Limit: 9999}, all, false, 500},
	} {
		got := h.p.CommandHistory(tc.q)
		if k := entryKeys(got.Entries); !slices.Equal(k, tc.want) {
			t.Errorf("%s: entries %v\nwant %v", tc.name, k, tc.want)
			continue
		}
		if got.Returned != len(tc.want) || got.Truncated != tc.truncated || got.MaxItemsReturned != tc.limit || got.MaxItemsAllowed != 500 {
			t.Errorf("%s: returned %d truncated %v maxItemsReturned %d maxItemsAllowed %d", tc.name, got.Returned, got.Truncated, got.MaxItemsReturned, got.MaxItemsAllowed)
		}
	}
	es := h.p.CommandHistory(HistoryQuery{}).Entries
	f, replay := es[3], es[6]
	if *f.Success || f.Error != "boom" || f.LaneKey != "server" || !f.ExplicitID || f.Fingerprint == "" {
		t.Fatalf("failure entry %+v", f)
	}
	if !replay.Replayed || !*replay.Success || replay.SessionID != "s" || replay.LaneKey != "session:s" || *replay.SessionVersion != 0 {
		t.Fatalf("replay entry %+v", replay)
	}
	if es[0].LaneSequence <= es[1].LaneSequence || es[2].Success != nil {
		t.Fatalf("sequence or phase fields: %+v %+v", es[0], es[2])
	}
	// The data's wire names are piserver's (TestHistoryWire there).
}

// After a restart the history starts with the recovered outcomes, the
// interrupted ones marked; it never holds more than its bound.
func TestCommandHistoryAfterRestart(t *testing.T) {
	path := crashedJournal(t)
	j, err := OpenFileJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	h := newHarness(t, j, func(o *Options) { o.HistoryEntries = 5 })
	got := h.p.CommandHistory(HistoryQuery{})
	if k := entryKeys(got.Entries); !slices.Equal(k, []string{"running/command_finished", "done/command_finished"}) || got.JournalPath != path {
		t.Fatalf("%v at %s", k, got.JournalPath)
	}
	run, done := got.Entries[0], got.Entries[1]
	if !run.Recovered || run.RecoveryReason != RecoveryReason || *run.Success || run.Error != msgInterrupted || done.Recovered || !*done.Success {
		t.Fatalf("%+v\n%+v", run, done)
	}
	for i := range 3 {
		h.p.Do(Command{Type: "list_sessions", ID: fmt.Sprint("n", i)})
	}
	got = h.p.CommandHistory(HistoryQuery{})
	if k := entryKeys(got.Entries); !slices.Equal(k, []string{"n2/command_finished", "n2/command_started", "n2/command_accepted", "n1/command_finished", "n1/command_started"}) {
		t.Fatalf("bounded history %v", k)
	}
}

func TestHistoryQueryValidate(t *testing.T) {
	neg, one, two := int64(-1), int64(1), int64(2)
	long := string(make([]byte, 257))
	for _, tc := range []struct {
		q    HistoryQuery
		want string
	}{
		{HistoryQuery{}, ""},
		{HistoryQuery{Limit: 500, FromTimestamp: &one, ToTimestamp: &two}, ""},
		{HistoryQuery{Limit: 501}, "Validation failed: limit: Must be between 1 and 500"},
		{HistoryQuery{Limit: -1}, "Validation failed: limit: Must be between 1 and 500"},
		{HistoryQuery{FromTimestamp: &neg}, "Validation failed: fromTimestamp: Must be a non-negative integer timestamp"},
		{HistoryQuery{FromTimestamp: &two, ToTimestamp: &one}, "Validation failed: fromTimestamp: Must be less than or equal to toTimestamp"},
		{HistoryQuery{CommandID: long, ToTimestamp: &neg}, "Validation failed: commandId: Too long (max 256 chars); toTimestamp: Must be a non-negative integer timestamp"},
	} {
		err := tc.q.Validate()
		if got := errMsg(Response{Err: err}); got != tc.want || (err != nil && err.Code != fault.Invalid) {
			t.Errorf("%+v: %q, want %q", tc.q, got, tc.want)
		}
	}
}

// TestHistoryRing: the ring grows as entries come, never past its size,
// and then keeps the newest, newest first.
func TestHistoryRing(t *testing.T) {
	for _, tt := range []struct{ max, adds int }{{5, 0}, {5, 3}, {5, 5}, {5, 12}, {40, 39}, {40, 100}} {
		h := newHistory(tt.max)
		for i := range tt.adds {
			h.add(HistoryEntry{CommandID: strconv.Itoa(i)})
		}
		got, _ := h.query(HistoryQuery{}, tt.max+1)
		if want := min(tt.adds, tt.max); len(got) != want {
			t.Fatalf("max %d, %d added: %d entries, want %d", tt.max, tt.adds, len(got), want)
		}
		for i, e := range got {
			if want := strconv.Itoa(tt.adds - 1 - i); e.CommandID != want {
				t.Errorf("max %d, %d added: entry %d is %s, want %s", tt.max, tt.adds, i, e.CommandID, want)
			}
		}
		if cap(h.ring) > tt.max {
			t.Errorf("max %d: capacity %d", tt.max, cap(h.ring))
		}
	}
}
