package convapi

import (
	"github.com/agentd-dev/agentd/internal/instructions"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/tool"
)

// The wire of the face: every request body, response body and event, as
// Go types. The handlers encode responses and events from them, the
// strict decoders take their field lists from them (fieldNames), and the
// OpenAPI document is generated from them, so the three cannot disagree.
// Names and shapes are gptme's shipped v2 wire (see
// ../shared/reference/gptme-v2-wire.md); agentd's additions are marked.

// Message is one message of a conversation log (gptme's MessageDict).
// agentd's messages map onto it: a user message is "user", an assistant
// message "assistant" (its tool calls rendered into content and listed in
// metadata), a tool result "system" with call_id, anything else "system".
type Message struct {
	Role      string   `json:"role" enum:"user,assistant,system"`
	Content   string   `json:"content"`
	Timestamp string   `json:"timestamp" jsonschema:"ISO 8601 with offset"`
	Files     []string `json:"files,omitempty"`
	Hide      bool     `json:"hide,omitempty"`
	CallID    string   `json:"call_id,omitempty" jsonschema:"the tool call a tool result answers"`
	// Metadata is agentd's detail of the message (model, stop reason, tool
	// calls, the tool that produced a result).
	Metadata *MessageMetadata `json:"metadata,omitempty"`
}

// MessageMetadata is what agentd knows of a message beyond gptme's
// fields.
type MessageMetadata struct {
	Model      string `json:"model,omitempty" jsonschema:"provider/id of the model that wrote it"`
	StopReason string `json:"stop_reason,omitempty"`
	// Interrupted marks an assistant message cut short by an interrupt:
	// what had streamed is kept.
	Interrupted bool   `json:"interrupted,omitempty"`
	Error       string `json:"error,omitempty"`
	// ToolCalls are an assistant message's tool calls.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// Tool and IsError describe a tool result.
	Tool    string `json:"tool,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
	// Usage is what an assistant message's model response counted and
	// cost (agentd).
	Usage *llm.Usage `json:"usage,omitempty"`
	// Role is agentd's role when it is not gptme's (toolResult,
	// bashExecution, custom, compactionSummary, branchSummary).
	Role string `json:"agentd_role,omitempty"`
}

// ToolCall is one tool call of an assistant message.
type ToolCall struct {
	ToolID string  `json:"tool_id"`
	CallID string  `json:"call_id"`
	Use    ToolUse `json:"tooluse"`
}

// ToolUse is a tool call as a person sees it: the tool, its primary text
// (bash's command, write's content) in content and its other arguments
// in args; a tool without one primary text has its JSON arguments in
// content.
type ToolUse struct {
	Tool    string   `json:"tool"`
	Args    []string `json:"args"`
	Content string   `json:"content"`
}

// ---- requests ----

// CreateRequest is the body of PUT /api/v2/conversations/{id}.
type CreateRequest struct {
	Prompt   string              `json:"prompt,omitempty" jsonschema:"full, short or none: agentd's own system prompt; any other text leads the conversation as a system message"`
	Messages []InputMessage      `json:"messages,omitempty"`
	Config   *ConversationConfig `json:"config,omitempty"`
	// AutoConfirm true confirms every tool call of the session it creates;
	// an integer N the next N calls.
	AutoConfirm any `json:"auto_confirm,omitempty" oneof:"boolean,integer"`
}

// InputMessage is a message a client adds.
type InputMessage struct {
	Role      string   `json:"role" enum:"user,assistant,system"`
	Content   string   `json:"content"`
	Timestamp string   `json:"timestamp,omitempty"`
	Files     []string `json:"files,omitempty" jsonschema:"must be empty: agentd takes no file attachments"`
}

// AppendRequest is the body of POST /api/v2/conversations/{id}.
type AppendRequest struct {
	InputMessage
	Branch string   `json:"branch,omitempty" jsonschema:"only main"`
	Tools  []string `json:"tools,omitempty"`
}

// StepRequest is the body of POST .../step.
type StepRequest struct {
	SessionID   string  `json:"session_id" jsonschema:"the attachment (gptme session) the request comes from; required here and optional on the design document's /api/conversations paths"`
	Model       string  `json:"model,omitempty" jsonschema:"provider/id; the conversation's model from now on"`
	Stream      bool    `json:"stream,omitempty" jsonschema:"accepted; agentd always streams"`
	Branch      string  `json:"branch,omitempty"`
	AutoConfirm any     `json:"auto_confirm,omitempty" oneof:"boolean,integer"`
	UseACP      bool    `json:"use_acp,omitempty" jsonschema:"accepted; must be false"`
	MaxTokens   int     `json:"max_tokens,omitempty"`
	Temperature float64 `json:"temperature,omitempty"`
	TopP        float64 `json:"top_p,omitempty"`
}

// ConfirmRequest is the body of POST .../tool/confirm.
type ConfirmRequest struct {
	SessionID string `json:"session_id,omitempty"`
	ToolID    string `json:"tool_id,omitempty"`
	// ID is the design document's name for tool_id.
	ID     string `json:"id,omitempty"`
	Action string `json:"action" enum:"confirm,edit,skip,auto,reject,always"`
	// Content is the edited primary text (edit).
	Content string `json:"content,omitempty"`
	// Count is how many more calls auto confirms.
	Count int `json:"count,omitempty"`
	// Feedback is what reject tells the model.
	Feedback string `json:"feedback,omitempty"`
	// AllTools widens always from this tool to every tool.
	AllTools bool `json:"all_tools,omitempty"`
}

// InterruptRequest is the body of POST .../interrupt.
type InterruptRequest struct {
	SessionID string `json:"session_id" jsonschema:"the attachment (gptme session) the request comes from; required here and optional on the design document's /api/conversations paths"`
}

// RerunRequest is the body of POST .../rerun.
type RerunRequest struct {
	SessionID string `json:"session_id" jsonschema:"the attachment (gptme session) the request comes from; required here and optional on the design document's /api/conversations paths"`
}

// TranscriptRequest is the body of POST .../transcript: the turns of a
// voice call, added to the conversation (made if it does not exist).
type TranscriptRequest struct {
	Turns        []TranscriptTurn `json:"turns"`
	CallMetadata map[string]any   `json:"call_metadata" jsonschema:"must hold call_sid; a call_sid already added is acknowledged without adding its turns again"`
}

// TranscriptTurn is one turn of a call; turns with another role or no
// text are passed over.
type TranscriptTurn struct {
	Role    string   `json:"role" enum:"user,assistant"`
	Text    *string  `json:"text"`
	EndedAt *float64 `json:"ended_at,omitempty" jsonschema:"accepted"`
}

// TranscriptResponse answers POST .../transcript. Status is "ok", or
// "already_acked" for a call_sid added before (messages_added 0).
type TranscriptResponse struct {
	Status         string `json:"status" enum:"ok,already_acked"`
	ConversationID string `json:"conversation_id"`
	MessagesAdded  int    `json:"messages_added"`
}

// ElicitRequest is the body of POST .../elicit/respond.
type ElicitRequest struct {
	SessionID string         `json:"session_id,omitempty"`
	ElicitID  string         `json:"elicit_id"`
	Action    string         `json:"action" enum:"accept,decline,cancel"`
	Value     any            `json:"value,omitempty"`
	Values    map[string]any `json:"values,omitempty"`
}

// EditRequest is the body of PATCH .../messages/{index}.
type EditRequest struct {
	Content string   `json:"content,omitempty"`
	Files   []string `json:"files,omitempty"`
}

// ConversationConfig is a conversation's configuration (gptme's
// ChatConfig.to_dict), the body of PATCH .../config and part of PUT.
type ConversationConfig struct {
	Chat ChatConfig     `json:"chat"`
	Env  map[string]any `json:"env"`
	// MCP are the conversation's own MCP servers (gptme's MCPConfig),
	// started for it alone and stopped with it; absent when it has none.
	MCP *MCPConfig `json:"mcp,omitempty"`
	// Unavailable are the tool sources that give no tools, each with its
	// cause: an MCP server that failed to start (agentd; in answers only).
	Unavailable []tool.Unavailable `json:"unavailable,omitempty"`
	// ContextFiles are the files the conversation's system prompt was
	// built from: AGENTS.md and CLAUDE.md, SYSTEM.md and APPEND_SYSTEM.md
	// (agentd; in answers only, as pi's get_state reports them).
	ContextFiles []instructions.File `json:"context_files,omitempty"`
	// Modes are the modes chat.mode may name (agentd; in answers only).
	Modes []ModeInfo `json:"modes,omitempty"`
}

// MCPConfig is gptme's mcp section of a conversation's configuration.
type MCPConfig struct {
	// Enabled: false starts none of the servers (absent is true).
	Enabled bool `json:"enabled"`
	// AutoStart: true (or absent) starts the servers when the
	// conversation is created or loaded; false starts them when first
	// needed: at its first run, or when chat.tools names their tools.
	AutoStart bool              `json:"auto_start"`
	Servers   []MCPServerConfig `json:"servers"`
}

// MCPServerConfig is one MCP server: a command speaking MCP on its
// stdio, or a streamable HTTP url; one of the two.
type MCPServerConfig struct {
	Name string `json:"name"`
	// Enabled: false keeps the entry without starting it (absent is true).
	Enabled bool     `json:"enabled"`
	Command string   `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
	// Env and Headers values are answered as SecretPlaceholder, which a
	// PATCH may send back to keep a value.
	Env     map[string]string `json:"env,omitempty"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// ChatConfig is the chat part of a configuration.
type ChatConfig struct {
	Name        string   `json:"name,omitempty"`
	Model       string   `json:"model,omitempty" jsonschema:"provider/id"`
	Tools       []string `json:"tools,omitempty"`
	Thinking    string   `json:"thinking,omitempty" jsonschema:"agentd's thinking level: off, minimal, low, medium, high, xhigh"`
	ToolFormat  string   `json:"tool_format,omitempty"`
	Stream      bool     `json:"stream"`
	Interactive bool     `json:"interactive"`
	Workspace   string   `json:"workspace,omitempty"`
	// ConfirmAll: every tool call waits for a person unless a grant
	// covers it (agentd; on for conversations of this face).
	ConfirmAll *bool `json:"confirm_all,omitempty"`
	// AutoConfirm are the grants given in advance (agentd).
	AutoConfirm *AutoConfirm `json:"auto_confirm,omitempty"`
	// Sandbox is what the conversation's tools may touch (agentd): chosen
	// when it is created, the server's mode or a stricter one, and fixed
	// from then on.
	Sandbox string `json:"sandbox,omitempty" enum:"read-only,workspace-write,full-access" jsonschema:"agentd: the server's mode or a stricter one; set on PUT only"`
	// Mode is the conversation's mode (agentd): build, plan or one of
	// the configuration's; PATCH switches it.
	Mode string `json:"mode,omitempty" jsonschema:"agentd: the conversation's mode (build, plan, or a configured one; see modes)"`
}

// AutoConfirm are the approvals a conversation has given in advance.
type AutoConfirm struct {
	// Next is how many more calls run without asking.
	Next int `json:"next"`
	// AllTools: every call runs without asking.
	AllTools bool `json:"all_tools"`
	// Tools run without asking.
	Tools []string `json:"tools"`
}

// ---- responses ----

// StatusResponse is the answer of most commands.
type StatusResponse struct {
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
}

// CreatedResponse answers PUT and fork.
type CreatedResponse struct {
	Status         string `json:"status"`
	ConversationID string `json:"conversation_id"`
	SessionID      string `json:"session_id"`
}

// StepResponse answers step.
type StepResponse struct {
	Status    string `json:"status"`
	Message   string `json:"message"`
	SessionID string `json:"session_id"`
}

// RerunResponse answers rerun.
type RerunResponse struct {
	Status  string   `json:"status"`
	Message string   `json:"message"`
	ToolIDs []string `json:"tool_ids"`
}

// ConfigResponse answers PATCH .../config.
type ConfigResponse struct {
	Status  string             `json:"status"`
	Message string             `json:"message"`
	Config  ConversationConfig `json:"config"`
	Tools   []string           `json:"tools"`
}

// ErrorResponse is every error: a message a person can act on.
type ErrorResponse struct {
	Error string `json:"error"`
}

// Conversation answers GET .../{id} and the edits.
type Conversation struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Log     []Message `json:"log"`
	Logfile string    `json:"logfile"`
	Logdir  string    `json:"logdir"`
	// Branches are the logs by branch name; agentd has the one branch it
	// is on, "main" (an edit keeps the old messages in the session file's
	// tree, where pi-server's get_tree shows them).
	Branches map[string][]Message `json:"branches"`
	Session  *ConversationSession `json:"session,omitempty"`
	// With limit: the page's place in the log.
	TotalMessages *int  `json:"total_messages,omitempty"`
	HasMore       *bool `json:"has_more,omitempty"`
	Before        *int  `json:"before,omitempty"`
	// Seq is the last event seq of the conversation (agentd): a client
	// that reads the log and then opens events with ?after=seq misses
	// nothing.
	Seq uint64 `json:"seq"`
}

// ConversationSession is the most recently active attachment of a
// conversation, for clients that poll.
type ConversationSession struct {
	ID         string  `json:"id"`
	Generating bool    `json:"generating"`
	LastError  *string `json:"last_error" oneof:"string,null"`
}

// ConversationSummary is one entry of the conversation list.
type ConversationSummary struct {
	ID                 string  `json:"id"`
	Name               string  `json:"name"`
	Path               string  `json:"path"`
	Created            float64 `json:"created" jsonschema:"Unix seconds"`
	Modified           float64 `json:"modified" jsonschema:"Unix seconds"`
	Messages           int     `json:"messages"`
	MessageCount       int     `json:"message_count"`
	LastUpdated        float64 `json:"last_updated"`
	Branches           int     `json:"branches"`
	Workspace          string  `json:"workspace"`
	Model              *string `json:"model" oneof:"string,null"`
	LastMessagePreview *string `json:"last_message_preview" oneof:"string,null"`
	// Loaded is false for a conversation known from before a restart and
	// not opened since (agentd).
	Loaded bool `json:"loaded"`
	// Generating: a run is in progress, whichever face started it
	// (agentd).
	Generating bool `json:"generating"`
}

// ConversationPage is the paginated list.
type ConversationPage struct {
	Conversations []ConversationSummary `json:"conversations"`
	NextCursor    *string               `json:"next_cursor" oneof:"string,null"`
}

// RootResponse answers GET /api/v2.
type RootResponse struct {
	Message            string          `json:"message"`
	Documentation      string          `json:"documentation"`
	Version            string          `json:"version"`
	APIVersion         int             `json:"api_version"`
	ContractRevision   int             `json:"contract_revision"`
	Capabilities       map[string]bool `json:"capabilities"`
	ProviderConfigured bool            `json:"provider_configured"`
}

// VersionResponse answers GET /api/v2/version.
type VersionResponse struct {
	APIVersion       int `json:"api_version"`
	ContractRevision int `json:"contract_revision"`
}

// ModelInfo is one model of GET /api/v2/models.
type ModelInfo struct {
	ID                string  `json:"id" jsonschema:"provider/id"`
	Provider          string  `json:"provider"`
	Model             string  `json:"model"`
	Name              string  `json:"name"`
	Context           int64   `json:"context"`
	MaxOutput         int64   `json:"max_output"`
	SupportsStreaming bool    `json:"supports_streaming"`
	SupportsVision    bool    `json:"supports_vision"`
	SupportsReasoning bool    `json:"supports_reasoning"`
	PriceInput        float64 `json:"price_input"`
	PriceOutput       float64 `json:"price_output"`
	Deprecated        bool    `json:"deprecated"`
	// Available and UnavailableReason are agentd's: with ?all=true the
	// list holds the models that cannot be used now too, and why.
	Available         bool   `json:"available"`
	UnavailableReason string `json:"unavailable_reason,omitempty"`
}

// ModelsResponse answers GET /api/v2/models.
type ModelsResponse struct {
	Models      []ModelInfo `json:"models"`
	Default     *string     `json:"default" oneof:"string,null"`
	Recommended []string    `json:"recommended"`
	Favorites   []string    `json:"favorites"`
}

// SessionInfo is one attachment of GET /api/v2/sessions.
type SessionInfo struct {
	ID             string   `json:"id"`
	ConversationID string   `json:"conversation_id"`
	Model          *string  `json:"model" oneof:"string,null"`
	MessageCount   int      `json:"message_count"`
	Generating     bool     `json:"generating"`
	ElapsedSeconds *float64 `json:"elapsed_seconds" oneof:"number,null"`
	CreatedAt      string   `json:"created_at"`
	LastActivity   string   `json:"last_activity"`
	// Streams counts the event streams attached (agentd).
	Streams int `json:"streams"`
}

// ServerHealth answers GET /api/v2/server/health: how many attachments
// there are and how many of their conversations are generating (green:
// none or few, yellow: some, red: all).
type ServerHealth struct {
	SessionCount    int          `json:"session_count"`
	GeneratingCount int          `json:"generating_count"`
	IdleCount       int          `json:"idle_count"`
	Health          string       `json:"health" enum:"green,yellow,red"`
	Slots           []HealthSlot `json:"slots"`
}

// HealthSlot is one attachment in ServerHealth.
type HealthSlot struct {
	ID         string `json:"id" jsonschema:"the attachment id's first 8 characters"`
	Generating bool   `json:"generating"`
}

// CookieResponse answers POST and DELETE /api/v2/auth/cookie.
type CookieResponse struct {
	OK      bool   `json:"ok"`
	Message string `json:"message"`
}

// ---- events ----

// Every event is a JSON object with "type", sent as one SSE frame:
// "id: <seq>\ndata: <json>\n\n", never with an "event:" line. The seq is
// the conversation's event seq; a frame made of several events (an
// assistant message's message_added and generation_complete) carries the
// seq of the session event they stand for on each.

// ConnectedEvent is the first frame of every stream: a snapshot.
type ConnectedEvent struct {
	Type         string        `json:"type" enum:"connected"`
	SessionID    string        `json:"session_id"`
	Generating   bool          `json:"generating"`
	LastError    *string       `json:"last_error" oneof:"string,null"`
	PendingTools []PendingTool `json:"pending_tools"`
	// PendingElicitations are the questions waiting for an answer
	// (agentd).
	PendingElicitations []ElicitPendingEvent `json:"pending_elicitations"`
	// Seq is the last event seq this snapshot covers; the events that
	// follow have higher seqs (agentd).
	Seq uint64 `json:"seq"`
	// Resumed is set when the stream resumes after a cursor
	// (Last-Event-ID or ?after=): every event after it follows (agentd).
	Resumed bool `json:"resumed,omitempty"`
	// ToolOutputs are the output so far of the tool calls running now
	// whose newest tool_output this stream does not bring: the event log
	// keeps no output of a running call, so a client that connects or
	// reconnects mid-call shows these until the next tool_output or the
	// result (agentd).
	ToolOutputs []ToolOutputEvent `json:"tool_outputs,omitempty"`
}

// PendingTool is a tool call waiting for a person.
type PendingTool struct {
	ToolID      string  `json:"tool_id"`
	ToolUse     ToolUse `json:"tooluse"`
	AutoConfirm bool    `json:"auto_confirm"`
}

// ResyncEvent follows connected when the client's cursor is too old (the
// conversation's event log no longer holds what followed it) or beyond
// the last event: the events in between cannot be replayed, so the
// client reloads the conversation (GET) and continues from seq (agentd).
type ResyncEvent struct {
	Type   string `json:"type" enum:"resync"`
	Reason string `json:"reason"`
	After  uint64 `json:"after" jsonschema:"the cursor the client sent"`
	Seq    uint64 `json:"seq" jsonschema:"events from here on follow"`
}

// PingEvent is the heartbeat, at least every 15 s. Its id is the last
// event's seq.
type PingEvent struct {
	Type string `json:"type" enum:"ping"`
}

// GenerationStartedEvent: the model starts writing a message.
type GenerationStartedEvent struct {
	Type string `json:"type" enum:"generation_started"`
}

// GenerationProgressEvent is streamed text. A client that falls behind
// gets consecutive fragments joined into one.
type GenerationProgressEvent struct {
	Type  string `json:"type" enum:"generation_progress"`
	Token string `json:"token"`
}

// MessageAddedEvent: a message was added to the log.
type MessageAddedEvent struct {
	Type    string  `json:"type" enum:"message_added"`
	Message Message `json:"message"`
}

// GenerationCompleteEvent follows the assistant's message_added.
type GenerationCompleteEvent struct {
	Type    string  `json:"type" enum:"generation_complete"`
	Message Message `json:"message"`
}

// ToolPendingEvent: a tool call waits for a person (tool/confirm).
type ToolPendingEvent struct {
	Type        string  `json:"type" enum:"tool_pending"`
	ToolID      string  `json:"tool_id"`
	ToolUse     ToolUse `json:"tooluse"`
	AutoConfirm bool    `json:"auto_confirm"`
}

// ToolExecutingEvent: a confirmed tool call starts.
type ToolExecutingEvent struct {
	Type   string `json:"type" enum:"tool_executing"`
	ToolID string `json:"tool_id"`
}

// ToolOutputEvent is a running tool's output so far (each replaces the
// one before).
type ToolOutputEvent struct {
	Type   string `json:"type" enum:"tool_output"`
	ToolID string `json:"tool_id"`
	Output string `json:"output"`
}

// ToolCompleteEvent: a tool call that ran has ended.
type ToolCompleteEvent struct {
	Type       string  `json:"type" enum:"tool_complete"`
	ToolID     string  `json:"tool_id"`
	DurationMs float64 `json:"duration_ms"`
	Success    bool    `json:"success"`
}

// ElicitPendingEvent: the agent asks the person something
// (elicit/respond).
type ElicitPendingEvent struct {
	Type        string        `json:"type" enum:"elicit_pending"`
	ElicitID    string        `json:"elicit_id"`
	ElicitType  string        `json:"elicit_type" enum:"text,choice,multi_choice,secret,confirmation,form"`
	Prompt      string        `json:"prompt"`
	Options     []string      `json:"options,omitempty"`
	Fields      []ElicitField `json:"fields,omitempty"`
	Default     string        `json:"default,omitempty"`
	Description string        `json:"description,omitempty"`
}

// ElicitField is one field of a form.
type ElicitField struct {
	Name     string   `json:"name"`
	Prompt   string   `json:"prompt"`
	Type     string   `json:"type" jsonschema:"text, number, integer, boolean or choice"`
	Options  []string `json:"options"`
	Required bool     `json:"required"`
	Default  any      `json:"default"`
}

// InterruptedEvent: an interrupt stopped the work; nothing of it runs
// after this event.
type InterruptedEvent struct {
	Type string `json:"type" enum:"interrupted"`
}

// RunEndedEvent: the run a step (or another face's prompt) started has
// ended, and the conversation is idle: nothing more happens until the
// next command (agentd; gptme's clients guess it from a
// generation_complete with no tool_pending after it). After an
// interrupt it follows interrupted.
type RunEndedEvent struct {
	Type    string `json:"type" enum:"run_ended"`
	Outcome string `json:"outcome" enum:"completed,failed,cancelled"`
}

// ErrorEvent: a failure, also kept as the conversation's last error.
type ErrorEvent struct {
	Type  string `json:"type" enum:"error"`
	Error string `json:"error"`
}

// ConfigChangedEvent: the model, thinking level, name or tools changed.
// Config holds the fields that changed.
type ConfigChangedEvent struct {
	Type          string             `json:"type" enum:"config_changed"`
	Config        ConversationConfig `json:"config"`
	ChangedFields []string           `json:"changed_fields"`
}

// ConversationEditedEvent: a message was edited or removed; Log is the
// conversation as it now stands.
type ConversationEditedEvent struct {
	Type      string               `json:"type" enum:"conversation_edited"`
	Index     int                  `json:"index"`
	Truncated bool                 `json:"truncated"`
	Log       []Message            `json:"log"`
	Branches  map[string][]Message `json:"branches"`
}

// CompactionStartedEvent: the conversation's older messages are being
// summarized; the model is not called meanwhile (agentd).
type CompactionStartedEvent struct {
	Type   string `json:"type" enum:"compaction_started"`
	Reason string `json:"reason" jsonschema:"manual, threshold or overflow"`
}

// CompactionEndedEvent: the summary is done, given up or failed (agentd).
type CompactionEndedEvent struct {
	Type      string `json:"type" enum:"compaction_ended"`
	Reason    string `json:"reason"`
	Aborted   bool   `json:"aborted,omitempty"`
	WillRetry bool   `json:"will_retry,omitempty" jsonschema:"the request that overflowed is sent again"`
	Error     string `json:"error,omitempty"`
}

// RetryStartedEvent: a model request failed with an error worth retrying
// and is sent again after delay_ms (agentd).
type RetryStartedEvent struct {
	Type        string `json:"type" enum:"retry_started"`
	Attempt     int    `json:"attempt"`
	MaxAttempts int    `json:"max_attempts"`
	DelayMs     int64  `json:"delay_ms"`
	Error       string `json:"error"`
}

// RetryEndedEvent: the retries ended, with an answer or without
// (agentd).
type RetryEndedEvent struct {
	Type    string `json:"type" enum:"retry_ended"`
	Attempt int    `json:"attempt"`
	Success bool   `json:"success"`
	Error   string `json:"error,omitempty"`
}

// TodoEvent: the agent's plan (its todo list) changed (agentd).
type TodoEvent struct {
	Type  string     `json:"type" enum:"todo_updated"`
	Items []TodoItem `json:"items"`
	Done  int        `json:"done"`
	Total int        `json:"total"`
}

// TodoItem is one step of the plan.
type TodoItem struct {
	ID      int    `json:"id"`
	Content string `json:"content"`
	Status  string `json:"status" enum:"pending,in_progress,completed"`
}
