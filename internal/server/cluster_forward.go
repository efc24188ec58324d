package server

import (
	"context"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/pipeline"
)

// envelope is a command on its way between nodes (clusterCommand: its
// Origin and Sender stay on the node the client is connected to); the
// principal travels with it, so the owner checks what the client may see
// and runs the command as that client.
type envelope struct {
	Cmd  clusterCommand `json:"cmd"`
	Who  Principal      `json:"who"`
	From string         `json:"from"`
	Hops int            `json:"hops"`
	// Via is the node whose client sent the command, which told its
	// clients of it (From when empty): a command a draining node held
	// and passed on comes from that node, but was sent by Via's client.
	Via string `json:"via,omitempty"`
}

// reply is the owner's answer: the response, and the subscription the
// command's handler made for its client, which the client's node makes.
type reply struct {
	Resp clusterResponse `json:"resp"`
	Sub  *remoteSub      `json:"sub,omitempty"`
	// Seq is the session's last event when the owner answered: the
	// client's node hands the answer on once its feed of the session has
	// delivered that far, so a client reads a prompt's answer after the
	// run's events, as from one server.
	Seq uint64 `json:"seq,omitempty"`
}

type remoteSub struct {
	SessionID string `json:"sessionId"`
	After     uint64 `json:"after"`
}

// Remote is the Origin of a command that another node forwarded to the
// session's owner: who sent it, from which node. A face's handler that
// subscribes its client subscribes through it instead (Subscribe), and
// the client's own node makes the subscription once the answer is back.
type Remote struct {
	Who  Principal
	Node string

	mu  sync.Mutex
	sub *remoteSub
}

// Subscribe records that the command's client watches h from after (from
// now when nil) and answers as Server.Subscribe would: the stream keeps
// every event, so any cursor up to the last event resumes, unless it is
// further back than a replay reaches (tooFarBack).
func (r *Remote) Subscribe(h *Hosted, after *uint64) Subscribed {
	cur := h.sess.Seq()
	res := Subscribed{Seq: cur}
	from := cur
	if after != nil {
		if *after > cur || h.srv.tooFarBack(cur, *after) {
			res.TooOld = true
		} else {
			from, res.Resumed = *after, true
		}
	}
	r.mu.Lock()
	r.sub = &remoteSub{SessionID: h.id, After: from}
	r.mu.Unlock()
	return res
}

// SubscribeTarget is what a face's Origin offers so that a subscription
// made for a command answered by another node reaches the right client:
// its connection, its codec and the hold released once the response is
// queued.
type SubscribeTarget interface {
	SubscribeTarget() (*Client, Codec, *Hold)
}

// Submit routing.

// forwarder keeps the commands of one session that leave this node in
// the order they were submitted: one goroutine sends them, one after
// another, while their answers come back in any order.
type forwarder struct {
	id    string
	queue []forwardItem
}

type forwardItem struct {
	cmd     pipeline.Command
	who     Principal
	hops    int
	respond func(pipeline.Response)
	reply   func([]byte, error) // set when the command came from another node
	via     string              // with reply: the node whose client sent it
	// gone is when the command first found its node gone: until the
	// node's leases expire and its sessions are taken over, the command
	// waits for the new owner rather than fail.
	gone time.Time
	// announced is set once this node's clients were told the command
	// was accepted and started: a command routed again (its node gone)
	// is still one command to them.
	announced bool
}

// route decides where a command runs; false means here, now.
func (cs *clusterState) route(cmd pipeline.Command, respond func(pipeline.Response)) bool {
	if cmd.SessionID == "" {
		return false
	}
	if cs.hostsOrMakes(cmd.SessionID) {
		cs.runOrHold(forwardItem{cmd: cmd, who: principalOf(cmd.Origin), respond: respond})
		return true
	}
	return cs.enqueue(forwardItem{cmd: cmd, who: principalOf(cmd.Origin), respond: respond})
}

func principalOf(origin any) Principal {
	switch o := origin.(type) {
	case *Remote:
		return o.Who
	case Principal: // the REST face's commands carry their principal as it is
		return o
	case interface{ Principal() Principal }:
		return o.Principal()
	}
	return Principal{}
}

// hostsOrMakes reports whether session id is hosted here or being opened
// here (its id reserved). An id only announced (Expect) is not: the
// command announcing it may yet go to another node.
func (cs *clusterState) hostsOrMakes(id string) bool {
	s := cs.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, hosted := s.sessions[id]
	return hosted
}

func (cs *clusterState) enqueue(it forwardItem) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.enqueueLocked(it)
}

// enqueueLocked is enqueue with cs.mu held.
func (cs *clusterState) enqueueLocked(it forwardItem) bool {
	if cs.ctx.Err() != nil {
		return false
	}
	f := cs.forwarders[it.cmd.SessionID]
	if f != nil {
		f.queue = append(f.queue, it)
		return true
	}
	f = &forwarder{id: it.cmd.SessionID, queue: []forwardItem{it}}
	cs.forwarders[f.id] = f
	cs.wg.Add(1)
	go cs.runForwarder(f)
	return true
}

// runForwarder sends the session's queued commands in order and ends when
// the queue is empty.
func (cs *clusterState) runForwarder(f *forwarder) {
	defer cs.wg.Done()
	for {
		cs.mu.Lock()
		if len(f.queue) == 0 {
			delete(cs.forwarders, f.id)
			cs.idleLocked()
			cs.mu.Unlock()
			return
		}
		it := f.queue[0]
		f.queue = f.queue[1:]
		cs.mu.Unlock()
		cs.dispatch(it)
	}
}

// dispatch sends one command to the node that should run it, or runs it
// here.
func (cs *clusterState) dispatch(it forwardItem) {
	id := it.cmd.SessionID
	if cs.hostsOrMakes(id) {
		cs.runOrHold(it)
		return
	}
	dest, orphan, err := cs.destination(id, it.hops > 0)
	if err != nil {
		cs.fail(it, fault.Wrap(fault.Unavailable, err, "The cluster cannot tell which node runs session "+id+": "+err.Error()))
		return
	}
	if dest == cs.node.ID() || dest == "" {
		if orphan {
			// Take a session that lost its owner over before its command
			// runs: its records may only be written by the lease's holder.
			// (A new id is left to the command, a create, which a face
			// may have announced with Expect: looking it up here would
			// wait for that very command.)
			ctx, cancel := context.WithTimeout(cs.ctx, clusterTakeoverTimeout)
			_, err := cs.s.Session(ctx, id)
			var owner string
			var held bool
			if fault.CodeOf(err) == fault.Conflict && it.hops < clusterHops {
				// A node that watches the session took it over first
				// (checkNodes): the command goes there.
				owner, held, _ = cs.leaseHolder(ctx, id, true)
			}
			cancel()
			if held && owner != cs.node.ID() {
				cs.send(it, owner)
				return
			}
		}
		cs.runHere(it)
		return
	}
	if it.hops >= clusterHops {
		cs.fail(it, fault.Errorf(fault.Unavailable, "Session %s is moving between nodes; try again", id))
		return
	}
	cs.send(it, dest)
}
