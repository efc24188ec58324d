package session

import (
	"encoding/json"
	"time"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/todo"
	"github.com/agentd-dev/agentd/internal/tool"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// Tool calls the conversation ends with but no run executes (the process
// stopped or was killed while they waited for a person or ran, or an edit
// left them there) wait for a person as parked requests in the broker,
// under the ids a live run would ask them under: an approval per call
// (whatever the policy's allow or the grants given before say: a restart
// is a point where a person decides), and for ask_user its question; todo
// calls are harmless and wait for the run. Clients list and answer them
// like any other request. The first answer starts a run that executes the
// calls, adopting the parked requests (see Answer); Step does the same; a
// new message settles them as not run (the conversation moved on), and so
// does Abort (the run was aborted).

// repark makes the parked requests those of the calls the conversation
// ends with now, if no run is in progress.
func (s *Session) repark() {
	s.parkMu.Lock()
	defer s.parkMu.Unlock()
	s.reparkLocked()
}

// reasonInterrupted is the result of a call that had started when the
// process running it stopped.
const reasonInterrupted = "Tool call interrupted: agentd stopped while it was running (a crash, kill or restart), so it may have done part of its work; it was not run again. Check its effects before repeating it."

// markStarted records, durably, that call is about to run (see
// CustomToolStarted).
func (s *Session) markStarted(call tool.Call) error {
	data, err := json.Marshal(startedData{ToolCallID: call.ID})
	if err != nil {
		return err
	}
	s.mu.Lock()
	f := s.file
	s.mu.Unlock()
	if _, err := f.AppendCustom(CustomToolStarted, data); err != nil {
		return err
	}
	// Synced as a message is (a custom entry otherwise waits for the next
	// message's fsync): a machine's crash must not lose it while the
	// call's effects stay.
	if s.cfg.Sync == transcript.SyncNever {
		return nil
	}
	return f.Sync()
}

type startedData struct {
	ToolCallID string `json:"toolCallId"`
}

// settleStarted records the calls among calls (those the conversation
// ends with, no run executing them) that were interrupted while they ran
// as such, with a result saying so, and returns the others. A call was
// interrupted when its marker is on the current branch after the last
// assistant message (markers of an earlier turn that reused the id do
// not count) and no result of it descends from the marker: a call that
// finished and was cut off by an edit or a fork (the leaf moved back
// above its result) waits for a person as before.
func (s *Session) settleStarted(calls []llm.Content) []llm.Content {
	if len(calls) == 0 {
		return calls
	}
	s.mu.Lock()
	f := s.file
	s.mu.Unlock()
	started := map[string]string{} // call id to its marker's entry id
	branch := f.Branch(f.Leaf())
	for i := len(branch) - 1; i >= 0; i-- {
		e := &branch[i]
		if e.Type == transcript.TypeMessage && e.Message != nil && e.Message.Role == llm.RoleAssistant {
			break
		}
		if e.Type != transcript.TypeCustom || e.Opaque() || e.CustomType != CustomToolStarted {
			continue
		}
		var d startedData
		if json.Unmarshal(e.Data, &d) == nil && d.ToolCallID != "" {
			started[d.ToolCallID] = e.ID
		}
	}
	if len(started) == 0 {
		return calls
	}
	for _, e := range f.Entries() {
		if e.Type != transcript.TypeMessage || e.Message == nil || e.Message.Role != llm.RoleToolResult {
			continue
		}
		marker, ok := started[e.Message.ToolCallID]
		if !ok {
			continue
		}
		for _, a := range f.Branch(e.ID) {
			if a.ID == marker {
				delete(started, e.Message.ToolCallID) // it finished
				break
			}
		}
	}
	rest := calls[:0:0]
	for _, c := range calls {
		if _, ok := started[c.ID]; !ok {
			rest = append(rest, c)
			continue
		}
		s.log.Warn("a tool call was interrupted while it ran; it is not run again", "tool", c.Name, "call", c.ID)
		s.appendOutsideRun(&llm.Message{Role: llm.RoleToolResult, ToolCallID: c.ID, ToolName: c.Name,
			Content: []llm.Content{llm.Text(reasonInterrupted)}, IsError: true, Timestamp: time.Now().UnixMilli()})
	}
	return rest
}

// parkRequest is a request to park for a call.
type parkRequest struct {
	req  interaction.Request
	call tool.Call
}

// reparkLocked is repark with s.parkMu held.
func (s *Session) reparkLocked() {
	s.mu.Lock()
	if s.runDone != nil || s.closed {
		s.mu.Unlock()
		return
	}
	cur := s.parked
	s.mu.Unlock()
	_, calls := agent.PendingToolCalls(s.agent.Messages())
	calls = s.settleStarted(calls)
	want := s.parkRequests(calls)
	if !s.sameCalls(cur, want) {
		s.mu.Lock()
		s.parked, s.unparking = nil, true
		s.mu.Unlock()
		s.cancelParked(cur, reasonMovedOn)
		parked := make([]parkedCall, 0, len(want))
		for _, w := range want {
			got, err := s.broker.Park(w.req)
			if err != nil {
				s.log.Warn("a tool call waits for no one", "tool", w.call.Name, "call", w.call.ID, "err", err)
				continue
			}
			parked = append(parked, parkedCall{got.ID, w.call})
		}
		s.mu.Lock()
		s.parked, s.unparking = parked, false
		s.mu.Unlock()
	}
	s.syncSuspended()
}

func (s *Session) parkRequests(calls []llm.Content) []parkRequest {
	out := make([]parkRequest, 0, len(calls))
	for _, c := range calls {
		call := tool.Call{ID: c.ID, Name: c.Name, Args: c.Arguments}
		switch c.Name {
		case todo.ToolName:
			continue
		case interaction.AskUserName:
			req, err := interaction.AskUserRequest(call)
			if err != nil {
				continue // the tool says what is wrong when it runs
			}
			out = append(out, parkRequest{req, call})
		default:
			out = append(out, parkRequest{s.gate.ApprovalRequest(call, interaction.ApprovalID(call.ID)), call})
		}
	}
	return out
}

// sameCalls reports whether cur are still waiting for want's calls.
func (s *Session) sameCalls(cur []parkedCall, want []parkRequest) bool {
	if len(cur) != len(want) {
		return false
	}
	for i := range cur {
		if cur[i].call.ID != want[i].call.ID || cur[i].call.Name != want[i].call.Name || string(cur[i].call.Args) != string(want[i].call.Args) ||
			!s.broker.Parked(cur[i].id) {
			return false
		}
	}
	return true
}

// cancelParked ends parked requests nobody will adopt.
func (s *Session) cancelParked(ps []parkedCall, reason string) {
	for _, p := range ps {
		_ = s.broker.CancelWith(p.id, reason) // an answered one is already resolved
		s.broker.Forget(p.id)
	}
}

// settleLocked ends the parked requests with reason and, with record,
// gives every call the conversation ends with a result saying it was not
// run, so the context stays valid. It reports whether there was anything
// to settle. The caller holds s.parkMu and sets the state afterwards.
func (s *Session) settleLocked(reason string, record bool) bool {
	s.mu.Lock()
	cur := s.parked
	s.parked, s.unparking = nil, true
	s.mu.Unlock()
	s.cancelParked(cur, reason)
	var calls []llm.Content
	if record {
		_, calls = agent.PendingToolCalls(s.agent.Messages())
		res := interaction.NotRunResult(reason)
		details, _ := json.Marshal(res.Details)
		for _, c := range calls {
			s.appendOutsideRun(&llm.Message{Role: llm.RoleToolResult, ToolCallID: c.ID, ToolName: c.Name,
				Content: res.Content, Details: details, IsError: true, Timestamp: time.Now().UnixMilli()})
		}
	}
	s.mu.Lock()
	s.unparking = false
	s.mu.Unlock()
	return len(cur) > 0 || len(calls) > 0
}

// takeParkedLocked hands the parked requests to the run starting: its
// calls ask under their ids. s.mu is held.
func (s *Session) takeParkedLocked() []parkedCall {
	ps := s.parked
	s.parked = nil
	s.runParked = make(map[string]string, len(ps))
	for _, p := range ps {
		s.runParked[p.call.ID] = p.id
	}
	return ps
}

// forget drops what is left of the requests a run took over and did not
// adopt (the run was aborted before their calls): nobody is to answer
// them any more.
func (s *Session) forget(ids map[string]string) {
	for _, id := range ids {
		if s.broker.Parked(id) {
			_ = s.broker.CancelWith(id, reasonAborted)
			s.broker.Forget(id)
		}
	}
}
