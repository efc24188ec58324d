package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd-dev/agentd/internal/cluster"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// A server with Config.Cluster is one node of several that look like one
// server to every client. What it adds, once for every face:
//
//   - Ownership. A session is hosted by the node holding its lease. Opening
//     one (create, load, reload) acquires the lease, or takes over one
//     whose owner's lease expired; the owner publishes every logged event
//     to the cluster's stream after it has its seq, and stops hosting the
//     session the moment its lease ends.
//   - Routing. Submit sends a command for a session this node does not
//     host to the node that does (its lease names it), as a request to
//     that node; the answer comes back as the pipeline's Response, as if
//     the command had run here. A session nobody owns goes to its home
//     node: the live node that rendezvous hashing of the session id picks
//     (see PlaceSession), which takes it over. A new session is created
//     on the node the command was sent to (with SpreadSessions, at its
//     home). A node that another node passed such a command to runs it
//     itself, so nodes whose member lists disagree do not pass it back.
//   - Subscriptions. A client of a node that does not host the session is
//     fed from the stream (a replay from its cursor, then a live follow
//     shared by the node's subscribers of that session), through the same
//     queues and codecs, so cursors are the same on every node.
//
// Without Config.Cluster none of this exists: no goroutine, no check.

// clusterHops bounds how many times a command is passed on between nodes
// while ownership moves under it.
const clusterHops = 3

// Bounds on what a node asks of the cluster, each a request or a few to
// JetStream; they end sooner with the node (or the caller's context).
const (
	// clusterReadTimeout bounds one read or small write of the cluster's
	// state: a lease's holder, a session's index record, the node list,
	// a seq reservation, a release, the node's leaving.
	clusterReadTimeout = 5 * time.Second
	// clusterOpenTimeout bounds what opening a session takes in the
	// cluster: claiming its lease (with its transcript to restore or
	// seed), hosting it (its record, its journal), its node's first
	// announcement, a remote subscriber's replay and follow.
	clusterOpenTimeout = 10 * time.Second
	// clusterPublishTimeout bounds one flush's publication to the stream.
	clusterPublishTimeout = 10 * time.Second
	// clusterTakeoverTimeout bounds taking over a session whose owner is
	// gone before a command for it runs.
	clusterTakeoverTimeout = 30 * time.Second
	// clusterRemoveTimeout bounds deleting the node's membership record
	// as it stops; a record left behind expires within a lease TTL.
	clusterRemoveTimeout = 2 * time.Second
)

// clusterForwardTimeout bounds the wait for a forwarded command that has
// no timeout of its own; a node that dies is noticed sooner (see
// checkNodes).
const clusterForwardTimeout = 24 * time.Hour

type clusterState struct {
	s    *Server
	node *cluster.Node

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	member        *cluster.Membership
	stopNode      func()
	stopBroadcast func() // ends onNotice

	mu         sync.Mutex
	forwarders map[string]*forwarder // by session id
	inflight   map[*inflight]struct{}
	// noInflight, made by a wait for the commands in flight (stop), is
	// closed when the last of them is answered.
	noInflight chan struct{}
	feeds      map[string]*Hosted // sessions owned elsewhere, followed for local subscribers
	// nodes is the node list last read (nodeAddr takes addresses from
	// it), members its members as this node places sessions (liveMembers),
	// nodesAt when it was read: one snapshot.
	nodes    map[string]cluster.NodeInfo
	members  []string
	nodesAt  time.Time
	owners   map[string]ownerSeen // recent lease reads, by session id
	draining bool
	// handing has the sessions this node hands over as it drains, by
	// id (cluster_handover.go); runs the handlers running here of
	// commands of a session, by its id.
	handing map[string]*handing
	runs    map[string]map[*runMark]struct{}
	// laneMu orders a command's way into the pipeline (read) with the
	// start of the handovers (write): none slips into a session's lane
	// after its handover began.
	laneMu sync.RWMutex

	forwarded atomic.Int64
	received  atomic.Int64
	takeovers atomic.Int64

	// httpTransport carries requests passed on to other nodes (ClusterProxy).
	httpTransport *http.Transport
}

func newClusterState(s *Server, node *cluster.Node) *clusterState {
	ctx, cancel := context.WithCancel(context.Background())
	return &clusterState{s: s, node: node, ctx: ctx, cancel: cancel,
		forwarders: map[string]*forwarder{}, inflight: map[*inflight]struct{}{}, feeds: map[string]*Hosted{},
		owners: map[string]ownerSeen{}, handing: map[string]*handing{}, runs: map[string]map[*runMark]struct{}{}, httpTransport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}}
}

// start serves this node's address and announces it, so other nodes can
// place sessions here and send commands.
func (cs *clusterState) start() error {
	stop, err := cs.node.ServeNode(cs.ctx, cs.serveNode)
	if err != nil {
		return err
	}
	cs.stopNode = stop
	if cs.stopBroadcast, err = cs.node.ListenBroadcast(cs.onNotice); err != nil {
		stop()
		return err
	}
	actx, cancel := context.WithTimeout(cs.ctx, clusterOpenTimeout)
	defer cancel()
	m, err := cs.node.Announce(actx)
	if err != nil {
		stop()
		cs.stopBroadcast()
		return err
	}
	cs.member = m
	cs.wg.Add(1)
	go cs.watch()
	return nil
}

// notice is what a node tells the clients of every other node: a
// pipeline lifecycle event (Event) or a face's broadcast frame (Face,
// Frame). Via is the node a command came from, whose clients heard of it
// from that node's own forwarding.
type notice struct {
	From  string          `json:"from"`
	Via   string          `json:"via,omitempty"`
	Event *pipeline.Event `json:"event,omitempty"`
	Face  string          `json:"face,omitempty"`
	Frame json.RawMessage `json:"frame,omitempty"`
}

// relay tells the other nodes' clients what this node's clients are told.
// A notice lost on the way costs a client a notice, never state.
func (cs *clusterState) relay(n notice) {
	n.From = cs.node.ID()
	b, err := json.Marshal(n)
	if err == nil {
		err = cs.node.Broadcast(b)
	}
	if err != nil {
		cs.s.log.Debug("cluster: a notice for the other nodes' clients was not sent", "err", err)
	}
}

// onNotice passes another node's notice to this node's clients. It runs
// on the NATS connection's delivery goroutine and only queues.
func (cs *clusterState) onNotice(b []byte) {
	var n notice
	if json.Unmarshal(b, &n) != nil {
		return
	}
	if self := cs.node.ID(); n.From == self || n.Via == self {
		return
	}
	switch {
	case n.Event != nil:
		n.Event.Origin = nil // another node's client: no connection here
		cs.s.emitLifecycle(*n.Event)
	case n.Face != "" && json.Valid(n.Frame):
		cs.s.broadcastHere(n.Face, n.Frame)
	}
}

// envelope is a command on its way between nodes. pipeline.Command is
// JSON apart from its Origin and Sender, which stay on the node the client
// is connected to; the principal travels with it, so the owner checks
// what the client may see and runs the command as that client.
type envelope struct {
	Cmd  pipeline.Command `json:"cmd"`
	Who  Principal        `json:"who"`
	From string           `json:"from"`
	Hops int              `json:"hops"`
	// Via is the node whose client sent the command, which told its
	// clients of it (From when empty): a command a draining node held
	// and passed on comes from that node, but was sent by Via's client.
	Via string `json:"via,omitempty"`
}

// reply is the owner's answer: the response, and the subscription the
// command's handler made for its client, which the client's node makes.
type reply struct {
	Resp pipeline.Response `json:"resp"`
	Sub  *remoteSub        `json:"sub,omitempty"`
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
// every event, so any cursor up to the last event resumes.
func (r *Remote) Subscribe(h *Hosted, after *uint64) Subscribed {
	cur := h.sess.Seq()
	res := Subscribed{Seq: cur}
	from := cur
	if after != nil {
		if *after > cur {
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

// ownerSeen is a session's owner as a lease read found it.
type ownerSeen struct {
	node string
	at   time.Time
}

// destination is the node that runs session id: its lease's live holder,
// else its home among the live nodes; for a session the cluster does not
// know (a create), this node unless SpreadSessions. orphan says the
// session exists and nobody runs it: the destination takes it over. An
// owner read less than a third of a lease TTL ago is used again: a node
// that no longer runs the session passes the command on, and one that is
// gone is forgotten.
//
// A command another node passed on (passedOn) for a session no lease
// holds runs here: that node chose this one, and placing it again by this
// node's member list, which may differ from the sender's just after the
// cluster starts or a node joins or leaves, could send it back and forth
// until its hops ran out.
func (cs *clusterState) destination(id string, passedOn bool) (dest string, orphan bool, err error) {
	ctx, cancel := context.WithTimeout(cs.ctx, clusterReadTimeout)
	defer cancel()
	// A command passed on means the session may be moving: its owner
	// is read, not taken from what this node saw a moment ago, or the
	// command goes back to where it came from.
	owner, held, err := cs.leaseHolder(ctx, id, passedOn)
	if err != nil {
		return "", false, err
	}
	if held {
		return owner, false, nil
	}
	rec, found, err := cs.node.GetSession(ctx, id)
	if err != nil {
		return "", false, err
	}
	exists := found && !rec.Deleted
	if passedOn && !cs.isDraining() {
		return cs.node.ID(), exists, nil
	}
	if !exists && !cs.s.cfg.SpreadSessions {
		// New: it lives where it is created, so a client that stays on
		// one node never waits on another.
		return cs.node.ID(), false, nil
	}
	members, err := cs.liveMembers(ctx)
	if err != nil {
		return "", false, err
	}
	return PlaceSession(id, members), exists, nil
}

// ownersMax bounds the owners cache: a cache, not a record, emptied
// when it is full.
const ownersMax = 10000

// leaseHolder is the live holder of session id's lease (held false for
// none), for a session this node does not run. A holder read less than a
// third of a lease TTL ago is used again, unless fresh: a node that no
// longer runs the session passes what it gets on, and one that is gone is
// forgotten (forgetMembers). A cached holder that is this node is read
// again: this node let the session go since.
func (cs *clusterState) leaseHolder(ctx context.Context, id string, fresh bool) (node string, held bool, err error) {
	if !fresh {
		cs.mu.Lock()
		seen, ok := cs.owners[id]
		cs.mu.Unlock()
		if ok && seen.node != cs.node.ID() && time.Since(seen.at) < cs.node.LeaseTTL()/3 {
			return seen.node, true, nil
		}
	}
	owner, live, held, err := cs.node.LeaseOwner(ctx, id)
	if err != nil || !held || !live {
		return "", false, err
	}
	cs.rememberOwner(id, owner)
	return owner, true, nil
}

// rememberOwner caches the owner of session id.
func (cs *clusterState) rememberOwner(id, owner string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if len(cs.owners) >= ownersMax {
		clear(cs.owners)
	}
	cs.owners[id] = ownerSeen{node: owner, at: time.Now()}
}

// PlaceSession picks the home of a session among the live nodes by
// rendezvous hashing: every node computes the same answer from the same
// list, sessions spread evenly, and when a node leaves only its own
// sessions move. It is exported for tests and operators who want to know
// where a new session with a given id will live.
func PlaceSession(id string, nodes []string) string {
	var best string
	var bestScore uint64
	for _, n := range nodes {
		h := fnv.New64a()
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write([]byte(id))
		if sc := mix64(h.Sum64()); best == "" || sc > bestScore {
			best, bestScore = n, sc
		}
	}
	return best
}

// mix64 spreads FNV's bits (splitmix64's finalizer): FNV-1a alone barely
// changes its high bits for ids that differ only at the end, which put
// bench-000000 to bench-000029 all on one of three nodes.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// liveMembers is the list of live nodes, read at most every lease TTL/3.
func (cs *clusterState) liveMembers(ctx context.Context) ([]string, error) {
	cs.mu.Lock()
	if time.Since(cs.nodesAt) < cs.node.LeaseTTL()/3 && len(cs.members) > 0 {
		m := cs.members
		cs.mu.Unlock()
		return m, nil
	}
	cs.mu.Unlock()
	all, err := cs.node.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	return cs.rememberNodes(all), nil
}

// rememberNodes keeps a node list just read: its members for
// liveMembers, which it returns, and its addresses for nodeAddr.
func (cs *clusterState) rememberNodes(all map[string]cluster.NodeInfo) []string {
	m := cluster.MembersOf(all)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.draining {
		// This node left; it must not place anything on itself.
		out := m[:0:0]
		for _, n := range m {
			if n != cs.node.ID() {
				out = append(out, n)
			}
		}
		m = out
	}
	cs.nodes, cs.members, cs.nodesAt = all, m, time.Now()
	return m
}

func (cs *clusterState) forgetMembers() {
	cs.mu.Lock()
	cs.nodesAt = time.Time{}
	clear(cs.owners)
	cs.mu.Unlock()
}

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
	env := envelope{Cmd: it.cmd, Who: it.who, From: cs.node.ID(), Hops: it.hops + 1, Via: it.via}
	if it.reply == nil {
		env.Via = cs.node.ID()
	}
	env.Cmd.Origin, env.Cmd.Sender = nil, nil
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
			cs.finish(it, r.Resp)
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
			cs.finish(it, r.Resp)
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
		b, err := json.Marshal(reply{Resp: r})
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
	it := forwardItem{cmd: env.Cmd, who: env.Who, hops: env.Hops, reply: answer, via: via}
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
		b, err := json.Marshal(reply{Resp: resp, Sub: sub, Seq: seq})
		it.reply(b, err)
	})
}

// Ownership of hosted sessions.

// claim takes session id's lease for this node before it is opened here,
// and says where its seq continues: after the last event any owner
// published. A session taken over (restore) first gets its transcript
// from the cluster, written to file; a stored file loaded into the
// cluster is copied to it. topts mirror every later write of the
// session's transcript to the cluster, fenced by the lease.
func (cs *clusterState) claim(ctx context.Context, id string, first uint64, file string, restore bool) (*cluster.Lease, uint64, []transcript.Option, error) {
	if ctx == nil || ctx.Err() != nil {
		ctx = cs.ctx
	}
	ctx, cancel := context.WithTimeout(ctx, clusterOpenTimeout)
	defer cancel()
	if cs.isDraining() {
		return nil, 0, nil, fault.Errorf(fault.Unavailable, "Session %s cannot be opened on node %s: the node is leaving the cluster; try again", id, cs.node.ID())
	}
	l, err := cs.node.Acquire(ctx, id)
	var held *cluster.HeldError
	switch {
	case errors.Is(err, cluster.ErrAlreadyHeld):
		l = cs.node.Lease(id)
		if l == nil {
			return nil, 0, nil, fault.Errorf(fault.Conflict, "Session %s is being released by this node; try again", id)
		}
	case errors.As(err, &held):
		if l, err = cs.node.Takeover(ctx, id); err != nil {
			if errors.As(err, &held) && held.Owner == cs.node.ID() {
				// This node is taking it over on another path (a
				// follower's takeover, a command's): wait for that.
				if l = cs.node.AwaitLease(ctx, id); l != nil {
					break
				}
			}
			if errors.As(err, &held) {
				return nil, 0, nil, fault.Errorf(fault.Conflict, "Session %s is owned by node %s", id, held.Owner)
			}
			return nil, 0, nil, fault.Wrap(fault.Unavailable, err, "Session "+id+" could not be taken over: "+err.Error())
		}
		cs.takeovers.Add(1)
	case err != nil:
		return nil, 0, nil, fault.Wrap(fault.Unavailable, err, "Session "+id+" could not be claimed in the cluster: "+err.Error())
	}
	// A claim that fails lets the lease go even when it failed because
	// its caller gave up: else the session stays locked until the lease
	// runs out.
	release := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), clusterReadTimeout)
		defer cancel()
		_ = l.Release(rctx)
	}
	fail := func(msg string, err error) (*cluster.Lease, uint64, []transcript.Option, error) {
		release()
		return nil, 0, nil, fault.Wrap(fault.Unavailable, err, "Session "+id+": "+msg+": "+err.Error())
	}
	last, err := cs.node.LastSeq(ctx, id)
	if err != nil {
		return fail("its events could not be read", err)
	}
	switch {
	case restore:
		if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
			return fail("its transcript could not be restored", err)
		}
		found, err := cs.node.RestoreTranscript(ctx, id, file)
		if err != nil {
			return fail("its transcript could not be restored", err)
		}
		if !found {
			if _, serr := os.Stat(file); serr != nil {
				release()
				return nil, 0, nil, fault.Errorf(fault.NotFound, "Session %s not found (the cluster holds no transcript for it)", id)
			}
			if err := l.SeedTranscript(ctx, file); err != nil {
				return fail("its transcript could not be copied to the cluster", err)
			}
		}
	case file != "":
		if err := l.SeedTranscript(ctx, file); err != nil {
			return fail("its transcript could not be copied to the cluster", err)
		}
	}
	return l, nextSeq(first, last, cs.s.cfg.EventLogSize), []transcript.Option{transcript.WithMirror(l.TranscriptMirror())}, nil
}

// nextSeq is where a session's seq continues on a node that claims it:
// reserved is the highest seq its previous owner may have used (its
// reservation; exactly its last seq after a clean handover), published
// the last seq in the stream. The previous owner's clients may have seen
// events it never published (it died first), but no more than its event
// log holds: the publisher reads from there, and skips what left it. So
// the seq continues after the stream's last one plus that (logSize, 0
// for the default), or after the reservation if that is lower: a jump of
// at most the event log's size after a crash, none after a handover.
//
// A session with nothing in the stream keeps its reservation: one from
// before the cluster continues after what its single server numbered.
func nextSeq(reserved, published uint64, logSize int) uint64 {
	if published == 0 {
		return reserved
	}
	if logSize <= 0 {
		logSize = session.DefaultEventLogSize
	}
	return max(published, min(reserved, published+uint64(logSize)))
}

func (cs *clusterState) isDraining() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.draining
}

// lookup completes what the node's own index knows of session id (e, ok)
// with the cluster's index. restore says the session's transcript is to
// be taken from the cluster (to e.File): it may have run on another node
// since this one last had it.
func (cs *clusterState) lookup(ctx context.Context, id string, e indexEntry, ok bool) (indexEntry, bool, bool, error) {
	if cluster.CheckSessionID(id) != nil {
		return e, ok, false, nil // not a cluster session: local only
	}
	ctx, cancel := context.WithTimeout(ctx, clusterReadTimeout)
	defer cancel()
	rec, found, err := cs.node.GetSession(ctx, id)
	if err != nil {
		return e, false, false, fault.Wrap(fault.Unavailable, err, "Session "+id+" could not be looked up in the cluster: "+err.Error())
	}
	if !found {
		return e, ok, false, nil // from before the cluster: its file is here
	}
	if rec.Deleted {
		e.ID, e.Deleted = id, true
		return e, true, false, nil
	}
	file := e.File
	if !ok || e.Deleted || file == "" {
		file = filepath.Join(cs.s.cfg.SessionsDir, "cluster", id+".jsonl")
	}
	cwd := rec.Cwd
	if st, err := os.Stat(cwd); cwd == "" || err != nil || !st.IsDir() {
		cwd = cs.s.cfg.Cwd
	}
	ne := indexEntry{ID: id, File: file, Cwd: cwd, Owner: rec.Owner, Created: rec.Created,
		Seq: rec.LastSeq, Sandbox: rec.Sandbox}
	if rec.LastSeq == 0 {
		// A record from before seqs were kept in it.
		ne.Seq = e.Seq
	}
	// open reads where the seq continues, the owner and the sandbox from
	// this node's index.
	if err := cs.s.index.put(ne, false); err != nil {
		return e, false, false, fault.Wrap(fault.Internal, err, "Session "+id+" could not be recorded on this node: "+err.Error())
	}
	return ne, true, true, nil
}

// reserve records in the cluster's index that session id may use seqs up
// to limit, so that a node taking it over numbers after every event its
// owner may have shown a client, published or not.
func (cs *clusterState) reserve(id string, limit uint64) {
	ctx, cancel := context.WithTimeout(cs.ctx, clusterReadTimeout)
	defer cancel()
	if _, err := cs.node.UpdateSession(ctx, id, func(r *cluster.SessionRecord) error {
		r.LastSeq = max(r.LastSeq, limit)
		return nil
	}); err != nil {
		cs.s.log.Error("cluster: reserving event seqs", "session", id, "err", err)
	}
}

// free refuses to create a session whose id the cluster already has.
func (cs *clusterState) free(ctx context.Context, id string) error {
	if cluster.CheckSessionID(id) != nil {
		return fault.Errorf(fault.Invalid, "Validation failed: sessionId: in a cluster, a session id may hold only letters, digits, '-' and '_'")
	}
	ctx, cancel := context.WithTimeout(ctx, clusterReadTimeout)
	defer cancel()
	rec, found, err := cs.node.GetSession(ctx, id)
	if err != nil {
		return fault.Wrap(fault.Unavailable, err, "Session "+id+" could not be looked up in the cluster: "+err.Error())
	}
	if found && !rec.Deleted {
		return fault.Errorf(fault.Conflict, "Session %s already exists", id)
	}
	return nil
}

// known adds to local (the sessions this node's index knows and does not
// host) the cluster's other sessions, as its index has them: every node
// lists every session. A session the cluster deleted is left out.
func (cs *clusterState) known(local []Known) []Known {
	ctx, cancel := context.WithTimeout(cs.ctx, clusterReadTimeout)
	defer cancel()
	recs, err := cs.node.ListSessions(ctx)
	if err != nil {
		cs.s.log.Warn("cluster: listing the cluster's sessions", "err", err)
		return local
	}
	byID := make(map[string]Known, len(local))
	for _, k := range local {
		byID[k.ID] = k
	}
	out := make([]Known, 0, len(recs)+len(local))
	for _, r := range recs {
		k, here := byID[r.ID]
		delete(byID, r.ID)
		if r.Deleted || cs.hostsOrMakes(r.ID) {
			continue
		}
		if !here {
			k = Known{ID: r.ID, File: r.File, Cwd: r.Cwd, Owner: r.Owner, Created: r.Created,
				Info: transcript.Info{ID: r.ID, Name: r.Name, Cwd: r.Cwd, Created: r.Created}}
		}
		out = append(out, k)
	}
	for _, k := range local {
		if _, ok := byID[k.ID]; ok {
			out = append(out, k) // from before the cluster
		}
	}
	return out
}

// visible answers Visible for a session this node's index does not know.
func (cs *clusterState) visible(id string, p Principal) bool {
	if cluster.CheckSessionID(id) != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(cs.ctx, clusterReadTimeout)
	defer cancel()
	rec, found, err := cs.node.GetSession(ctx, id)
	return err == nil && found && !rec.Deleted && p.MaySee(id, rec.Owner)
}

// hosted is what the cluster keeps of a session this node owns.
type hosted struct {
	lease *cluster.Lease
	kick  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	// file is set when the session moved to another transcript file; the
	// publisher records it in the cluster's index.
	file atomic.Bool
	// published is the seq of the last event the publisher is done with.
	published atomic.Uint64
}

// host starts serving a session opened here under lease: its record in
// the cluster's index and the publisher of its events (commands reach
// it through the node's subject, serveNode). A session that was not just created (adopt) first takes over
// the outcomes of its commands from the cluster's journal: a command
// replayed by id returns its stored outcome, one that was running on the
// previous owner answers interrupted.
func (cs *clusterState) host(ctx context.Context, h *Hosted, l *cluster.Lease, first uint64, adopt bool) error {
	if ctx == nil || ctx.Err() != nil {
		ctx = cs.ctx
	}
	ctx, cancel := context.WithTimeout(ctx, clusterOpenTimeout)
	defer cancel()
	if adopt && cs.s.pipe != nil {
		recs, err := cs.node.JournalFor(ctx, h.id)
		if err != nil {
			return fault.Wrap(fault.Unavailable, err, "Session "+h.id+": the outcomes of its commands could not be read: "+err.Error())
		}
		cs.s.pipe.Adopt(recs)
	}
	// A run the previous owner began and never ended (it died mid-run)
	// ends here for the clients that watched it, on every node: before
	// the publisher starts, so its first flush carries the end.
	if adopt {
		if last, ok, err := cs.node.LastEvent(ctx, h.id); err != nil {
			cs.s.log.Warn("cluster: reading a session's last event", "session", h.id, "err", err)
		} else if ok && last.Epoch < l.Epoch() {
			if ev, ok := cs.decode(h.id, last); ok && session.RunInProgress(ev) && h.sess.EndInterrupted() {
				cs.s.log.Info("cluster: ended the run the session's previous owner left", "session", h.id, "node", last.Node, "seq", last.Seq)
			}
		}
	}
	if err := cs.record(ctx, h, l, false); err != nil {
		return err
	}
	hc := &hosted{lease: l, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	h.cl = hc
	// Events the session emitted while it opened (a run the previous
	// owner left ends as interrupted) go out now, not with the next one.
	hc.kick <- struct{}{}
	cs.wg.Add(1)
	go cs.publish(h, hc, first)
	return nil
}

// record writes the session's entry in the cluster's index, fenced by
// its lease: a stale owner cannot overwrite what a later one wrote.
func (cs *clusterState) record(ctx context.Context, h *Hosted, l *cluster.Lease, deleted bool) error {
	prev, _ := cs.s.index.get(h.id)
	created := prev.Created
	if created.IsZero() {
		created = h.created
	}
	_, err := l.UpdateSession(ctx, func(r *cluster.SessionRecord) error {
		if r.Deleted && !deleted {
			*r = cluster.SessionRecord{Revision: r.Revision} // the id was freed: a new session
		}
		if r.Created.IsZero() {
			r.Created = created
		}
		r.ID, r.File, r.Cwd, r.Deleted = h.id, h.sess.File(), h.cwd, deleted
		if r.Owner == "" {
			r.Owner = h.owner
		}
		if prev.Sandbox != "" {
			r.Sandbox = prev.Sandbox
		}
		r.LastSeq = max(r.LastSeq, h.sess.Seq())
		return nil
	})
	if err != nil {
		return fault.Wrap(fault.Unavailable, err, "Session "+h.id+" could not be recorded in the cluster: "+err.Error())
	}
	return nil
}

// publish copies the session's logged events to the stream in seq order,
// each once, until the session is unloaded or the lease ends. When the
// lease is lost the session stops here: another node owns it now.
func (cs *clusterState) publish(h *Hosted, hc *hosted, last uint64) {
	defer cs.wg.Done()
	defer close(hc.done)
	var (
		retry <-chan time.Time // a publish failed: try again then
		pause time.Duration
	)
	flush := func() bool {
		evs, ok := h.sess.EventsSince(last)
		if !ok {
			cs.s.log.Warn("cluster: events left the log before they were published", "session", h.id, "after", last)
			last = h.sess.Seq()
			return true
		}
		// All that waits goes out together, several events to a message
		// (cluster.PublishEvents): one at a time, each waiting for its
		// acknowledgement, a session emitting faster than a round trip per
		// event queued behind its publisher, and watchers on other nodes
		// trailed by p99 half a second.
		out := make([]cluster.Event, 0, len(evs))
		for _, ev := range evs {
			b, err := json.Marshal(ev)
			if err != nil {
				cs.s.log.Error("cluster: encoding an event", "session", h.id, "seq", ev.Seq, "err", err)
				continue
			}
			out = append(out, cluster.Event{Seq: ev.Seq, Data: b})
		}
		if len(out) > 0 {
			ctx, cancel := context.WithTimeout(cs.ctx, clusterPublishTimeout)
			through, err := cs.node.PublishEvents(ctx, h.id, out)
			cancel()
			last = max(last, through)
			if err != nil {
				cs.s.log.Warn("cluster: publishing events", "session", h.id, "after", last, "through", out[len(out)-1].Seq, "err", err)
				if hc.lease.Err() != nil {
					return false
				}
				// Retried soon, and on the next event: the session's log
				// keeps what is not out yet, in order. Waiting for an
				// event alone left a run that ended while NATS was away
				// unpublished, its last events never reaching another
				// node's clients.
				pause = min(max(2*pause, 100*time.Millisecond), 2*time.Second)
				retry = time.After(pause)
				return true
			}
		}
		pause = 0
		if len(evs) > 0 {
			last = max(last, evs[len(evs)-1].Seq)
		}
		hc.published.Store(last)
		return true
	}
	for {
		select {
		case <-retry:
			retry = nil
			if !flush() {
				cs.lost(h)
				<-hc.stop
				return
			}
		case <-hc.kick:
			if hc.file.Swap(false) {
				ctx, cancel := context.WithTimeout(cs.ctx, clusterReadTimeout)
				if err := cs.record(ctx, h, hc.lease, false); err != nil {
					cs.s.log.Warn("cluster: recording a session's new file", "session", h.id, "err", err)
				}
				cancel()
			}
			if !flush() {
				cs.lost(h)
				<-hc.stop
				return
			}
		case <-hc.lease.Done():
			cs.lost(h)
			<-hc.stop
			return
		case <-hc.stop:
			if hc.lease.Err() == nil {
				flush()
			}
			return
		}
	}
}

// lost unloads a session whose lease ended while hosted: a stale owner
// must neither run it nor write for it.
func (cs *clusterState) lost(h *Hosted) {
	err := h.cl.lease.Err()
	if errors.Is(err, cluster.ErrReleased) {
		return // given back by unhost, which is unloading it
	}
	cs.s.log.Warn("cluster: lost a session's lease; it stops here", "session", h.id, "err", err)
	closed := errors.Is(err, cluster.ErrNodeClosed)
	cs.wg.Add(1)
	go func() {
		defer cs.wg.Done()
		h.subMu.Lock()
		subs := make(map[*Client]*subscription, len(h.subs))
		for c, sub := range h.subs {
			subs[c] = sub
		}
		h.subMu.Unlock()
		if cs.s.unload(h, false) != nil || closed {
			return
		}
		// This node's clients keep watching: from the stream now, from
		// the last event each was sent (read once unload has stopped the
		// fan-out).
		for c, sub := range subs {
			h.subMu.Lock()
			after, held := sub.after, sub.held
			h.subMu.Unlock()
			if held || c.Closing() {
				continue
			}
			cs.subscribeRemote(c, h.id, sub.codec, &after, nil)
		}
	}()
}

// fileChanged notes that the session continues in another file; it runs
// on the emitting goroutine and never blocks.
func (hc *hosted) fileChanged() {
	hc.file.Store(true)
	hc.onEvent()
}

// onEvent wakes the session's publisher; it runs on the emitting goroutine
// and never blocks.
func (hc *hosted) onEvent() {
	select {
	case hc.kick <- struct{}{}:
	default:
	}
}

// unhost stops publishing a session that is being unloaded (after the
// last events are out) and gives its lease back, so the next command for
// it, from any node, finds it free at once. A node that crashed (its
// cluster node closed) gives nothing back: its leases expire.
func (cs *clusterState) unhost(h *Hosted, deleted bool) {
	hc := h.cl
	if hc == nil {
		return
	}
	close(hc.stop)
	<-hc.done
	if hc.lease.Err() == nil {
		ctx, cancel := context.WithTimeout(context.Background(), clusterReadTimeout)
		defer cancel()
		if deleted {
			if err := cs.record(ctx, h, hc.lease, true); err != nil {
				cs.s.log.Warn("cluster: recording a deleted session", "session", h.id, "err", err)
			}
		} else if seq := h.sess.Seq(); hc.published.Load() == seq {
			// Every event is in the stream: the next owner numbers right
			// after the last one instead of after this owner's
			// reservation (seqs stay contiguous across a handover).
			if _, err := hc.lease.UpdateSession(ctx, func(r *cluster.SessionRecord) error {
				r.LastSeq = seq
				return nil
			}); err != nil {
				cs.s.log.Warn("cluster: recording a session's last seq", "session", h.id, "err", err)
			}
		}
		if err := hc.lease.Release(ctx); err != nil {
			cs.s.log.Warn("cluster: releasing a session", "session", h.id, "err", err)
		}
	}
}

// Remote feeds: sessions owned elsewhere that clients here watch.

// feed is the follow of a session owned by another node.
type feed struct {
	follow *cluster.Follow

	mu      sync.Mutex
	seq     uint64 // the last event delivered
	waiters []feedWaiter
}

type feedWaiter struct {
	seq  uint64
	done chan struct{}
}

// feedCatchUp bounds how long an answer waits for its events to arrive
// through the stream. At 1,000 sessions on two cores the stream lagged
// past 5 s for one prompt in 5,000; the wait ends sooner when the feed
// stops or the node does.
const feedCatchUp = 30 * time.Second

// advance records that the feed delivered seq.
func (fd *feed) advance(seq uint64) {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if seq > fd.seq {
		fd.seq = seq
	}
	kept := fd.waiters[:0]
	for _, w := range fd.waiters {
		if w.seq <= fd.seq {
			close(w.done)
		} else {
			kept = append(kept, w)
		}
	}
	clear(fd.waiters[len(kept):])
	fd.waiters = kept
}

func (fd *feed) delivered(seq uint64) bool {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	return fd.seq >= seq
}

// reached is closed once the feed has delivered seq.
func (fd *feed) reached(seq uint64) <-chan struct{} {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	done := make(chan struct{})
	if fd.seq >= seq {
		close(done)
		return done
	}
	fd.waiters = append(fd.waiters, feedWaiter{seq: seq, done: done})
	return done
}

// catchUp waits until the feed has delivered seq, within feedCatchUp; it
// ends sooner when stopped closes (the feed's follow ended) or ctx ends.
// late says the bound passed first, delivered what the feed had
// delivered by then. A wait that ends without its seq leaves no waiter
// behind: a feed that stalls must not collect one per answer.
func (fd *feed) catchUp(ctx context.Context, seq uint64, stopped <-chan struct{}) (late bool, delivered uint64) {
	t := time.NewTimer(feedCatchUp)
	defer t.Stop()
	done := fd.reached(seq)
	select {
	case <-done:
		return false, 0
	case <-stopped:
	case <-ctx.Done():
	case <-t.C:
		late = true
	}
	fd.mu.Lock()
	defer fd.mu.Unlock()
	fd.waiters = slices.DeleteFunc(fd.waiters, func(w feedWaiter) bool { return w.done == done })
	if late {
		return true, fd.seq
	}
	return false, 0
}

// subscribeRemote makes c watch session id, owned by another node, from
// the stream: the events after *after (all of them the stream has), then
// the live ones.
func (cs *clusterState) subscribeRemote(c *Client, id string, codec Codec, after *uint64, hold *Hold) Subscribed {
	h, err := cs.feedFor(id, *after)
	if err != nil {
		cs.s.log.Warn("cluster: following a session", "session", id, "err", err)
		return Subscribed{Seq: *after}
	}
	sub := &subscription{codec: codec, held: true}
	h.subMu.Lock()
	h.subs[c] = sub
	h.subMu.Unlock()
	c.watch(id)
	ctx, cancel := context.WithTimeout(cs.ctx, clusterOpenTimeout)
	missed, err := cs.node.Replay(ctx, id, *after)
	cancel()
	if err != nil {
		cs.s.log.Warn("cluster: replaying a session", "session", id, "err", err)
	}
	h.subMu.Lock()
	defer h.subMu.Unlock()
	if h.subs[c] != sub {
		return Subscribed{Seq: *after}
	}
	sub.after = *after
	frames := make([]Frame, 0, len(missed)+len(sub.pending))
	seqs := make([]uint64, 0, len(missed)+len(sub.pending))
	for _, e := range missed {
		ev, ok := cs.decode(id, e)
		if !ok {
			continue
		}
		if f := codec.Encode(id, ev); f.Data != nil || f.Merge != nil {
			frames = append(frames, f.Encoded())
			seqs = append(seqs, ev.Seq)
		}
	}
	sub.pending = append(frames, sub.pending...)
	sub.seqs = append(seqs, sub.seqs...)
	res := Subscribed{Seq: *after, Resumed: true}
	if n := len(seqs); n > 0 {
		res.Seq = seqs[n-1]
	}
	if hold != nil && hold.add(heldSub{h, c, sub}) {
		sub.hold = hold
		return res
	}
	sub.flush(c)
	return res
}

func (cs *clusterState) decode(id string, e cluster.Event) (session.Event, bool) {
	var ev session.Event
	if err := json.Unmarshal(e.Data, &ev); err != nil {
		cs.s.log.Warn("cluster: an event in the stream could not be read", "session", id, "seq", e.Seq, "err", err)
		return ev, false
	}
	ev.Seq = e.Seq
	return ev, true
}

// replaySince is what a client of this node missed of hosted session h
// after the cursor after, when h's own log cannot say: the cursor is from
// before this node took h over, and the log starts at this node's first
// seq. The stream keeps every event published, by any owner; the log has
// those not published yet. As a client of another node resumes through
// the stream (Remote.Subscribe), so does one of this node.
func (cs *clusterState) replaySince(h *Hosted, after uint64) ([]session.Event, bool) {
	if after > h.sess.Seq() {
		return nil, false // a cursor this session never issued
	}
	ctx, cancel := context.WithTimeout(cs.ctx, clusterOpenTimeout)
	defer cancel()
	evs, err := cs.node.Replay(ctx, h.id, after)
	if err != nil {
		cs.s.log.Warn("cluster: replaying a session for a resumed client", "session", h.id, "err", err)
		return nil, false
	}
	out := make([]session.Event, 0, len(evs))
	last := after
	for _, e := range evs {
		ev, ok := cs.decode(h.id, e)
		if !ok {
			return nil, false // a hole in what the client would get
		}
		out = append(out, ev)
		last = ev.Seq
	}
	// Seqs between the last owner's and this node's first are never
	// used: a new owner starts past what the old one had reserved.
	rest, ok := h.sess.EventsSince(max(last, h.sess.FirstSeq()))
	if !ok {
		return nil, false
	}
	return append(out, rest...), true
}

// feedFor returns the follow of session id shared by this node's
// subscribers, starting one after seq when there is none. The follow is
// started without cs.mu held (it reads the stream), so routing never
// waits on it.
func (cs *clusterState) feedFor(id string, after uint64) (*Hosted, error) {
	cs.mu.Lock()
	h := cs.feeds[id]
	cs.mu.Unlock()
	if h != nil {
		return h, nil
	}
	h = &Hosted{srv: cs.s, id: id, subs: map[*Client]*subscription{}, gone: make(chan struct{})}
	fd := &feed{seq: after}
	ctx, cancel := context.WithTimeout(cs.ctx, clusterOpenTimeout)
	defer cancel()
	f, err := cs.node.Follow(ctx, id, after, func(e cluster.Event) {
		if ev, ok := cs.decode(id, e); ok {
			h.fanOut(ev)
		}
		fd.advance(e.Seq)
	})
	if err != nil {
		return nil, err
	}
	fd.follow = f
	h.feed = fd
	cs.mu.Lock()
	if other := cs.feeds[id]; other != nil {
		cs.mu.Unlock()
		f.Stop() // another subscriber started one meanwhile
		return other, nil
	}
	if cs.ctx.Err() != nil {
		cs.mu.Unlock()
		f.Stop()
		return nil, errors.New("the server is shutting down")
	}
	cs.feeds[id] = h
	cs.mu.Unlock()
	return h, nil
}

// feedHosted is the feed of session id, if this node follows it.
func (cs *clusterState) feedHosted(id string) *Hosted {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.feeds[id]
}

// unwatched stops the feed of h once no client of this node watches it.
func (cs *clusterState) unwatched(h *Hosted) {
	if h.feed == nil || h.Subscribers() > 0 {
		return
	}
	cs.mu.Lock()
	if cs.feeds[h.id] != h || h.Subscribers() > 0 {
		cs.mu.Unlock()
		return
	}
	delete(cs.feeds, h.id)
	cs.mu.Unlock()
	h.feed.follow.Stop()
}

// feedBroke closes the clients of a follow that stopped by itself (the
// stream could not be read): they reconnect and resume from their last
// seq, which starts a new one.
func (cs *clusterState) feedBroke(h *Hosted) {
	cs.s.log.Warn("cluster: following a session stopped", "session", h.id, "err", h.feed.follow.Err())
	for _, c := range h.dropSubscribers() {
		c.Close(Close{Kind: CloseOverloaded, Reason: "Lost the session's event stream; reconnect and resume from the last seq you saw"})
	}
}

// watch ends the commands in flight on nodes that left, and takes over
// sessions followed here whose owner is gone (a subscriber should not
// wait for a command to bring its session back).
func (cs *clusterState) watch() {
	defer cs.wg.Done()
	t := time.NewTicker(cs.node.LeaseTTL() / 3)
	defer t.Stop()
	for {
		select {
		case <-cs.ctx.Done():
			return
		case <-t.C:
		}
		cs.checkNodes()
	}
}

func (cs *clusterState) checkNodes() {
	ctx, cancel := context.WithTimeout(cs.ctx, cs.node.LeaseTTL())
	defer cancel()
	cs.forgetMembers()
	// A node that is leaving still answers what it was sent: it is
	// live, though no member.
	live, err := cs.node.Nodes(ctx)
	if err != nil {
		return
	}
	cs.rememberNodes(live)
	cs.mu.Lock()
	var dead []*inflight
	for fl := range cs.inflight {
		if _, ok := live[fl.node]; !ok {
			dead = append(dead, fl)
		}
	}
	var followed []string
	var broken []*Hosted
	for id, h := range cs.feeds {
		select {
		case <-h.feed.follow.Done():
			broken = append(broken, h)
			delete(cs.feeds, id)
		default:
			followed = append(followed, id)
		}
	}
	cs.mu.Unlock()
	for _, h := range broken {
		cs.feedBroke(h)
	}
	for _, fl := range dead {
		fl.cancel(errNodeStopped)
	}
	for _, id := range followed {
		if h := cs.hostedHere(id); h != nil {
			cs.moveFeed(h) // its clients still on the feed (cluster_feedmove.go)
			continue
		}
		_, alive, held, err := cs.node.LeaseOwner(ctx, id)
		if err != nil || (held && alive) {
			continue
		}
		// Any node whose clients watch the session takes it over, its
		// home or not: the home may watch nothing, and a watcher waited
		// for the next command (40 s and more) before. Two watchers
		// racing are settled by the lease (one Takeover wins; the other
		// goes on following), and a command that reaches the home
		// meanwhile is passed to the winner (dispatch).
		if _, err := cs.s.Session(ctx, id); err != nil {
			if ctx.Err() != nil || fault.CodeOf(err) == fault.ShuttingDown {
				return // stopping: not a failure of the takeover
			}
			if fault.CodeOf(err) == fault.Conflict {
				continue // another node took it first
			}
			cs.s.log.Warn("cluster: taking over a followed session", "session", id, "err", err)
		}
	}
}

// stop ends the cluster's goroutines, and this node's serving.
func (cs *clusterState) stop() {
	if cs.stopNode != nil {
		cs.stopNode()
	}
	if cs.stopBroadcast != nil {
		cs.stopBroadcast()
	}
	// Commands this node passed on (for its own clients, or for another
	// node's while its sessions moved) get their answers before it stops.
	cs.awaitInflight(cs.s.lim.ShutdownTimeout)
	if cs.member != nil {
		ctx, cancel := context.WithTimeout(context.Background(), clusterRemoveTimeout)
		if err := cs.member.Remove(ctx); err != nil {
			cs.member.Stop() // a crash-like end: the record expires
		}
		cancel()
	}
	cs.cancel()
	cs.wg.Wait()
	cs.httpTransport.CloseIdleConnections()
	cs.mu.Lock()
	feeds := cs.feeds
	cs.feeds = map[string]*Hosted{}
	cs.mu.Unlock()
	for _, h := range feeds {
		h.feed.follow.Stop()
	}
}

// awaitInflight waits until no command this node passes on waits to be
// sent or for its answer, or for timeout.
func (cs *clusterState) awaitInflight(timeout time.Duration) {
	cs.mu.Lock()
	if len(cs.inflight) == 0 && len(cs.forwarders) == 0 {
		cs.mu.Unlock()
		return
	}
	if cs.noInflight == nil {
		cs.noInflight = make(chan struct{})
	}
	idle := cs.noInflight
	cs.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
}

// ClusterStatus is this node's view of the cluster, for health and
// metrics.
type ClusterStatus struct {
	Node      string `json:"node"`
	Connected bool   `json:"connected"`
	Leases    int    `json:"leases"`
	Members   int    `json:"members"`
	Followed  int    `json:"followed"`
	Forwarded int64  `json:"forwarded"`
	Received  int64  `json:"received"`
	Takeovers int64  `json:"takeovers"`
	Draining  bool   `json:"draining"`
}

// ClusterStatus is nil for a server that is not a cluster node.
func (s *Server) ClusterStatus() *ClusterStatus {
	cs := s.cl
	if cs == nil {
		return nil
	}
	cs.mu.Lock()
	st := &ClusterStatus{Node: cs.node.ID(), Members: len(cs.members), Followed: len(cs.feeds), Draining: cs.draining}
	cs.mu.Unlock()
	st.Connected = cs.node.Connected()
	st.Leases = len(cs.node.Leases())
	st.Forwarded, st.Received, st.Takeovers = cs.forwarded.Load(), cs.received.Load(), cs.takeovers.Load()
	return st
}
