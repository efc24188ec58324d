package session

import (
	"bytes"
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/todo"
	"github.com/agentd-dev/agentd/internal/tool"
)

// EventType names a session event. Agent events keep their pi names;
// the others are the session's own, named as pi names them where pi has
// them.
type EventType string

// Session event types beyond the agent's.
const (
	EventStateChanged         EventType = "state_changed"
	EventCompactionStart      EventType = "compaction_start"
	EventCompactionEnd        EventType = "compaction_end"
	EventAutoRetryStart       EventType = "auto_retry_start"
	EventAutoRetryEnd         EventType = "auto_retry_end"
	EventSessionInfoChanged   EventType = "session_info_changed"
	EventThinkingLevelChanged EventType = "thinking_level_changed"
	EventModelChanged         EventType = "model_changed"
	EventInteractionRequested EventType = "interaction_requested"
	EventInteractionResolved  EventType = "interaction_resolved"
	EventTodoUpdated          EventType = "todo_updated"
	EventSessionChanged       EventType = "session_changed" // new, switch, fork, clone: a different transcript
	// EventConversationEdited: EditMessage or TruncateAt changed the
	// conversation at Index (Truncated for TruncateAt); Messages() is the
	// new conversation.
	EventConversationEdited EventType = "conversation_edited"
	// EventConfigChanged: the confirmation mode, the grants or the
	// enabled tools changed; Config has all three as they are now and
	// names the one that changed.
	EventConfigChanged EventType = "config_changed"
)

// ConfigChange is the payload of config_changed.
type ConfigChange struct {
	// Changed is "confirm", "grants", "tools" or "mode".
	Changed    string
	ConfirmAll bool
	Grants     interaction.Grants
	// Tools are the enabled tools.
	Tools []string
	// Mode is the session's mode (see SetMode).
	Mode string
}

// State is where a session's state machine is.
type State string

// Session states.
const (
	StateIdle       State = "idle"
	StateRunning    State = "running"
	StateSuspended  State = "suspended" // running, but waiting on a person
	StateCompacting State = "compacting"
	StateRetrying   State = "retrying"
)

// Outcome is how a run ended.
type Outcome string

// Run outcomes.
const (
	OutcomeCompleted Outcome = "completed"
	OutcomeFailed    Outcome = "failed"
	OutcomeCancelled Outcome = "cancelled"
)

// CompactionResult is what a compaction produced.
type CompactionResult struct {
	Summary          string `json:"summary"`
	FirstKeptEntryID string `json:"firstKeptEntryId"`
	TokensBefore     int64  `json:"tokensBefore"`
	Details          any    `json:"details"`
}

// Event is one thing that happened in a session. Every event carries a
// per-session monotonic Seq. Which other fields are set depends on Type.
//
// Agent events (message_*, tool_*, turn_*, agent_*, queue_update) are in
// Agent. A listener called by Subscribe sees message_update with the live
// partial message (valid during the call only); the copy kept in the
// event log has no partial message, only the delta in Agent.Update, and
// keeps less of tool_execution_update and queue_update too (see logCopy),
// so the log stays small and immutable.
//
// Its JSON (Go's field names, zero values left out) is how a cluster
// carries events between nodes; a token's delta is about 150 bytes
// instead of 750 with every field written, and decoding what another
// node published was a quarter of a following node's CPU. A message
// from a node that wrote every field reads the same.
type Event struct {
	Seq uint64 `json:",omitzero"`
	// Time is when the event was emitted; a replayed delta (see
	// eventLog) has it to within half a millisecond.
	Time  time.Time    `json:",omitzero"`
	Type  EventType    `json:",omitzero"`
	Agent *agent.Event `json:",omitzero"`

	// state_changed
	State    State   `json:",omitzero"`
	Previous State   `json:",omitzero"`
	Outcome  Outcome `json:",omitzero"` // set when a run ended

	// compaction_start / compaction_end
	Reason     string            `json:",omitzero"` // manual, threshold or overflow
	Compaction *CompactionResult `json:",omitzero"`
	Aborted    bool              `json:",omitzero"`
	WillRetry  bool              `json:",omitzero"`
	// compaction_end (failed), auto_retry_start
	ErrorMessage string `json:",omitzero"`

	// auto_retry_start / auto_retry_end
	Attempt     int    `json:",omitzero"`
	MaxAttempts int    `json:",omitzero"`
	DelayMs     int64  `json:",omitzero"`
	Success     bool   `json:",omitzero"`
	FinalError  string `json:",omitzero"`

	// session_info_changed
	Name string `json:",omitzero"`
	// thinking_level_changed
	ThinkingLevel llm.ThinkingLevel `json:",omitzero"`
	// model_changed
	Model *llm.Model `json:",omitzero"`
	// interaction_requested / interaction_resolved
	Interaction *interaction.Event `json:",omitzero"`
	// todo_updated
	Todo *todo.Snapshot `json:",omitzero"`
	// session_changed
	SessionID   string `json:",omitzero"`
	SessionFile string `json:",omitzero"`
	// conversation_edited
	Index     int  `json:",omitzero"`
	Truncated bool `json:",omitzero"`
	// config_changed
	Config *ConfigChange `json:",omitzero"`
}

// logCopy is the version of ev kept in the event log, and what a replay
// gives: nothing in it changes after it is appended, and nothing in it
// grows with what a client resends or a tool streams, so a long session
// keeps a small log. (A message_update that carries a delta is not kept
// as an event at all but as its text and a few bytes in the log, and
// replayed as its log copy; see eventLog.) What the log keeps differs
// from what listeners get in three events:
//
//   - message_update: the delta only, without the partial message.
//   - tool_execution_update: no partial result (an empty one); a tool
//     such as bash sends its whole output so far several times a second,
//     and tool_execution_end carries the final result.
//   - queue_update: every queued text cut to a preview of
//     QueuePreviewBytes, so that the log holds the queue's shape (how many
//     messages, in which order, how each begins) and not a copy of the
//     whole queue per change; the full texts are in the user messages
//     when they are delivered.
func logCopy(ev Event) Event {
	if ev.Agent == nil {
		return ev
	}
	a := *ev.Agent
	switch a.Type {
	case agent.EventMessageUpdate:
		a.Message = nil
		if a.Update != nil {
			u := *a.Update
			if u.ToolCall != nil {
				tc := *u.ToolCall
				u.ToolCall = &tc
			}
			a.Update = &u
		}
	case agent.EventMessageStart:
		if a.Message != nil && a.Message.Role == llm.RoleAssistant {
			a.Message = a.Message.Clone()
		}
	case agent.EventToolExecutionUpdate:
		a.Partial = &tool.Result{}
	case agent.EventToolExecutionEnd:
		if a.Result != nil {
			r := *a.Result
			r.Details = encodedDetails(r.Details)
			a.Result = &r
		}
	case agent.EventQueueUpdate:
		a.Steering, a.FollowUp = previews(a.Steering), previews(a.FollowUp)
	}
	ev.Agent = &a
	return ev
}

// QueuePreviewBytes is how much of each queued text a logged
// queue_update keeps.
const QueuePreviewBytes = 256

func previews(texts []string) []string {
	if texts == nil {
		return nil
	}
	out := make([]string, len(texts))
	for i, t := range texts {
		if len(t) > QueuePreviewBytes {
			n := QueuePreviewBytes
			for n > 0 && !utf8.RuneStart(t[n]) {
				n--
			}
			// A new string: the preview must not keep the whole text alive.
			t = t[:n] + "…"
		}
		out[i] = t
	}
	return out
}

// encodedDetails returns a tool result's details as the JSON clients are
// sent. The log keeps that instead of the tool's own value, whose size
// the log cannot see (bash's details hold the output's tail once more).
func encodedDetails(d any) any {
	switch d.(type) {
	case nil, json.RawMessage:
		return d
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return d
	}
	return json.RawMessage(bytes.TrimSuffix(b.Bytes(), []byte{'\n'}))
}
