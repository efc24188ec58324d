package sessionws

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
)

// watch is one session as this face's clients see it: the codec their
// subscriptions share (each event is encoded once, whatever the number of
// clients), and the goroutine that sends progress_update at most once per
// interval, coalesced to the latest.
type watch struct {
	f  *Face
	h  *server.Hosted // nil for a session another node runs
	v  view
	id string
	// away is set for a session another node runs: the watch of one
	// connection, fed from the cluster's stream (cluster.go).
	away *awayWatch

	refs     int // subscribed connections; under f.mu
	stop     chan struct{}
	stopOnce sync.Once
	kick     chan struct{}

	lastRev atomic.Uint64 // status revision of the last progress sent

	mu sync.Mutex
	// lastSeq is the last live event encoded: the seq a progress_update
	// published now is ordered after.
	lastSeq uint64
	// resolved remembers how recent questions ended, to tell a late
	// answer what happened.
	resolved      map[string]interaction.ResolvedBy
	resolvedOrder []string
	conns         map[*conn]struct{}
	// deleted is set once gone has told conns the session was deleted: a
	// connection that comes later must be told by whoever adds it.
	deleted bool
}

func newWatch(f *Face, h *server.Hosted) *watch {
	w := &watch{f: f, h: h, v: hostedView{h}, id: h.ID(), stop: make(chan struct{}), kick: make(chan struct{}, 1),
		resolved: map[string]interaction.ResolvedBy{}, conns: map[*conn]struct{}{}}
	w.lastSeq = h.Session().Seq()
	w.lastRev.Store(h.StatusRev())
	return w
}

// maxResolved bounds the questions a watch remembers.
const maxResolved = 256

// Encode implements server.Codec: the session events this face has a
// message for. For a live event it runs on the session's emitting
// goroutine, after the layer's status took the event in.
func (w *watch) Encode(_ string, ev session.Event) server.Frame {
	if w.away != nil {
		w.away.view.observe(ev)
	}
	w.mu.Lock()
	live := ev.Seq > w.lastSeq
	if live {
		w.lastSeq = ev.Seq
	}
	w.mu.Unlock()
	if live && w.v.StatusRev() != w.lastRev.Load() {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	now := ev.Time
	if now.IsZero() {
		now = w.f.opt.Now()
	}
	switch ev.Type {
	case session.EventStateChanged:
		return w.transition(ev, now)
	case session.EventInteractionRequested:
		if ev.Interaction == nil {
			return server.Frame{}
		}
		// Replayed or live, only a question still waiting is asked.
		req, ok := w.v.InteractionByID(ev.Interaction.Request.ID)
		if !ok {
			return server.Frame{}
		}
		return server.Frame{Data: encode(w.inputRequired(req, ev.Seq, w.f.opt.Now()))}
	case session.EventInteractionResolved:
		if live && ev.Interaction != nil && ev.Interaction.Resolution != nil {
			w.remember(ev.Interaction.Request.ID, ev.Interaction.Resolution.By)
		}
	case session.EventAutoRetryStart:
		// Live, the status holds the typed error being retried; a
		// replay has the event's text.
		e := &server.RunError{Message: ev.ErrorMessage}
		if live {
			if st := w.v.Status(); st.Run != nil && st.Run.Error != nil {
				e = st.Run.Error
			}
		}
		e.Retrying, e.Attempt, e.MaxAttempts, e.Delay = true, ev.Attempt, ev.MaxAttempts, time.Duration(ev.DelayMs)*time.Millisecond
		return server.Frame{Data: encode(sessionError(w.id, ev.Seq, now, e, w.f.opt.KeyHint))}
	case session.EventCompactionEnd:
		if ev.ErrorMessage != "" && !ev.Aborted {
			return server.Frame{Data: encode(compactionError(w.id, ev.Seq, now, ev.ErrorMessage, ev.WillRetry))}
		}
	}
	return server.Frame{}
}

// transition is a state change's messages: status_change, preceded by
// error for a failed run and followed by completed for a run's end.
func (w *watch) transition(ev session.Event, now time.Time) server.Frame {
	tr, ok := w.v.TransitionAt(ev.Seq)
	if !ok {
		// Older than the history kept: the event alone.
		tr = server.Transition{Seq: ev.Seq, Time: now, Old: string(ev.Previous), New: string(ev.State)}
		if ev.State == session.StateIdle && ev.Outcome != "" {
			tr.New = string(ev.Outcome)
		}
		if tr.Old == "" {
			tr.Old = server.StateIdle
		}
	}
	sc := encode(&statusChangeMsg{Type: "status_change", SessionID: w.id, Timestamp: stamp(now), Seq: ev.Seq,
		OldState: tr.Old, NewState: tr.New, ProgressPercentage: tr.Percent, Reason: reasonOr(tr.Reason, tr.New), Version: tr.Version})
	if !server.Terminal(tr.New) {
		return server.Frame{Data: sc}
	}
	done := encode(completedOf(w.id, ev.Seq, now, tr))
	if tr.New == server.StateFailed && tr.Run != nil {
		e := tr.Run.Error
		if e == nil {
			e = &server.RunError{Message: "The run failed"}
		}
		return server.Frame{Data: encode(sessionError(w.id, ev.Seq, now, e, w.f.opt.KeyHint)), More: [][]byte{sc, done}}
	}
	return server.Frame{Data: sc, More: [][]byte{done}}
}

func reasonOr(reason, state string) string {
	if reason != "" {
		return reason
	}
	return "The session is " + state
}

func (w *watch) remember(id string, by interaction.ResolvedBy) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.resolved[id]; !ok {
		w.resolvedOrder = append(w.resolvedOrder, id)
	}
	w.resolved[id] = by
	if len(w.resolvedOrder) > maxResolved {
		delete(w.resolved, w.resolvedOrder[0])
		w.resolvedOrder = w.resolvedOrder[1:]
	}
}

func (w *watch) resolution(id string) (interaction.ResolvedBy, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	by, ok := w.resolved[id]
	return by, ok
}

// add makes c one of the watch's connections; false means the session
// was deleted and its watchers told already, so c was not added.
func (w *watch) add(c *conn) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.deleted {
		return false
	}
	w.conns[c] = struct{}{}
	return true
}

func (w *watch) remove(c *conn) {
	w.mu.Lock()
	delete(w.conns, c)
	w.mu.Unlock()
}

// loop sends the coalesced progress_update: when the status changed, at
// most once per interval, the latest reading.
func (w *watch) loop() {
	interval := w.f.opt.ProgressInterval
	var last time.Time
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var gone <-chan struct{} // never, for a session another node runs
	if w.h != nil {
		gone = w.h.Gone()
	}
	for {
		select {
		case <-w.stop:
			return
		case <-gone:
			w.gone()
			return
		case <-w.kick:
		}
		if wait := interval - time.Since(last); wait > 0 && !last.IsZero() {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-w.stop:
				return
			case <-gone:
				w.gone()
				return
			case <-timer.C:
			}
		}
		last = time.Now()
		w.publishProgress()
	}
}

func (w *watch) publishProgress() {
	rev := w.v.StatusRev()
	h := w.h
	if w.away != nil {
		// Where its connection's subscription is now: this node's feed
		// of the session, or the session once this node took it over.
		if h = w.f.srv.Watched(w.away.c.client, w.id); h == nil {
			return
		}
	}
	w.f.srv.Publish(h, w, func() server.Frame {
		w.mu.Lock()
		seq := w.lastSeq
		w.mu.Unlock()
		return server.Frame{Data: encode(w.progress(seq, w.f.opt.Now())), Key: server.FrameKey{Name: "progress"}, Replace: true}
	})
	w.lastRev.Store(rev)
}

// gone tells the watchers of a deleted session, and closes them with
// 4004; a session closed with the server needs nothing (the server
// closes its clients).
func (w *watch) gone() {
	if !w.h.Deleted() {
		return
	}
	w.mu.Lock()
	w.deleted = true
	conns := make([]*conn, 0, len(w.conns))
	for c := range w.conns {
		conns = append(conns, c)
	}
	w.mu.Unlock()
	for _, c := range conns {
		c.fail(closeNotFound, protocolError("session_not_found", "Session "+w.id+" was deleted", nil, w.f.opt.Now()))
	}
}
