package session

import "github.com/agentd-dev/agentd/internal/agent"

// EndInterrupted ends, for the session's clients, a run that another
// process began and never ended: a cluster node that took the session
// over from a node that died mid-run. Its clients saw the run start and
// stream on the dead node; without this they would wait for its end for
// ever. It emits agent_end (with no messages: the conversation as it was
// stored is the session's) and the move to idle with outcome failed, the
// events every face ends a run with. It does nothing while a run of this
// session runs here, or when the session waits on a person (the question
// the dead node asked is asked again, and the run goes on once it is
// answered); it reports whether it ended a run.
func (s *Session) EndInterrupted() bool {
	s.mu.Lock()
	busy := s.runDone != nil || s.closed
	s.mu.Unlock()
	if busy || len(s.broker.Pending()) > 0 {
		return false
	}
	s.emit(Event{Type: EventType(agent.EventAgentEnd), Agent: &agent.Event{Type: agent.EventAgentEnd}})
	s.setState(StateIdle, OutcomeFailed)
	return true
}

// RunInProgress reports whether ev, the last event a session's previous
// owner published, leaves a run in progress: an agent event other than
// agent_end, or a state other than idle. Events a session emits whether
// or not it runs (a name, a model, a todo list) say nothing either way
// and count as none.
func RunInProgress(ev Event) bool {
	switch {
	case ev.Type == EventStateChanged:
		return ev.State != StateIdle
	case ev.Agent != nil:
		return ev.Agent.Type != agent.EventAgentEnd
	case ev.Type == EventAutoRetryStart, ev.Type == EventCompactionStart:
		return true
	}
	return false
}
