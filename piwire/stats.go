package piwire

import "github.com/agentd-dev/agentd/session"

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
