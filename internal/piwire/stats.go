package piwire

import (
	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/instructions"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/session"
)

// SessionStats is pi's SessionStats for a session's statistics.
func SessionStats(st session.Stats) any {
	type tokens struct {
		Input      int64 `json:"input"`
		Output     int64 `json:"output"`
		CacheRead  int64 `json:"cacheRead"`
		CacheWrite int64 `json:"cacheWrite"`
		Total      int64 `json:"total"`
	}
	type usage struct {
		Tokens        *int64   `json:"tokens"` // null right after a compaction
		ContextWindow int64    `json:"contextWindow"`
		Percent       *float64 `json:"percent"`
	}
	type stats struct {
		SessionFile       string  `json:"sessionFile,omitempty"`
		SessionID         string  `json:"sessionId"`
		UserMessages      int     `json:"userMessages"`
		AssistantMessages int     `json:"assistantMessages"`
		ToolCalls         int     `json:"toolCalls"`
		ToolResults       int     `json:"toolResults"`
		TotalMessages     int     `json:"totalMessages"`
		Tokens            tokens  `json:"tokens"`
		Cost              float64 `json:"cost"`
		ContextUsage      *usage  `json:"contextUsage,omitempty"`
	}
	t := st.Tokens
	out := stats{SessionFile: st.SessionFile, SessionID: st.SessionID, UserMessages: st.UserMessages, AssistantMessages: st.AssistantMessages,
		ToolCalls: st.ToolCalls, ToolResults: st.ToolResults, TotalMessages: st.TotalMessages,
		Tokens: tokens{t.Input, t.Output, t.CacheRead, t.CacheWrite, t.Input + t.Output + t.CacheRead + t.CacheWrite}, Cost: t.Cost.Total}
	if st.ContextWindow > 0 {
		out.ContextUsage = &usage{ContextWindow: st.ContextWindow}
		if !st.ContextUnknown {
			out.ContextUsage.Tokens, out.ContextUsage.Percent = &st.ContextTokens, &st.ContextPercent
		}
	}
	return out
}

// SessionState is pi's get_state data: what a client shows of a session.
// pi-server's SessionInfo carries the same fields.
type SessionState struct {
	Model                 *llm.Model        `json:"model"`
	ThinkingLevel         llm.ThinkingLevel `json:"thinkingLevel"`
	IsStreaming           bool              `json:"isStreaming"`
	IsCompacting          bool              `json:"isCompacting"`
	SteeringMode          agent.QueueMode   `json:"steeringMode"`
	FollowUpMode          agent.QueueMode   `json:"followUpMode"`
	SessionFile           string            `json:"sessionFile,omitempty"`
	SessionID             string            `json:"sessionId"`
	SessionName           string            `json:"sessionName,omitempty"`
	AutoCompactionEnabled bool              `json:"autoCompactionEnabled"`
	MessageCount          int               `json:"messageCount"`
	PendingMessageCount   int               `json:"pendingMessageCount"`
	// ContextFiles (agentd's) are the files the session's system prompt
	// was built from: AGENTS.md and CLAUDE.md, SYSTEM.md and
	// APPEND_SYSTEM.md, each with its kind, size and whether it was cut.
	// Left out when there are none (a session not loaded yet, or no
	// such files), so the answer keeps pi's shape.
	ContextFiles []instructions.File `json:"contextFiles,omitempty"`
	// Mode (agentd's) is the session's mode (set_mode), left out in the
	// default mode (build) so the answer keeps pi's shape.
	Mode string `json:"mode,omitempty"`
}

// StateOf reads a session's state.
func StateOf(s *session.Session) SessionState {
	st := s.Settings()
	return SessionState{
		Model: s.Model(), ThinkingLevel: s.Thinking(), IsStreaming: s.Running(),
		IsCompacting: s.State() == session.StateCompacting, SteeringMode: st.SteeringMode, FollowUpMode: st.FollowUpMode,
		SessionFile: s.File(), SessionID: s.ID(), SessionName: s.Name(), AutoCompactionEnabled: st.AutoCompaction,
		MessageCount: len(s.Messages()), PendingMessageCount: s.PendingCount(),
		ContextFiles: append([]instructions.File{}, s.Instructions()...),
		Mode:         stateMode(s),
	}
}
