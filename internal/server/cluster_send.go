package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentd-dev/agentd/internal/cluster"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/pipeline"
)

// inflight is a command sent to another node and not answered yet.
type inflight struct {
	node   string
	cancel context.CancelCauseFunc
}

// answered forgets a command in flight that ended.
func (cs *clusterState) answered(fl *inflight) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	delete(cs.inflight, fl)
	cs.idleLocked()
}

// idleLocked tells a wait for the commands passed on (awaitInflight)
// when none is queued or in flight any more; cs.mu is held.
func (cs *clusterState) idleLocked() {
	if len(cs.inflight) == 0 && len(cs.forwarders) == 0 && cs.noInflight != nil {
		close(cs.noInflight)
		cs.noInflight = nil
	}
}

// errNodeStopped ends the commands in flight on a node that left.
var errNodeStopped = errors.New("the node running it stopped")

// send forwards a command to node dest and answers it when dest does.
func (cs *clusterState) send(it forwardItem, dest string) {
	env := envelope{Cmd: toClusterCommand(it.cmd), Who: it.who, From: cs.node.ID(), Hops: it.hops + 1, Via: it.via}
	if it.reply == nil {
		env.Via = cs.node.ID()
	}
	payload, err := json.Marshal(env)
	if err != nil {
		cs.fail(it, fault.Wrap(fault.Internal, err, "The command could not be sent to the session's node"))
		return
	}
	ctx, cancel := context.WithCancelCause(cs.ctx)
	ctx, cancelT := context.WithTimeout(ctx, clusterForwardTimeout)
	fl := &inflight{node: dest, cancel: cancel}
	cs.mu.Lock()
	cs.inflight[fl] = struct{}{}
	cs.mu.Unlock()
	cs.forwarded.Add(1)
	if it.reply == nil && !it.announced {
		cs.lifecycle(it.cmd, pipeline.CommandAccepted, nil)
		it.announced = true
	}
	cs.wg.Add(1)
	cs.node.SendNode(ctx, dest, payload, func(out []byte, err error) {
		defer cs.wg.Done()
		cause := context.Cause(ctx)
		cancelT()
		cancel(nil)
		cs.answered(fl)
		var gone *cluster.NodeGoneError
		switch {
		case errors.As(err, &gone), err != nil && errors.Is(cause, errNodeStopped) && cs.safeAgain(it.cmd):
			// The node is gone and never got the command, or got one that
			// changes nothing a second run would change again (a read, an
			// answer to a question the new owner asks again): route it
			// again, once the node's lease on the session has expired and
			// another node can take it over (a crashed node's lease
			// outlives it by up to a TTL).
			cs.forgetMembers()
			ttl := cs.node.LeaseTTL()
			if it.gone.IsZero() {
				it.gone = time.Now()
			}
			if time.Since(it.gone) > 2*ttl {
				cs.fail(it, fault.Errorf(fault.Unavailable, "Node %s, which ran session %s, is gone and no node has taken the session over yet; try again", dest, it.cmd.SessionID))
				return
			}
			select {
			case <-time.After(ttl / 4):
			case <-cs.ctx.Done():
			}
			if !cs.enqueue(it) {
				cs.fail(it, fault.New(fault.ShuttingDown, "Server is shutting down"))
			}
			return
		case err != nil && errors.Is(cause, errNodeStopped):
			cs.fail(it, fault.Errorf(fault.Interrupted, "Command interrupted: node %s, which was running it, stopped; it was not run again", dest))
			return
		case err != nil && cs.ctx.Err() != nil:
			cs.fail(it, fault.New(fault.ShuttingDown, "Server is shutting down"))
			return
		case err != nil:
			cs.fail(it, fault.Wrap(fault.Unavailable, err, fmt.Sprintf("Node %s, which runs session %s, did not answer: %v", dest, it.cmd.SessionID, err)))
			return
		}
		if it.reply != nil {
			it.reply(out, nil) // passing a command on: the answer goes back as it came
			return
		}
		var r reply
		if err := json.Unmarshal(out, &r); err != nil {
			cs.fail(it, fault.Wrap(fault.Internal, err, "The session's node sent an answer that could not be read"))
			return
		}
		if r.Sub != nil {
			if t, ok := it.cmd.Origin.(SubscribeTarget); ok {
				if c, codec, hold := t.SubscribeTarget(); c != nil {
					after := r.Sub.After
					cs.subscribeRemote(c, r.Sub.SessionID, codec, &after, hold)
				}
			}
		}
		h := cs.feedHosted(it.cmd.SessionID)
		if r.Seq == 0 || h == nil || h.feed.delivered(r.Seq) {
			cs.finish(it, r.Resp.response())
			return
		}
		// This node's clients watch the session through its feed, which
		// has not delivered the events the answer follows yet: the answer
		// waits for them (never blocking other answers), within a bound.
		cs.wg.Add(1)
		go func() {
			defer cs.wg.Done()
			if late, got := h.feed.catchUp(cs.ctx, r.Seq, h.feed.follow.Done()); late {
				cs.s.log.Warn("cluster: an answer's events did not arrive through the stream in time", "session", it.cmd.SessionID, "command", it.cmd.Type, "want", r.Seq, "delivered", got)
			}
			cs.finish(it, r.Resp.response())
		}()
	})
}

// safeAgain reports whether cmd may be run again after the node it was
// sent to died without answering: one that does not mutate the session
// (pipeline.Handler.Mutating) leaves nothing a second run would repeat.
func (cs *clusterState) safeAgain(cmd pipeline.Command) bool {
	if cs.s.pipe == nil {
		return false
	}
	h, ok := cs.s.pipe.Handler(cmd.Type)
	return ok && !h.Mutating
}

func (cs *clusterState) fail(it forwardItem, e *fault.Error) {
	cs.finish(it, pipeline.Response{ID: it.cmd.ID, Command: it.cmd.Type, Err: e})
}

// finish answers a command that was routed: to its client's face, or back
// to the node it came from.
func (cs *clusterState) finish(it forwardItem, r pipeline.Response) {
	if it.reply != nil {
		b, err := json.Marshal(reply{Resp: toClusterResponse(r)})
		it.reply(b, err)
		return
	}
	r.Success = r.Err == nil
	cs.lifecycle(it.cmd, pipeline.CommandFinished, &r)
	if r.Err == nil || r.Err.Code != fault.ShuttingDown {
		cs.s.executed.Add(1)
	}
	it.respond(r)
}

// lifecycle tells this node's clients about a command that runs on
// another node, as the pipeline would if it ran here; the owner's clients
// learn of it from the owner's pipeline.
func (cs *clusterState) lifecycle(cmd pipeline.Command, typ pipeline.EventType, r *pipeline.Response) {
	ev := pipeline.Event{Type: typ, CommandID: cmd.ID, Command: cmd.Type, SessionID: cmd.SessionID,
		DependsOn: cmd.DependsOn, IfSessionVersion: cmd.IfSessionVersion, IdempotencyKey: cmd.IdempotencyKey,
		Lane: "session:" + cmd.SessionID, Origin: cmd.Origin}
	if ev.DependsOn == nil {
		ev.DependsOn = []string{}
	}
	if r != nil {
		ev.Success, ev.Err, ev.Replayed, ev.TimedOut, ev.SessionVersion = r.Success, r.Err, r.Replayed, r.TimedOut, r.SessionVersion
	}
	cs.s.emitLifecycle(ev)
	if typ == pipeline.CommandAccepted {
		ev.Type = pipeline.CommandStarted
		cs.s.emitLifecycle(ev)
	}
}

// serveNode answers a command another node sent here.
func (cs *clusterState) serveNode(_ context.Context, payload []byte, answer func([]byte, error)) {
	var env envelope
	if err := json.Unmarshal(payload, &env); err != nil {
		answer(nil, fmt.Errorf("unreadable command: %w", err))
		return
	}
	cs.received.Add(1)
	via := env.Via
	if via == "" {
		via = env.From
	}
	it := forwardItem{cmd: env.Cmd.command(), who: env.Who, hops: env.Hops, reply: answer, via: via}
	it.cmd.Origin = &Remote{Who: env.Who, Node: via}
	if cs.hostsOrMakes(it.cmd.SessionID) {
		cs.runOrHold(it)
		return
	}
	// Not hosted here: the lease may have moved, or the session is new or
	// unowned; decide in the session's order with the local commands.
	if !cs.enqueue(it) {
		cs.fail(it, fault.New(fault.ShuttingDown, "Server is shutting down"))
	}
}

// runHere puts a routed command through this node's pipeline.
func (cs *clusterState) runHere(it forwardItem) {
	if it.reply == nil {
		// Announced when it was first passed on: the pipeline's own
		// command_accepted and command_started are not told again.
		it.cmd.Announced = it.announced
		cs.s.submitLocal(it.cmd, it.respond)
		return
	}
	// The face's handler looks the session up for r.Who (SessionFor), as
	// for a client of this node.
	r := it.cmd.Origin.(*Remote)
	cs.s.submitLocal(it.cmd, func(resp pipeline.Response) {
		r.mu.Lock()
		sub := r.sub
		r.mu.Unlock()
		var seq uint64
		cs.s.mu.RLock()
		h := cs.s.sessions[it.cmd.SessionID]
		cs.s.mu.RUnlock()
		if h != nil {
			// The last event, if there is one since the session opened
			// here: a session taken over starts its seq above the last one
			// published, and no event carries that seq for a feed to reach.
			if last := h.sess.Seq(); last > 0 {
				if evs, ok := h.sess.EventsSince(last - 1); ok && len(evs) > 0 {
					seq = last
				}
			}
		}
		b, err := json.Marshal(reply{Resp: toClusterResponse(resp), Sub: sub, Seq: seq})
		it.reply(b, err)
	})
}
