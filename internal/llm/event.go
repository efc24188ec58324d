package llm

// EventType names a step in the stream of one assistant message.
type EventType string

// Stream event types, as pi's AssistantMessageEvent.
const (
	EventStart         EventType = "start"
	EventTextStart     EventType = "text_start"
	EventTextDelta     EventType = "text_delta"
	EventTextEnd       EventType = "text_end"
	EventThinkingStart EventType = "thinking_start"
	EventThinkingDelta EventType = "thinking_delta"
	EventThinkingEnd   EventType = "thinking_end"
	EventToolCallStart EventType = "toolcall_start"
	EventToolCallDelta EventType = "toolcall_delta"
	EventToolCallEnd   EventType = "toolcall_end"
	EventDone          EventType = "done"
	EventError         EventType = "error"
)

// Event is one step of an assistant message stream.
//
// Events are small values; the message they refer to is not copied per
// event. Stream.Partial returns the message built so far, which stays valid
// (and changes) until the stream ends: take Message.Clone to keep a
// snapshot.
type Event struct {
	Type         EventType `json:",omitzero"`
	ContentIndex int       `json:",omitzero"`
	// Delta is the new text, thinking or raw tool-argument JSON of a *_delta event.
	Delta string `json:",omitzero"`
	// Content is the full text or thinking of a text_end / thinking_end event.
	Content string `json:",omitzero"`
	// ToolCall is the finished call of a toolcall_end event, arguments parsed.
	ToolCall *Content `json:",omitzero"`
	// Reason is the stop reason of a done or error event.
	Reason StopReason `json:",omitzero"`
}
