// Package agent is the agent loop: a prompt goes to the model, the tools
// it calls run (in parallel by default, results kept in call order), their
// results go back, and so on until the model stops. Steering messages are
// delivered after the current turn, follow-ups when the agent would stop.
// The loop knows nothing of sessions on disk or of clients: it takes
// operations and emits events.
package agent

import (
	"encoding/json"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/tool"
)

// EventType names an agent event; the strings are pi's.
type EventType string

// Agent events.
const (
	EventAgentStart          EventType = "agent_start"
	EventAgentEnd            EventType = "agent_end"
	EventTurnStart           EventType = "turn_start"
	EventTurnEnd             EventType = "turn_end"
	EventMessageStart        EventType = "message_start"
	EventMessageUpdate       EventType = "message_update"
	EventMessageEnd          EventType = "message_end"
	EventToolExecutionStart  EventType = "tool_execution_start"
	EventToolExecutionUpdate EventType = "tool_execution_update"
	EventToolExecutionEnd    EventType = "tool_execution_end"
	EventQueueUpdate         EventType = "queue_update"
)

// Event is one thing that happened in a run. Which fields are set depends
// on Type, as in pi:
//
//   - message_start / message_end: Message
//   - message_update: Message (the partial assistant message) and Update
//   - turn_end: Message (the assistant message) and ToolResults
//   - agent_end: Messages (everything the run added)
//   - tool_execution_*: ToolCallID, ToolName, Args, and Result (end) or
//     Partial (update), IsError and Duration (end)
//   - queue_update: Steering and FollowUp (the queued texts)
//
// Messages referenced by an event are owned by the agent and must not be
// modified; the partial message of message_update changes after the
// callback returns, so a consumer that keeps it must Clone it.
type Event struct {
	Type        EventType      `json:",omitzero"`
	Message     *llm.Message   `json:",omitzero"`
	Update      *llm.Event     `json:",omitzero"`
	ToolResults []*llm.Message `json:",omitzero"`
	Messages    []*llm.Message `json:",omitzero"`

	ToolCallID string          `json:",omitzero"`
	ToolName   string          `json:",omitzero"`
	Args       json.RawMessage `json:",omitzero"`
	Result     *tool.Result    `json:",omitzero"`
	Partial    *tool.Result    `json:",omitzero"`
	IsError    bool            `json:",omitzero"`
	// Duration is how long the tool ran (tool_execution_end); 0 for a
	// call that did not run (refused, not found, aborted before it
	// started).
	Duration time.Duration `json:",omitzero"`

	Steering []string `json:",omitzero"`
	FollowUp []string `json:",omitzero"`

	// Err is the typed error of an assistant message that ended with
	// stopReason error or aborted (message_end only); retry and
	// compaction branch on its kind.
	Err *llm.Error `json:",omitzero"`
}
