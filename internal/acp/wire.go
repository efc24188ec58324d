package acp

import "encoding/json"

// The ACP messages this face reads and writes, protocol version 1. Field
// names are the protocol's; only what agentd uses is declared, and
// unknown fields (such as _meta) are ignored as the protocol asks.

// ProtocolVersion is the ACP version this face speaks.
const ProtocolVersion = 1

type initializeParams struct {
	ProtocolVersion *int               `json:"protocolVersion"`
	ClientCaps      clientCapabilities `json:"clientCapabilities"`
}

type clientCapabilities struct {
	FS struct {
		ReadTextFile  bool `json:"readTextFile"`
		WriteTextFile bool `json:"writeTextFile"`
	} `json:"fs"`
	Terminal    bool             `json:"terminal"`
	Elicitation *elicitationCaps `json:"elicitation"`
}

type initializeResult struct {
	ProtocolVersion int               `json:"protocolVersion"`
	AgentCaps       agentCapabilities `json:"agentCapabilities"`
	AuthMethods     []any             `json:"authMethods"`
	AgentInfo       implementation    `json:"agentInfo"`
}

type implementation struct {
	Name    string `json:"name"`
	Title   string `json:"title,omitempty"`
	Version string `json:"version"`
}

type agentCapabilities struct {
	LoadSession bool `json:"loadSession"`
	Prompt      struct {
		Image           bool `json:"image"`
		Audio           bool `json:"audio"`
		EmbeddedContext bool `json:"embeddedContext"`
	} `json:"promptCapabilities"`
	MCP struct {
		HTTP bool `json:"http"`
		SSE  bool `json:"sse"`
	} `json:"mcpCapabilities"`
	Session sessionCapabilities `json:"sessionCapabilities"`
}

type sessionCapabilities struct {
	List   *struct{} `json:"list,omitempty"`
	Close  *struct{} `json:"close,omitempty"`
	Resume *struct{} `json:"resume,omitempty"`
	Fork   *struct{} `json:"fork,omitempty"`
}

// MCPServer is one entry of session/new's mcpServers: a stdio command
// (no type) or an HTTP server (type "http").
type MCPServer struct {
	Type    string    `json:"type,omitempty"`
	Name    string    `json:"name"`
	Command string    `json:"command,omitempty"`
	Args    []string  `json:"args,omitempty"`
	Env     []nameVal `json:"env,omitempty"`
	URL     string    `json:"url,omitempty"`
	Headers []nameVal `json:"headers,omitempty"`
}

type nameVal struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type newSessionParams struct {
	Cwd        *string     `json:"cwd"`
	MCPServers []MCPServer `json:"mcpServers"`
}

type newSessionResult struct {
	SessionID string       `json:"sessionId"`
	Meta      *sessionMeta `json:"_meta,omitempty"`
}

type loadSessionParams struct {
	SessionID  string      `json:"sessionId"`
	Cwd        *string     `json:"cwd"`
	MCPServers []MCPServer `json:"mcpServers"`
}

type listSessionsParams struct {
	Cwd    *string `json:"cwd"`
	Cursor *string `json:"cursor"`
}

type sessionInfo struct {
	SessionID string  `json:"sessionId"`
	Cwd       string  `json:"cwd"`
	Title     *string `json:"title,omitempty"`
	UpdatedAt *string `json:"updatedAt,omitempty"`
}

type listSessionsResult struct {
	Sessions   []sessionInfo `json:"sessions"`
	NextCursor *string       `json:"nextCursor,omitempty"`
}

type sessionIDParams struct {
	SessionID string `json:"sessionId"`
}

type promptParams struct {
	SessionID string         `json:"sessionId"`
	Prompt    []contentBlock `json:"prompt"`
}

type promptResult struct {
	StopReason string `json:"stopReason"`
}

// Stop reasons of session/prompt.
const (
	StopEndTurn         = "end_turn"
	StopMaxTokens       = "max_tokens"
	StopMaxTurnRequests = "max_turn_requests"
	StopRefusal         = "refusal"
	StopCancelled       = "cancelled"
)

// contentBlock is a prompt's or a message chunk's content.
type contentBlock struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	Data     string    `json:"data,omitempty"`
	MimeType string    `json:"mimeType,omitempty"`
	URI      string    `json:"uri,omitempty"`
	Name     string    `json:"name,omitempty"`
	Resource *resource `json:"resource,omitempty"`
}

type resource struct {
	URI      string `json:"uri"`
	Text     string `json:"text,omitempty"`
	Blob     string `json:"blob,omitempty"`
	MimeType string `json:"mimeType,omitempty"`
}

type sessionNotification struct {
	SessionID string `json:"sessionId"`
	Update    any    `json:"update"`
}

type chunkUpdate struct {
	SessionUpdate string       `json:"sessionUpdate"`
	Content       contentBlock `json:"content"`
}

// toolCall is both tool_call (every field) and tool_call_update (only
// toolCallId required), and the toolCall of a permission request.
type toolCall struct {
	SessionUpdate string            `json:"sessionUpdate,omitempty"`
	ToolCallID    string            `json:"toolCallId"`
	Title         string            `json:"title,omitempty"`
	Kind          string            `json:"kind,omitempty"`
	Status        string            `json:"status,omitempty"`
	Content       []toolCallContent `json:"content,omitempty"`
	Locations     []location        `json:"locations,omitempty"`
	RawInput      json.RawMessage   `json:"rawInput,omitempty"`
	RawOutput     any               `json:"rawOutput,omitempty"`
}

type toolCallContent struct {
	Type    string        `json:"type"`
	Content *contentBlock `json:"content,omitempty"`
	// diff
	Path    string  `json:"path,omitempty"`
	OldText *string `json:"oldText,omitempty"`
	NewText *string `json:"newText,omitempty"`
	// terminal
	TerminalID string `json:"terminalId,omitempty"`
}

type location struct {
	Path string `json:"path"`
	Line *int   `json:"line,omitempty"`
}

type planUpdate struct {
	SessionUpdate string      `json:"sessionUpdate"`
	Entries       []planEntry `json:"entries"`
}

type planEntry struct {
	Content  string `json:"content"`
	Priority string `json:"priority"`
	Status   string `json:"status"`
}

type usageUpdate struct {
	SessionUpdate string `json:"sessionUpdate"`
	Used          int64  `json:"used"`
	Size          int64  `json:"size"`
	Cost          *cost  `json:"cost,omitempty"`
}

type cost struct {
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency"`
}

type permissionOption struct {
	OptionID string `json:"optionId"`
	Name     string `json:"name"`
	Kind     string `json:"kind"`
}

type permissionParams struct {
	SessionID string             `json:"sessionId"`
	ToolCall  toolCall           `json:"toolCall"`
	Options   []permissionOption `json:"options"`
}

type permissionResult struct {
	Outcome struct {
		Outcome  string `json:"outcome"`
		OptionID string `json:"optionId"`
	} `json:"outcome"`
}

// Permission option kinds, used as their ids too.
const (
	AllowOnce    = "allow_once"
	AllowAlways  = "allow_always"
	RejectOnce   = "reject_once"
	RejectAlways = "reject_always"
)
