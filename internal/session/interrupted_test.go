package session

import (
	"testing"

	"github.com/agentd-dev/agentd/internal/agent"
)

// Whether the last event a dead owner published leaves a run in progress
// (the new owner then ends it for the watchers).
func TestRunInProgress(t *testing.T) {
	agentEv := func(typ agent.EventType) Event {
		return Event{Type: EventType(typ), Agent: &agent.Event{Type: typ}}
	}
	for _, tc := range []struct {
		name string
		ev   Event
		want bool
	}{
		{"running", Event{Type: EventStateChanged, State: StateRunning}, true},
		{"suspended", Event{Type: EventStateChanged, State: StateSuspended}, true},
		{"idle after a run", Event{Type: EventStateChanged, State: StateIdle, Outcome: OutcomeCompleted}, false},
		{"agent_start", agentEv(agent.EventAgentStart), true},
		{"tool output", agentEv(agent.EventToolExecutionUpdate), true},
		{"a model delta", agentEv(agent.EventMessageUpdate), true},
		{"agent_end", agentEv(agent.EventAgentEnd), false},
		{"auto retry", Event{Type: EventAutoRetryStart}, true},
		{"compaction", Event{Type: EventCompactionStart}, true},
		{"a name", Event{Type: EventSessionInfoChanged, Name: "x"}, false},
		{"a model", Event{Type: EventModelChanged}, false},
	} {
		if got := RunInProgress(tc.ev); got != tc.want {
			t.Errorf("%s: RunInProgress = %v, want %v", tc.name, got, tc.want)
		}
	}
}
