package piserver

import (
	"testing"

	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/piwire"
)

func ptr[T any](v T) *T { return &v }

// The data of get_startup_recovery, startup_recovery_summary and
// get_command_history, byte for byte: pi-server's field names, key order
// and omitted fields (pinned from what agentd sent when the pipeline's
// types carried these names themselves).
func TestHistoryWire(t *testing.T) {
	full := pipeline.StartupRecovery{
		Enabled: true, Initialized: true, InitState: "ready", InitializationError: "disk <full> & gone",
		JournalPath: "/var/lib/agentd/journal.jsonl", SchemaVersion: 1, EntriesScanned: 9, MalformedEntries: 1,
		UnsupportedVersionEntries: 2, RecoveredOutcomes: 3, RecoveredOutcomeIDs: []string{"a", "b"},
		RecoveredOutcomeIDsTruncated: true, RecoveredInFlightFailures: 1,
		RecoveredInFlight: []pipeline.RecoveredCommand{{CommandID: "a", CommandType: "prompt", LaneKey: "session:s1",
			LastPhase: "command_accepted", Reason: "Command interrupted by server restart"}},
		RecoveredInFlightTruncated: true, MaxItemsReturned: 100,
	}
	entry := pipeline.HistoryEntry{RecordedAt: 1764583200123, Phase: "command_finished", CommandID: "c1", CommandType: "set_session_name",
		LaneKey: "session:s1", LaneSequence: 7, Fingerprint: "ab12", ExplicitID: true, SessionID: "s1", DependsOn: []string{"c0"},
		IfSessionVersion: ptr(2), IdempotencyKey: "k1", Success: ptr(false), Error: "Session s1 not found", SessionVersion: ptr(3),
		Replayed: true, TimedOut: true, Recovered: true, RecoveryReason: "restart_inflight_marked_failed"}
	for _, tt := range []struct {
		name string
		data any
		want string
	}{
		{"recovery", recoveryData(full), `{"enabled":true,"initialized":true,"initState":"ready","initializationError":"disk <full> & gone","journalPath":"/var/lib/agentd/journal.jsonl","schemaVersion":1,"entriesScanned":9,"malformedEntries":1,"unsupportedVersionEntries":2,"recoveredOutcomes":3,"recoveredOutcomeIds":["a","b"],"recoveredOutcomeIdsTruncated":true,"recoveredInFlightFailures":1,"recoveredInFlight":[{"commandId":"a","commandType":"prompt","laneKey":"session:s1","lastPhase":"command_accepted","reason":"Command interrupted by server restart"}],"recoveredInFlightTruncated":true,"maxItemsReturned":100}`},
		{"recovery summary", recoveryData(full.Redacted()), `{"enabled":true,"initialized":true,"initState":"ready","initializationError":"Initialization failed (details redacted; call get_startup_recovery for full diagnostics)","journalPath":"[redacted]","schemaVersion":1,"entriesScanned":9,"malformedEntries":1,"unsupportedVersionEntries":2,"recoveredOutcomes":3,"recoveredOutcomeIds":[],"recoveredOutcomeIdsTruncated":true,"recoveredInFlightFailures":1,"recoveredInFlight":[],"recoveredInFlightTruncated":true,"maxItemsReturned":100}`},
		{"recovery empty", recoveryData(pipeline.StartupRecovery{Initialized: true, InitState: "disabled", SchemaVersion: 1,
			RecoveredOutcomeIDs: []string{}, RecoveredInFlight: []pipeline.RecoveredCommand{}, MaxItemsReturned: 100}), `{"enabled":false,"initialized":true,"initState":"disabled","journalPath":"","schemaVersion":1,"entriesScanned":0,"malformedEntries":0,"unsupportedVersionEntries":0,"recoveredOutcomes":0,"recoveredOutcomeIds":[],"recoveredOutcomeIdsTruncated":false,"recoveredInFlightFailures":0,"recoveredInFlight":[],"recoveredInFlightTruncated":false,"maxItemsReturned":100}`},
		{"recovery zero", recoveryData(pipeline.StartupRecovery{}), `{"enabled":false,"initialized":false,"initState":"","journalPath":"","schemaVersion":0,"entriesScanned":0,"malformedEntries":0,"unsupportedVersionEntries":0,"recoveredOutcomes":0,"recoveredOutcomeIds":null,"recoveredOutcomeIdsTruncated":false,"recoveredInFlightFailures":0,"recoveredInFlight":null,"recoveredInFlightTruncated":false,"maxItemsReturned":0}`},
		{"history", historyData(pipeline.CommandHistory{Enabled: true, Initialized: true, InitState: "ready", InitializationError: "x",
			JournalPath: "/j", SchemaVersion: 1,
			Filters:  pipeline.HistoryFilters{SessionIDFilter: "s1", CommandID: "c1", FromTimestamp: ptr(int64(5)), ToTimestamp: ptr(int64(0))},
			Entries:  []pipeline.HistoryEntry{entry, {RecordedAt: 1, Phase: "command_accepted", CommandID: "anon:1:2", CommandType: "get_state", LaneKey: "server"}},
			Returned: 2, Truncated: true, MaxItemsReturned: 100, MaxItemsAllowed: 500}), `{"enabled":true,"initialized":true,"initState":"ready","initializationError":"x","journalPath":"/j","schemaVersion":1,"filters":{"sessionIdFilter":"s1","commandId":"c1","fromTimestamp":5,"toTimestamp":0},"entries":[{"recordedAt":1764583200123,"phase":"command_finished","commandId":"c1","commandType":"set_session_name","laneKey":"session:s1","laneSequence":7,"fingerprint":"ab12","explicitId":true,"sessionId":"s1","dependsOn":["c0"],"ifSessionVersion":2,"idempotencyKey":"k1","success":false,"error":"Session s1 not found","sessionVersion":3,"replayed":true,"timedOut":true,"recovered":true,"recoveryReason":"restart_inflight_marked_failed"},{"recordedAt":1,"phase":"command_accepted","commandId":"anon:1:2","commandType":"get_state","laneKey":"server","laneSequence":0,"fingerprint":"","explicitId":false}],"returned":2,"truncated":true,"maxItemsReturned":100,"maxItemsAllowed":500}`},
		{"history empty", historyData(pipeline.CommandHistory{InitState: "disabled", SchemaVersion: 1, Entries: []pipeline.HistoryEntry{},
			MaxItemsReturned: 100, MaxItemsAllowed: 500}), `{"enabled":false,"initialized":false,"initState":"disabled","journalPath":"","schemaVersion":1,"filters":{},"entries":[],"returned":0,"truncated":false,"maxItemsReturned":100,"maxItemsAllowed":500}`},
		{"history zero", historyData(pipeline.CommandHistory{}), `{"enabled":false,"initialized":false,"initState":"","journalPath":"","schemaVersion":0,"filters":{},"entries":null,"returned":0,"truncated":false,"maxItemsReturned":0,"maxItemsAllowed":0}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(piwire.Marshal(tt.data)); got != tt.want {
				t.Errorf("data =\n %s\nwant\n %s", got, tt.want)
			}
		})
	}
	if got, want := string(piwire.Marshal(frame{"startup_recovery_summary", recoveryData(full.Redacted())})),
		`{"type":"startup_recovery_summary","data":`+string(piwire.Marshal(recoveryData(full.Redacted())))+`}`; got != want {
		t.Errorf("summary frame %s, want %s", got, want)
	}
}
