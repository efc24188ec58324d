package server

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/session"
)

// A node that stops with SIGTERM hands its sessions over (handOver).
// For each session it hosts, from the moment the handover begins:
//
//   - Commands already in the session's lane run here, first: the
//     handover waits for them in the lane itself (a pipeline barrier),
//     then for the run they left (within the drain time).
//   - A new command that would wait in the lane (a prompt, most
//     commands) is not put there: it is held, and once the session is
//     unloaded and its lease given back it is passed on to the node
//     that takes the session over, in the order it came, as a command
//     for a session this node does not run. So a prompt that reaches
//     the node just after a run ended is run once, by the next owner;
//     before, it could start a run here that the unload then cut off.
//   - A command that skips the lane (abort, steer, an approval's
//     answer) runs here while the session has a run in progress, whose
//     run it acts on; the unload waits for it. With no run in progress
//     it is held like the others (it could start one).
//   - A run waiting for a person is not waited for: the session is
//     unloaded as it is, its question is asked again by the next owner
//     (as after a crash), and the command whose run it was (a
//     pi-server prompt) answers interrupted, as after a crash, not with
//     the outcome cancelled that closing the session gives the run.

// handing is a session this node is handing over.
type handing struct {
	h *Hosted
	// reached is closed when the handover's barrier passed the
	// session's lane: the commands accepted before it have finished.
	reached chan struct{}
	// changed wakes the handover when a command it waits for finished.
	changed chan struct{}

	// guarded by clusterState.mu
	held    []forwardItem // commands kept from the lane, in order
	active  int           // commands let past that have not answered
	closing bool          // deciding to unload: every command is held
	done    bool          // unloaded: commands go to the new owner
}

// runMark is a handler of a session's command running here; cut says
// the session was handed over under it with its run in progress.
type runMark struct{ cut bool }

// handOver gives this node's sessions to other nodes before it stops:
// it leaves the cluster's placement, lets each session's commands and
// run end (within ctx), then unloads it and releases its lease, so the
// next command for it, from any node, is taken over by another node at
// once. Commands arriving meanwhile are held and then passed on (see
// above).
func (cs *clusterState) handOver(ctx context.Context) {
	cs.mu.Lock()
	cs.draining = true
	cs.nodesAt = time.Time{}
	cs.mu.Unlock()
	if cs.member != nil {
		lctx, cancel := context.WithTimeout(ctx, clusterReadTimeout)
		if err := cs.member.Leave(lctx); err != nil {
			cs.s.log.Warn("cluster: leaving", "err", err)
		}
		cancel()
	}
	sessions := cs.s.Sessions()
	hds := make([]*handing, 0, len(sessions))
	// No command is on its way into a lane while the barriers go in.
	cs.laneMu.Lock()
	cs.mu.Lock()
	for _, h := range sessions {
		hd := &handing{h: h, reached: make(chan struct{}), changed: make(chan struct{}, 1)}
		cs.handing[h.id] = hd
		hds = append(hds, hd)
	}
	cs.mu.Unlock()
	for _, hd := range hds {
		if cs.s.pipe == nil || !cs.s.pipe.Barrier(hd.h.id, func() { close(hd.reached) }) {
			close(hd.reached)
		}
	}
	cs.laneMu.Unlock()
	cs.s.log.Info("cluster: handing sessions over", "sessions", len(hds))
	// Each session goes as soon as it can: one with a long run does not
	// keep the others' held commands waiting.
	var wg sync.WaitGroup
	for _, hd := range hds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs.handOne(ctx, hd)
		}()
	}
	wg.Wait()
}

// handOne hands one session over: it waits until the session can go,
// unloads it, and passes the commands held for it on.
func (cs *clusterState) handOne(ctx context.Context, hd *handing) {
	h := hd.h
	cs.settleHanding(ctx, hd)
	if err := cs.s.unload(h, false); err != nil {
		cs.s.log.Warn("cluster: handing a session over", "session", h.id, "err", err)
	}
	n := cs.passHeld(ctx, hd)
	if n > 0 {
		cs.s.log.Info("cluster: passed the commands held during a handover on", "session", h.id, "commands", n)
	}
}

// passHeld passes the commands held for hd's session on to its next
// node, one after another, each once the one before it was answered
// (within ctx): commands of two clients, even of two nodes, run in the
// order this node got them, as they would have here. Commands arriving
// meanwhile join the end of the line. It returns how many it passed.
func (cs *clusterState) passHeld(ctx context.Context, hd *handing) int {
	n := 0
	for {
		cs.mu.Lock()
		if len(hd.held) == 0 {
			hd.done = true
			cs.mu.Unlock()
			return n
		}
		it := hd.held[0]
		hd.held = hd.held[1:]
		cs.mu.Unlock()
		n++
		// Held, not passed on: the command starts its way between the
		// nodes afresh from here, where the session was.
		it.hops = 0
		answered := make(chan struct{})
		if it.reply != nil {
			reply := it.reply
			it.reply = func(b []byte, err error) {
				reply(b, err)
				close(answered)
			}
		} else {
			respond := it.respond
			it.respond = func(r pipeline.Response) {
				respond(r)
				close(answered)
			}
		}
		if !cs.enqueue(it) {
			cs.fail(it, fault.New(fault.ShuttingDown, "Server is shutting down"))
			continue
		}
		select {
		case <-answered:
		case <-ctx.Done():
			// The drain time is over: the rest go at once, in order.
		}
	}
}

// settle waits until h could be handed over, with nothing in its lane:
// its run ended, or it waits for a person, or ctx ended.
func (cs *clusterState) settle(ctx context.Context, h *Hosted) {
	hd := &handing{h: h, reached: make(chan struct{}), changed: make(chan struct{}, 1)}
	close(hd.reached)
	cs.settleHanding(ctx, hd)
}

// settleHanding waits until the session of hd can be handed over: the
// commands in its lane before the handover and those let past since
// have finished, and its run ended or waits for a person (its question
// is asked again by the next owner); or ctx ended. From then on every
// command for it is held (closing), and a run cut off marks the command
// it belongs to interrupted. A question comes with an event of the
// session, which ends a wait for a look again; a run's end need not (a
// navigation ends after its last event), so the wait is the session's
// own too.
func (cs *clusterState) settleHanding(ctx context.Context, hd *handing) {
	h := hd.h
	reached := hd.reached
	for {
		wctx, cancel := context.WithCancel(ctx)
		// Before the check, so no event is missed.
		unsub := h.sess.Subscribe(func(session.Event) { cancel() })
		cs.mu.Lock()
		passed := isClosed(hd.reached)
		running := h.sess.Running()
		waiting := len(h.sess.Interactions()) > 0
		ready := ctx.Err() != nil || (hd.active == 0 && (waiting || (passed && !running)))
		if ready {
			hd.closing = true
			if running {
				// The run is cut off here and goes on (or ends) on the
				// next owner: the command whose run it was answers
				// interrupted, as after a crash.
				for m := range cs.runs[h.id] {
					m.cut = true
				}
			}
		}
		cs.mu.Unlock()
		if passed {
			reached = nil
		}
		var ran chan struct{}
		if !ready {
			if running {
				ran = make(chan struct{})
				go func() {
					defer close(ran)
					_ = h.sess.Wait(wctx)
					cancel()
				}()
			}
			select {
			case <-wctx.Done():
			case <-reached:
			case <-hd.changed:
			}
		}
		unsub()
		cancel()
		if ran != nil {
			<-ran
		}
		if ready {
			return
		}
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// runOrHold runs a command for a session hosted here through this
// node's pipeline, unless the session is being handed over and the
// command must wait for its next owner (hold).
func (cs *clusterState) runOrHold(it forwardItem) {
	cs.laneMu.RLock()
	defer cs.laneMu.RUnlock()
	if cs.hold(&it) {
		return
	}
	cs.runHere(it)
}

// hold keeps it for the session's next owner when the session is being
// handed over, or passes it on when that is done; a command let past
// during a handover is counted until it is answered.
func (cs *clusterState) hold(it *forwardItem) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	hd := cs.handing[it.cmd.SessionID]
	if hd == nil {
		return false
	}
	if hd.done {
		// Unloaded since the caller looked: the command goes where the
		// session went, after those held before it.
		return cs.enqueueLocked(*it)
	}
	if hd.closing || (cs.s.pipe != nil && cs.s.pipe.Laned(it.cmd)) || !hd.h.sess.Running() {
		hd.held = append(hd.held, *it)
		cs.s.log.Info("cluster: holding a command for the session's next node", "session", it.cmd.SessionID, "command", it.cmd.Type, "id", it.cmd.ID)
		return true
	}
	hd.active++
	finished := func() {
		cs.mu.Lock()
		hd.active--
		cs.mu.Unlock()
		select {
		case hd.changed <- struct{}{}:
		default:
		}
	}
	if it.reply != nil {
		reply := it.reply
		it.reply = func(b []byte, err error) {
			reply(b, err)
			finished()
		}
	} else {
		respond := it.respond
		it.respond = func(r pipeline.Response) {
			respond(r)
			finished()
		}
	}
	return false
}

// wrapHandlers makes every handler of a session's command answer
// interrupted when the session was handed over under it with its run in
// progress (see handOne).
func (cs *clusterState) wrapHandlers(reg pipeline.Registry) {
	for name, h := range reg {
		run := h.Run
		if run == nil {
			continue
		}
		h.Run = func(ctx context.Context, cmd pipeline.Command) (json.RawMessage, error) {
			if cmd.SessionID == "" {
				return run(ctx, cmd)
			}
			m := &runMark{}
			cs.mu.Lock()
			marks := cs.runs[cmd.SessionID]
			if marks == nil {
				marks = map[*runMark]struct{}{}
				cs.runs[cmd.SessionID] = marks
			}
			marks[m] = struct{}{}
			cs.mu.Unlock()
			data, err := run(ctx, cmd)
			cs.mu.Lock()
			delete(marks, m)
			if len(marks) == 0 {
				delete(cs.runs, cmd.SessionID)
			}
			cut := m.cut
			cs.mu.Unlock()
			if cut {
				return nil, fault.Errorf(fault.Interrupted, "Command interrupted: node %s stopped and handed session %s over while its run was in progress; it was not run again (a question the run asked is asked again by the session's next node)", cs.node.ID(), cmd.SessionID)
			}
			return data, err
		}
		reg[name] = h
	}
}
