package session

import (
	"slices"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/tool"
)

// ToolProgress is the latest output of a tool call still running: what
// its newest tool_execution_update carried. The event log keeps updates
// without their output (logCopy), so a client that reconnects during a
// long call would otherwise see nothing of it until the next update or
// the result; this is the one copy per running call that fills the gap.
type ToolProgress struct {
	ToolCallID string
	ToolName   string
	// Partial is the output so far. Its Content is the session's own copy
	// and is never changed: read it, do not modify it.
	Partial *tool.Result
	// Seq is the seq of the update that carried it. A subscriber whose
	// stream starts after Seq gets a newer update as a live event; one
	// whose stream covers Seq got it only as a logged event, without the
	// output, and needs this.
	Seq uint64
}

// ToolProgress returns the latest output of every tool call running now,
// in no particular order. It holds one result per running call, replaced
// by each update and dropped when the call ends, so it is as large as the
// updates being sent anyway.
func (s *Session) ToolProgress() []ToolProgress {
	s.emitMu.Lock()
	defer s.emitMu.Unlock()
	out := make([]ToolProgress, 0, len(s.progress))
	for _, p := range s.progress {
		out = append(out, p)
	}
	return out
}

// noteProgress keeps the running calls' latest output; emitMu is held.
func (s *Session) noteProgress(ev Event) {
	a := ev.Agent
	if a == nil {
		return
	}
	switch a.Type {
	case agent.EventToolExecutionUpdate:
		if a.Partial == nil {
			return
		}
		if s.progress == nil {
			s.progress = map[string]ToolProgress{}
		}
		// A copy of the content slice: the result's strings cannot
		// change, but the tool may reuse the slice for its next update.
		r := *a.Partial
		r.Content = slices.Clone(r.Content)
		s.progress[a.ToolCallID] = ToolProgress{ToolCallID: a.ToolCallID, ToolName: a.ToolName, Partial: &r, Seq: ev.Seq}
	case agent.EventToolExecutionEnd:
		delete(s.progress, a.ToolCallID)
	case agent.EventAgentEnd:
		// A run's calls have all ended by now; a call the run lost track
		// of (a panic, a cancelled run) leaves nothing behind.
		clear(s.progress)
	}
}
