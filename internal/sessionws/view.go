package sessionws

import (
	"slices"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
)

// view is what the face reads of the session it speaks for: the hosted
// session, or, on a cluster node that does not run it, a status tracked
// from the events this node's client is sent (cluster.go).
type view interface {
	Status() server.Status
	StatusRev() uint64
	TransitionAt(seq uint64) (server.Transition, bool)
	History() []server.Transition
	Interactions() []interaction.Request
	InteractionByID(id string) (interaction.Request, bool)
	Created() time.Time
}

// hostedView reads a session this node hosts.
type hostedView struct{ *server.Hosted }

func (v hostedView) Interactions() []interaction.Request { return v.Session().Interactions() }

func (v hostedView) InteractionByID(id string) (interaction.Request, bool) {
	return v.Session().InteractionByID(id)
}

// trackedView is a session another node runs, as the events after the
// owner's reading (seed) leave it: the status (server.StatusTracker) and
// the questions still open.
type trackedView struct {
	*server.StatusTracker
	created time.Time

	mu      sync.Mutex
	seq     uint64 // the last event taken in
	pending []interaction.Request
}

func newTrackedView(s *seed) *trackedView {
	return &trackedView{StatusTracker: server.NewStatusTracker(s.Status, s.History), created: s.Created,
		seq: s.Status.Seq, pending: s.Pending}
}

// observe takes in ev, once: an event at or before the last one taken in
// (the seed's, or one replayed again when the client moves onto a
// session this node took over) changes nothing.
func (v *trackedView) observe(ev session.Event) {
	v.mu.Lock()
	if ev.Seq <= v.seq {
		v.mu.Unlock()
		return
	}
	v.seq = ev.Seq
	if ev.Interaction != nil {
		id := ev.Interaction.Request.ID
		switch ev.Type {
		case session.EventInteractionRequested:
			if !slices.ContainsFunc(v.pending, func(r interaction.Request) bool { return r.ID == id }) {
				v.pending = append(v.pending, ev.Interaction.Request)
			}
		case session.EventInteractionResolved:
			v.pending = slices.DeleteFunc(v.pending, func(r interaction.Request) bool { return r.ID == id })
		}
	}
	v.mu.Unlock()
	v.StatusTracker.Observe(ev)
}

func (v *trackedView) Interactions() []interaction.Request {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.pending)
}

func (v *trackedView) InteractionByID(id string) (interaction.Request, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	i := slices.IndexFunc(v.pending, func(r interaction.Request) bool { return r.ID == id })
	if i < 0 {
		return interaction.Request{}, false
	}
	return v.pending[i], true
}

func (v *trackedView) Created() time.Time { return v.created }
