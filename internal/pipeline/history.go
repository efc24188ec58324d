package pipeline

import (
	"strings"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
)

// The introspection pi-server offers beyond protocol 1.0.0:
// get_startup_recovery, get_command_history and the
// startup_recovery_summary event. The types hold what pi-server's
// answers say (src/types.ts StartupRecoveryData and the
// get_command_history response); the wire names are piserver's (its
// wire_history.go), not the pipeline's.

// JournalSchemaVersion is the version of agentd's journal records, as
// StartupRecovery and CommandHistory report it.
const JournalSchemaVersion = 1

// Limits of the introspection answers (pi-server's).
const (
	RecoveryMaxItems    = 100 // ids and in-flight commands listed by StartupRecovery
	HistoryDefaultLimit = 100
	HistoryMaxLimit     = 500
)

// Journal states (pi-server's initState). agentd opens its journal before
// it serves, so a running pipeline is either ready or disabled.
const (
	InitDisabled = "disabled"
	InitReady    = "ready"
)

// RecoveryReason is the recoveryReason of history entries for commands
// found in flight when the journal was opened (pi-server's wording).
const RecoveryReason = "restart_inflight_marked_failed"

// redacted replaces what the startup_recovery_summary broadcast must not
// reveal (pi-server's placeholder).
const redacted = "[redacted]"

// JournalInfo describes a journal to StartupRecovery and CommandHistory.
// A Journal may offer it with an Info() JournalInfo method.
type JournalInfo struct {
	Path    string // the file; "" for a journal that is not one
	Durable bool   // outcomes survive a restart
	// When the journal was opened: non-empty lines read, and lines that
	// were not records (torn by a crash).
	EntriesScanned   int
	MalformedEntries int
	Bytes            int64 // the file's size now
	Records          int   // live records now
	Compactions      int   // rewrites since it was opened, at open included
}

// RecoveredCommand is a command that was in flight when agentd stopped; it
// was marked failed (fault.Interrupted) when the journal was opened.
type RecoveredCommand struct {
	CommandID   string
	CommandType string
	LaneKey     string
	// LastPhase is the last phase the journal holds: agentd journals a
	// command when it is admitted and when it finishes, so this is always
	// command_accepted even if the command had started.
	LastPhase string
	Reason    string
}

// StartupRecovery is the data of get_startup_recovery and of the
// startup_recovery_summary event (use Redacted for the event).
type StartupRecovery struct {
	Enabled                      bool
	Initialized                  bool
	InitState                    string
	InitializationError          string
	JournalPath                  string
	SchemaVersion                int
	EntriesScanned               int
	MalformedEntries             int
	UnsupportedVersionEntries    int
	RecoveredOutcomes            int
	RecoveredOutcomeIDs          []string
	RecoveredOutcomeIDsTruncated bool
	RecoveredInFlightFailures    int
	RecoveredInFlight            []RecoveredCommand
	RecoveredInFlightTruncated   bool
	MaxItemsReturned             int
}

// StartupRecovery reports what the journal held when the pipeline was
// built: the outcomes by id it recovered, and the commands that were in
// flight when the previous process stopped.
func (p *Pipeline) StartupRecovery() StartupRecovery {
	r := p.recovery
	r.RecoveredOutcomeIDs = append([]string{}, r.RecoveredOutcomeIDs...)
	r.RecoveredInFlight = append([]RecoveredCommand{}, r.RecoveredInFlight...)
	return r
}

// Redacted is r as pi-server broadcasts it to every client after
// server_ready: no path, no ids (a client asks get_startup_recovery for
// those); the truncated flags say whether something was left out.
func (r StartupRecovery) Redacted() StartupRecovery {
	r.JournalPath = redacted
	if r.InitializationError != "" {
		r.InitializationError = "Initialization failed (details redacted; call get_startup_recovery for full diagnostics)"
	}
	r.RecoveredOutcomeIDsTruncated = r.RecoveredOutcomeIDsTruncated || r.RecoveredOutcomes > 0
	r.RecoveredInFlightTruncated = r.RecoveredInFlightTruncated || r.RecoveredInFlightFailures > 0
	r.RecoveredOutcomeIDs = []string{}
	r.RecoveredInFlight = []RecoveredCommand{}
	return r
}

// startupRecovery builds the StartupRecovery of the records New loaded.
func (p *Pipeline) startupRecovery(recs []Record, now time.Time) StartupRecovery {
	ji := p.jinfo()
	r := StartupRecovery{
		Enabled: ji.Durable, Initialized: true, InitState: InitDisabled, JournalPath: ji.Path,
		SchemaVersion: JournalSchemaVersion, EntriesScanned: ji.EntriesScanned, MalformedEntries: ji.MalformedEntries,
		RecoveredOutcomeIDs: []string{}, RecoveredInFlight: []RecoveredCommand{}, MaxItemsReturned: RecoveryMaxItems,
	}
	if ji.Durable {
		r.InitState = InitReady
	}
	for _, rec := range recs {
		// Like pi-server, only commands with a client's id count: a
		// command known by its idempotency key alone has no name a
		// client could look for.
		if rec.Response == nil || rec.ID == "" || !rec.Expires.After(now) {
			continue
		}
		p.hist.seed(rec)
		r.RecoveredOutcomes++
		if len(r.RecoveredOutcomeIDs) < RecoveryMaxItems {
			r.RecoveredOutcomeIDs = append(r.RecoveredOutcomeIDs, rec.ID)
		} else {
			r.RecoveredOutcomeIDsTruncated = true
		}
		if !rec.Interrupted {
			continue
		}
		r.RecoveredInFlightFailures++
		if len(r.RecoveredInFlight) < RecoveryMaxItems {
			r.RecoveredInFlight = append(r.RecoveredInFlight, RecoveredCommand{
				CommandID: rec.ID, CommandType: rec.Command, LaneKey: rec.Scope,
				LastPhase: string(CommandAccepted), Reason: msgInterrupted,
			})
		} else {
			r.RecoveredInFlightTruncated = true
		}
	}
	return r
}

// HistoryQuery selects entries of the command history; its fields are
// get_command_history's.
type HistoryQuery struct {
	SessionID     string
	CommandID     string
	FromTimestamp *int64 // ms since the epoch, inclusive
	ToTimestamp   *int64 // ms since the epoch, inclusive
	// Limit is how many entries to return, newest first: 1 to
	// HistoryMaxLimit, 0 for HistoryDefaultLimit.
	Limit int
}

// Validate checks q as pi-server does, with its messages.
func (q HistoryQuery) Validate() *fault.Error {
	var problems []string
	bad := func(field, msg string) { problems = append(problems, field+": "+msg) }
	if q.CommandID != "" && len(q.CommandID) > 256 {
		bad("commandId", "Too long (max 256 chars)")
	}
	if q.FromTimestamp != nil && *q.FromTimestamp < 0 {
		bad("fromTimestamp", "Must be a non-negative integer timestamp")
	}
	if q.ToTimestamp != nil && *q.ToTimestamp < 0 {
		bad("toTimestamp", "Must be a non-negative integer timestamp")
	}
	if q.FromTimestamp != nil && q.ToTimestamp != nil && *q.FromTimestamp > *q.ToTimestamp {
		bad("fromTimestamp", "Must be less than or equal to toTimestamp")
	}
	if q.Limit < 0 || q.Limit > HistoryMaxLimit {
		bad("limit", "Must be between 1 and 500")
	}
	if len(problems) == 0 {
		return nil
	}
	return fault.Errorf(fault.Invalid, "Validation failed: %s", strings.Join(problems, "; "))
}

// HistoryEntry is one lifecycle phase of one command.
type HistoryEntry struct {
	RecordedAt  int64 // ms since the epoch
	Phase       string
	CommandID   string
	CommandType string
	LaneKey     string
	// LaneSequence orders the entries: it grows with every entry, so it
	// also grows within a lane (pi-server counts per lane; agentd counts
	// once for all lanes).
	LaneSequence     int64
	Fingerprint      string
	ExplicitID       bool
	SessionID        string
	DependsOn        []string
	IfSessionVersion *int
	IdempotencyKey   string
	Success          *bool
	Error            string
	SessionVersion   *int
	Replayed         bool
	TimedOut         bool
	Recovered        bool
	RecoveryReason   string
}

// HistoryFilters echoes the query's filters.
type HistoryFilters struct {
	SessionIDFilter string
	CommandID       string
	FromTimestamp   *int64
	ToTimestamp     *int64
}

// CommandHistory is the data of get_command_history.
type CommandHistory struct {
	Enabled             bool
	Initialized         bool
	InitState           string
	InitializationError string
	JournalPath         string
	SchemaVersion       int
	Filters             HistoryFilters
	Entries             []HistoryEntry
	Returned            int
	Truncated           bool
	MaxItemsReturned    int
	MaxItemsAllowed     int
}

// CommandHistory returns the newest lifecycle entries that match q, newest
// first: every phase of every admitted command (anonymous ones included)
// since the pipeline was built, preceded by one command_finished entry per
// outcome recovered from the journal. The history is bounded
// (Options.HistoryEntries); Truncated says more entries matched than were
// returned. An invalid q is clamped (Validate reports it).
func (p *Pipeline) CommandHistory(q HistoryQuery) CommandHistory {
	limit := q.Limit
	if limit <= 0 {
		limit = HistoryDefaultLimit
	}
	limit = min(limit, HistoryMaxLimit)
	entries, truncated := p.hist.query(q, limit)
	r := p.recovery
	return CommandHistory{
		Enabled: r.Enabled, Initialized: r.Initialized, InitState: r.InitState,
		JournalPath: p.jinfo().Path, SchemaVersion: JournalSchemaVersion,
		Filters: HistoryFilters{SessionIDFilter: q.SessionID, CommandID: q.CommandID,
			FromTimestamp: q.FromTimestamp, ToTimestamp: q.ToTimestamp},
		Entries: entries, Returned: len(entries), Truncated: truncated,
		MaxItemsReturned: limit, MaxItemsAllowed: HistoryMaxLimit,
	}
}

// history is a ring of the latest lifecycle entries. It grows to max
// entries as they come instead of being made whole at start: a server
// that has handled few commands holds few entries, not the whole ring.
type history struct {
	// mu is a leaf: Pipeline.mu may be held when it is taken (Adopt);
	// nothing is taken under it.
	mu   sync.Mutex
	ring []HistoryEntry // len(ring) == next until it is full, then max
	max  int
	next int  // where the next entry goes
	full bool // the ring has wrapped
	seq  int64
}

func newHistory(n int) *history { return &history{max: n} }

func (h *history) add(e HistoryEntry) {
	h.mu.Lock()
	h.seq++
	e.LaneSequence = h.seq
	if len(h.ring) < h.max {
		if len(h.ring) == cap(h.ring) {
			// Grow by doubling, but never past max.
			grown := make([]HistoryEntry, len(h.ring), min(h.max, max(16, 2*cap(h.ring))))
			copy(grown, h.ring)
			h.ring = grown
		}
		h.ring = append(h.ring, e)
	} else {
		h.ring[h.next] = e
	}
	h.next++
	if h.next == h.max {
		h.next, h.full = 0, true
	}
	h.mu.Unlock()
}

// record adds the entry of a lifecycle event.
func (h *history) record(ev Event, fp string, explicit bool) {
	e := HistoryEntry{
		RecordedAt: time.Now().UnixMilli(), Phase: string(ev.Type), CommandID: ev.CommandID,
		CommandType: ev.Command, LaneKey: ev.Lane, Fingerprint: fp, ExplicitID: explicit,
		SessionID: ev.SessionID, IfSessionVersion: ev.IfSessionVersion, IdempotencyKey: ev.IdempotencyKey,
	}
	if len(ev.DependsOn) > 0 {
		e.DependsOn = ev.DependsOn
	}
	if ev.Type == CommandFinished {
		ok := ev.Success
		e.Success, e.SessionVersion, e.Replayed, e.TimedOut = &ok, ev.SessionVersion, ev.Replayed, ev.TimedOut
		if ev.Err != nil {
			e.Error = ev.Err.Message
		}
	}
	h.add(e)
}

// seed adds the entry of an outcome loaded from the journal.
func (h *history) seed(r Record) {
	ok := r.Response.Success
	e := HistoryEntry{
		RecordedAt: r.At.UnixMilli(), Phase: string(CommandFinished), CommandID: r.ID, CommandType: r.Command,
		LaneKey: r.Scope, Fingerprint: r.Fingerprint, ExplicitID: true, SessionID: strings.TrimPrefix(r.Scope, "session:"),
		IdempotencyKey: r.Key, Success: &ok, SessionVersion: r.Response.SessionVersion, TimedOut: r.Response.TimedOut,
		Recovered: r.Recovered,
	}
	if e.SessionID == r.Scope {
		e.SessionID = "" // the server scope
	}
	if r.Response.Err != nil {
		e.Error = r.Response.Err.Message
	}
	if r.Recovered {
		e.RecoveryReason = RecoveryReason
	}
	h.add(e)
}

func (h *history) query(q HistoryQuery, limit int) ([]HistoryEntry, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.next
	if h.full {
		n = len(h.ring)
	}
	out := []HistoryEntry{}
	for i := range n {
		e := &h.ring[(h.next-1-i+len(h.ring))%len(h.ring)]
		switch {
		case q.SessionID != "" && e.SessionID != q.SessionID,
			q.CommandID != "" && e.CommandID != q.CommandID,
			q.FromTimestamp != nil && e.RecordedAt < *q.FromTimestamp,
			q.ToTimestamp != nil && e.RecordedAt > *q.ToTimestamp:
			continue
		}
		if len(out) == limit {
			return out, true
		}
		out = append(out, *e)
	}
	return out, false
}
