package piserver

import "github.com/agentd-dev/agentd/internal/pipeline"

// pi-server's wire form of the pipeline's introspection answers
// (src/types.ts StartupRecoveryData and the get_command_history
// response): its field names, key order and omitted fields. The pipeline
// holds the values; the names are pi-server's, so they live here.

type wireRecoveredCommand struct {
	CommandID   string `json:"commandId"`
	CommandType string `json:"commandType"`
	LaneKey     string `json:"laneKey"`
	LastPhase   string `json:"lastPhase"`
	Reason      string `json:"reason"`
}

type wireStartupRecovery struct {
	Enabled                      bool                   `json:"enabled"`
	Initialized                  bool                   `json:"initialized"`
	InitState                    string                 `json:"initState"`
	InitializationError          string                 `json:"initializationError,omitempty"`
	JournalPath                  string                 `json:"journalPath"`
	SchemaVersion                int                    `json:"schemaVersion"`
	EntriesScanned               int                    `json:"entriesScanned"`
	MalformedEntries             int                    `json:"malformedEntries"`
	UnsupportedVersionEntries    int                    `json:"unsupportedVersionEntries"`
	RecoveredOutcomes            int                    `json:"recoveredOutcomes"`
	RecoveredOutcomeIDs          []string               `json:"recoveredOutcomeIds"`
	RecoveredOutcomeIDsTruncated bool                   `json:"recoveredOutcomeIdsTruncated"`
	RecoveredInFlightFailures    int                    `json:"recoveredInFlightFailures"`
	RecoveredInFlight            []wireRecoveredCommand `json:"recoveredInFlight"`
	RecoveredInFlightTruncated   bool                   `json:"recoveredInFlightTruncated"`
	MaxItemsReturned             int                    `json:"maxItemsReturned"`
}

// recoveryData is the data of get_startup_recovery and of the
// startup_recovery_summary event.
func recoveryData(r pipeline.StartupRecovery) wireStartupRecovery {
	w := wireStartupRecovery{
		Enabled: r.Enabled, Initialized: r.Initialized, InitState: r.InitState, InitializationError: r.InitializationError,
		JournalPath: r.JournalPath, SchemaVersion: r.SchemaVersion, EntriesScanned: r.EntriesScanned,
		MalformedEntries: r.MalformedEntries, UnsupportedVersionEntries: r.UnsupportedVersionEntries,
		RecoveredOutcomes: r.RecoveredOutcomes, RecoveredOutcomeIDs: r.RecoveredOutcomeIDs,
		RecoveredOutcomeIDsTruncated: r.RecoveredOutcomeIDsTruncated, RecoveredInFlightFailures: r.RecoveredInFlightFailures,
		RecoveredInFlightTruncated: r.RecoveredInFlightTruncated, MaxItemsReturned: r.MaxItemsReturned,
	}
	if r.RecoveredInFlight != nil { // [] and null are not the same answer
		w.RecoveredInFlight = make([]wireRecoveredCommand, len(r.RecoveredInFlight))
		for i, c := range r.RecoveredInFlight {
			w.RecoveredInFlight[i] = wireRecoveredCommand(c)
		}
	}
	return w
}

type wireHistoryEntry struct {
	RecordedAt       int64    `json:"recordedAt"`
	Phase            string   `json:"phase"`
	CommandID        string   `json:"commandId"`
	CommandType      string   `json:"commandType"`
	LaneKey          string   `json:"laneKey"`
	LaneSequence     int64    `json:"laneSequence"`
	Fingerprint      string   `json:"fingerprint"`
	ExplicitID       bool     `json:"explicitId"`
	SessionID        string   `json:"sessionId,omitempty"`
	DependsOn        []string `json:"dependsOn,omitempty"`
	IfSessionVersion *int     `json:"ifSessionVersion,omitempty"`
	IdempotencyKey   string   `json:"idempotencyKey,omitempty"`
	Success          *bool    `json:"success,omitempty"`
	Error            string   `json:"error,omitempty"`
	SessionVersion   *int     `json:"sessionVersion,omitempty"`
	Replayed         bool     `json:"replayed,omitempty"`
	TimedOut         bool     `json:"timedOut,omitempty"`
	Recovered        bool     `json:"recovered,omitempty"`
	RecoveryReason   string   `json:"recoveryReason,omitempty"`
}

type wireHistoryFilters struct {
	SessionIDFilter string `json:"sessionIdFilter,omitempty"`
	CommandID       string `json:"commandId,omitempty"`
	FromTimestamp   *int64 `json:"fromTimestamp,omitempty"`
	ToTimestamp     *int64 `json:"toTimestamp,omitempty"`
}

type wireCommandHistory struct {
	Enabled             bool               `json:"enabled"`
	Initialized         bool               `json:"initialized"`
	InitState           string             `json:"initState"`
	InitializationError string             `json:"initializationError,omitempty"`
	JournalPath         string             `json:"journalPath"`
	SchemaVersion       int                `json:"schemaVersion"`
	Filters             wireHistoryFilters `json:"filters"`
	Entries             []wireHistoryEntry `json:"entries"`
	Returned            int                `json:"returned"`
	Truncated           bool               `json:"truncated"`
	MaxItemsReturned    int                `json:"maxItemsReturned"`
	MaxItemsAllowed     int                `json:"maxItemsAllowed"`
}

// historyData is the data of get_command_history.
func historyData(h pipeline.CommandHistory) wireCommandHistory {
	w := wireCommandHistory{
		Enabled: h.Enabled, Initialized: h.Initialized, InitState: h.InitState, InitializationError: h.InitializationError,
		JournalPath: h.JournalPath, SchemaVersion: h.SchemaVersion, Filters: wireHistoryFilters(h.Filters),
		Returned: h.Returned, Truncated: h.Truncated, MaxItemsReturned: h.MaxItemsReturned, MaxItemsAllowed: h.MaxItemsAllowed,
	}
	if h.Entries != nil {
		w.Entries = make([]wireHistoryEntry, len(h.Entries))
		for i, e := range h.Entries {
			w.Entries[i] = wireHistoryEntry(e)
		}
	}
	return w
}
