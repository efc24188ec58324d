package server

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd-dev/agentd/internal/cluster"
	"github.com/agentd-dev/agentd/internal/fault"
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

	// durableHold, set by tests only, holds back the stream appends of
	// hosted sessions (durable.flush) until the channel closes.
	durableHold atomic.Pointer[chan struct{}]

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
	Event *clusterEvent   `json:"event,omitempty"`
	Face  string          `json:"face,omitempty"`
	Frame json.RawMessage `json:"frame,omitempty"`
	// Note is a face's word to its own handlers on the other nodes
	// (Server.Note), not to their clients.
	Note json.RawMessage `json:"note,omitempty"`
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
		cs.s.emitLifecycle(n.Event.event()) // no Origin: another node's client
	case n.Face != "" && len(n.Note) > 0:
		cs.s.noteHere(n.Face, n.Note)
	case n.Face != "" && json.Valid(n.Frame):
		cs.s.broadcastHere(n.Face, n.Frame)
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
