package server

import (
	"time"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/tool"
)

// outputEvery is how often a running call's output goes into the
// cluster's stream at most. The session's log keeps tool updates without
// their output (a bash call sends its whole output so far ten times a
// second), so the publisher puts the latest output back into the newest
// update of each running call; at most once a second per call, so a long
// chatty command adds at most its output cap (50 KB) a second to a
// stream that keeps events for as long as the operator says.
const outputEvery = time.Second

// toolOutputs remembers when each running call's output last went out.
type toolOutputs map[string]time.Time

// attach puts the latest output of the running calls in progress into
// evs, the events about to be published: into the update that carried it
// (the call's newest), when that update is in evs and the call's output
// did not go out in the last outputEvery. Every other update goes out as
// the log keeps it, with an empty result: the nodes that follow the
// stream give it the last output they saw of its call (lastOutputs), so
// a client showing each update's output as the output so far does not
// see it blanked between two that carry it, and a node of the previous
// version reads it as it always did. Events are copied, never changed in
// place (evs shares its agent events with the session's log).
func (o toolOutputs) attach(evs []session.Event, progress []session.ToolProgress, now time.Time) {
	for _, ev := range evs {
		if a := ev.Agent; a != nil && a.Type == agent.EventToolExecutionEnd {
			delete(o, a.ToolCallID)
		}
	}
	if len(progress) == 0 {
		return
	}
	newest := make(map[uint64]session.ToolProgress, len(progress))
	for _, p := range progress {
		newest[p.Seq] = p
	}
	for i, ev := range evs {
		a := ev.Agent
		if a == nil || a.Type != agent.EventToolExecutionUpdate {
			continue
		}
		p, ok := newest[ev.Seq]
		if !ok || p.ToolCallID != a.ToolCallID {
			continue
		}
		if at, sent := o[p.ToolCallID]; sent && now.Sub(at) < outputEvery {
			continue
		}
		// Only output starts the second: a call's opening update has
		// none (bash sends it before the command prints), and counted,
		// it held back the first line printed in the second after it; a
		// command that then ran quietly (echo; sleep) was shown to other
		// nodes' clients as empty updates until it ended.
		if p.Partial != nil && (len(p.Partial.Content) > 0 || p.Partial.Details != nil) {
			o[p.ToolCallID] = now
		}
		c := *a
		c.Partial = p.Partial
		evs[i].Agent = &c
	}
}

// lastOutputs is what a node following a session from the stream keeps
// of its running calls: the last output that came with an update, by
// call. Only the follow's callback uses it.
type lastOutputs map[string]*tool.Result

// fill gives an update that came without output (see attach) the last
// output of its call, and forgets a call when it ends. An update's output
// is the whole output so far, which never goes back to nothing, so an
// empty one is one without. ev is a decoded copy of the stream's event,
// the caller's own.
func (l lastOutputs) fill(ev *session.Event) {
	a := ev.Agent
	if a == nil {
		return
	}
	switch a.Type {
	case agent.EventToolExecutionUpdate:
		if p := a.Partial; p != nil && (len(p.Content) > 0 || p.Details != nil) {
			l[a.ToolCallID] = p
		} else if r, ok := l[a.ToolCallID]; ok {
			a.Partial = r
		}
	case agent.EventToolExecutionEnd:
		delete(l, a.ToolCallID)
	case agent.EventAgentEnd:
		clear(l)
	}
}
