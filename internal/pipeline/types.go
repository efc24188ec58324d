// Package pipeline is the command pipeline every face drives: admission,
// lanes, replay by id, idempotency keys, dependsOn, session versions,
// per-class timeouts and durable outcomes (pi-server protocol 1.0.0,
// sections 4–13). It knows nothing of transports or of the engine: the
// caller registers a Handler per command type and receives lifecycle events
// and responses through callbacks.
//
// Callbacks (a command's respond, Options.Emit) always run on a goroutine
// the pipeline owns, never inside Submit: a face may call Submit while
// holding something its callback waits for.
//
// What is kept of an outcome is bounded: at most Options.MaxOutcomes
// outcomes, their data within Options.MaxOutcomeMemory, and no single
// outcome's data beyond Options.KeepReadBytes (read-only commands) or
// Options.KeepDataBytes (the others). A replay of a read-only command whose
// data was dropped runs the read again and answers with what it returns
// now, marked replayed; a replay of any other command whose data was
// dropped answers with the original outcome (success, error, version)
// without data, marked DataDropped. A command is never run twice because
// its answer was large.
package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
)

// Command is one client command: pi-server's envelope (protocol 1.0.0
// §4), which every face maps its own requests to. It carries no wire
// names: each face decodes its wire into a Command, a cluster its own
// message (server's cluster_wire.go), the journal its records (record.go).
type Command struct {
	Type             string
	ID               string
	SessionID        string
	DependsOn        []string
	IfSessionVersion *int
	IdempotencyKey   string
	Payload          json.RawMessage
	// Origin is the face's handle on the sender (its connection), handed
	// back on the command's lifecycle events. It is not part of the
	// fingerprint and is not journaled.
	Origin any
	// Sender groups the commands of one client (its connection) for the
	// delivery of immediate answers (rejections, conflicts, replays):
	// those of one Sender arrive in submission order on a goroutine of
	// their own, so a Sender whose callback is slow holds up only itself.
	// Commands without a Sender share one such goroutine. It must be
	// comparable (a pointer); it is not part of the fingerprint and is not
	// journaled.
	Sender any
	// Announced says the face has told its clients already that this
	// command was accepted and started (a cluster node does when it passes
	// a command on, and the command may come back to run here): its
	// CommandAccepted and CommandStarted events carry Announced, so the
	// face does not tell them twice. It is not part of the fingerprint
	// and is not journaled.
	Announced bool
	// Admit, when set, is asked once the pipeline knows the command will
	// run (it is no replay of a stored or running command, and no
	// conflict): an error refuses it then, answered with no lifecycle
	// events, as a rate limit does. Replays are answered without asking
	// (spec §8.1: a replay returns the prior outcome, and does not count).
	// It runs under the pipeline's lock: it must be quick and call nothing
	// of the pipeline. Not part of the fingerprint; not journaled.
	Admit func() *fault.Error
}

// Response is the outcome of one command. The face maps it to its wire
// (pi-server's {type:"response", command, success, id?, data?, error?,
// ...} is piserver's wireResponse).
type Response struct {
	ID             string
	Command        string
	Success        bool
	Data           json.RawMessage
	Err            *fault.Error
	SessionVersion *int
	Replayed       bool
	TimedOut       bool
	// DataDropped marks a replayed outcome whose data was too large to
	// keep (see the package doc): the command's outcome is as stated, its
	// data is gone.
	DataDropped bool
}

// Error strings. The pi-server spec gives verbatim strings for conflicts
// (via the issue) and for "Session <id> not found" (§22.1); the others are
// ours, chosen to contain the words clients of pi-server match on.
const (
	msgShuttingDown = "Server is shutting down"
	msgInterrupted  = "Command interrupted by server restart"
)

func errShuttingDown() *fault.Error { return fault.New(fault.ShuttingDown, msgShuttingDown) }

// errConflictID and errConflictKey say what the identity was used for
// (pi-server's wording, which says it even when only the payload differs):
// a client that reused an id learns which of its commands it clashed with.
func errConflictID(id, was, now string) *fault.Error {
	return fault.Errorf(fault.Conflict, "Conflicting id '%s': previously used for '%s', now used for '%s'", id, was, now)
}
func errConflictKey(k, was, now string) *fault.Error {
	return fault.Errorf(fault.Conflict, "Conflicting idempotencyKey '%s': previously used for '%s', now used for '%s'", k, was, now)
}
func errSessionNotFound(s string) *fault.Error {
	return fault.Errorf(fault.NotFound, "Session %s not found", s)
}

// EventType names a global lifecycle event.
type EventType string

// Lifecycle events (spec §6.2, §7.2).
const (
	CommandAccepted EventType = "command_accepted"
	CommandStarted  EventType = "command_started"
	CommandFinished EventType = "command_finished"
)

// Event is a global lifecycle event for an admitted command. The outcome
// fields are set on CommandFinished only.
type Event struct {
	Type EventType
	// CommandID is the command's id, or "anon:<start>:<n>" for a command
	// sent without one (the same for all three events of the command).
	CommandID        string
	Command          string
	SessionID        string
	DependsOn        []string
	IfSessionVersion *int
	IdempotencyKey   string
	Lane             string
	// Origin is the Origin of the command the event is about.
	Origin any
	// Announced is the command's Announced, on its CommandAccepted and
	// CommandStarted: the face's clients were told already.
	Announced      bool
	Success        bool
	Err            *fault.Error
	Replayed       bool
	TimedOut       bool
	SessionVersion *int
}

// Class groups commands for timeouts and scheduling.
type Class string

// Command classes. Control commands are never queued behind their lane:
// abort, abort_bash, abort_retry, abort_compaction, get_state,
// extension_ui_response must not wait for a running prompt.
const (
	ClassControl Class = "control"
	ClassRead    Class = "read"
	ClassMutate  Class = "mutate"
	ClassLong    Class = "long"
)

// LaneKind says which lane serializes a command.
type LaneKind int

// Lane kinds (spec §7.3).
const (
	LaneServer  LaneKind = iota // lane "server"; idempotency scope "server"
	LaneSession                 // lane "session:<sessionId>"; sessionId required
)

// Handler executes one command type.
type Handler struct {
	Class Class
	Lane  LaneKind
	// Mutating commands bump the session's version by one when they
	// succeed on a session that existed when they started.
	Mutating bool
	// ReadOnly commands change nothing, so running one again is safe: when
	// the data of its outcome was too large to keep, a replay runs it
	// again instead. Mutating and ReadOnly exclude each other.
	ReadOnly bool
	// Timeout overrides the class timeout; negative means none.
	Timeout time.Duration
	// Bypass, when set, decides per command whether it skips its lane
	// as control commands do (a prompt that only queues a message into a
	// running agent must not wait behind that agent's run).
	Bypass func(cmd Command) bool
	Run    func(ctx context.Context, cmd Command) (json.RawMessage, error)
	// Keep, when set, is what of an outcome is kept to answer replays,
	// in memory and in the journal; the command's sender gets the
	// outcome as Run made it. A face drops there what only that answer
	// may carry (a server's stderr quoting a secret). It may be given an
	// outcome it already made, read back from the journal.
	Keep func(Response) Response
}

// RunAgain is a Keep for a ReadOnly command whose answer must not be
// stored, in memory or in the journal (it may quote what a tool source
// printed, a secret among it): the data is dropped as if too large, so a
// replay runs the read again and answers as it is now.
func RunAgain(r Response) Response {
	if r.Success && len(r.Data) > 0 {
		r.Data, r.DataDropped = nil, true
	}
	return r
}

// ErrTimeout is the cause of a handler's context when its command timed
// out (context.Cause), so a handler can tell a timeout from a shutdown.
var ErrTimeout = errors.New("command timed out")

// Registry maps command types to handlers.
type Registry map[string]Handler

// Default limits.
const (
	DefaultIdempotencyTTL    = 10 * time.Minute
	DefaultOutcomeRetention  = 24 * time.Hour
	DefaultDependencyTimeout = 30 * time.Second
	// DefaultMaxOutcomes is pi-server's bound on outcomes kept by id.
	DefaultMaxOutcomes = 2000
	// DefaultMaxOutcomeMemory bounds the data of all kept outcomes; past
	// it the oldest outcomes lose their data (not their identity).
	DefaultMaxOutcomeMemory = 32 << 20
	// DefaultKeepReadBytes: a read's data above this is not kept; a replay
	// reads again. Small reads replay exactly.
	DefaultKeepReadBytes = 64 << 10
	// DefaultKeepDataBytes: other commands' data above this is not kept.
	// The engine's answers to mutating commands stay well below it (bash
	// output and summaries are truncated before they get here), so in
	// practice it only stops a pathological handler from filling the
	// journal.
	DefaultKeepDataBytes = 1 << 20
	// DefaultHistoryEntries bounds the lifecycle history CommandHistory
	// reads (about a thousand commands, three entries each).
	DefaultHistoryEntries = 3000
)

// DefaultClassTimeouts are used for classes missing from Options.ClassTimeouts.
// Zero means no timeout.
var DefaultClassTimeouts = map[Class]time.Duration{
	ClassControl: 10 * time.Second,
	ClassRead:    30 * time.Second,
	ClassMutate:  60 * time.Second,
	ClassLong:    0,
}

// Options configure a Pipeline. Emit and OnJournalError are called without
// the pipeline's lock held but must not block for long. Zero values mean
// the defaults.
type Options struct {
	Registry Registry
	// Journal stores outcomes durably; nil means an in-memory journal.
	// A journal that reports JournalInfo (FileJournal does) is named in
	// StartupRecovery and CommandHistory.
	Journal           Journal
	Emit              func(Event)
	IdempotencyTTL    time.Duration
	OutcomeRetention  time.Duration // how long outcomes by id are kept
	DependencyTimeout time.Duration
	ClassTimeouts     map[Class]time.Duration
	// OnJournalError learns of a failed durable write of an outcome (the
	// response is still delivered and replayable until restart).
	OnJournalError func(error)
	// Log records a handler's error that is not a fault.Error (its text
	// is for the operator; the client is answered "Internal error").
	// Nil discards.
	Log *slog.Logger

	MaxOutcomes      int // outcomes kept in memory (by id and by key)
	MaxOutcomeMemory int // bytes of outcome data kept in memory
	KeepReadBytes    int // largest data of a ReadOnly command's outcome kept
	KeepDataBytes    int // largest data of any other command's outcome kept
	HistoryEntries   int // lifecycle entries kept for CommandHistory

	// FingerprintKey keys the fingerprints of requests (see Fingerprint)
	// that the journal keeps. It must be the same for every pipeline
	// that reads the journal's records, across restarts, or a repeated
	// request is taken for another one under the same key.
	FingerprintKey []byte
}
