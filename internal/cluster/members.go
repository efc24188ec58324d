package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NodeBucket is the KV bucket where live nodes announce themselves, so a
// node can place a session that nobody owns on a live one.
const NodeBucket = "AGENTD_NODES"

const nodePrefix = "agentd.node."

// AsyncHandler answers a command when it is done: reply must be called
// exactly once, from any goroutine. The handler itself must return at
// once: the next command for the same subject is delivered only after it
// returns, and a command that waits (a prompt running until its end) must
// not hold up one that would end it (an abort, an approval).
type AsyncHandler func(ctx context.Context, payload []byte, reply func([]byte, error))

// replier answers m once.
func (n *Node) replier(m *nats.Msg) func([]byte, error) {
	var once sync.Once
	return func(out []byte, err error) {
		once.Do(func() {
			reply := nats.NewMsg(m.Reply)
			if err != nil {
				reply.Header.Set(hdrError, err.Error())
			} else {
				reply.Data = out
			}
			n.sig.sign(sigReply, reply)
			if err := m.RespondMsg(reply); err != nil {
				n.log.Warn("cluster: replying to a request", "err", err)
			}
		})
	}
}

// NodeGoneError says no node with that id answered: it left the cluster
// or died.
type NodeGoneError struct{ Node string }

func (e *NodeGoneError) Error() string {
	return fmt.Sprintf("cluster: node %s is not answering (it left the cluster or stopped)", e.Node)
}

// RemoteError is a request's failure as the handler of the node it was
// sent to reported it.
type RemoteError struct {
	Node    string
	Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("cluster: node %s: %s", e.Node, e.Message)
}

// ServeNode answers requests addressed to this node (SendNode) until the
// returned stop is called; stop waits until the server no longer routes
// requests here. ctx is handed to h for every request. Only requests a
// node of this cluster signed for this node reach h, each once; any other
// is answered with an error and logged.
func (n *Node) ServeNode(ctx context.Context, h AsyncHandler) (stop func(), err error) {
	seen := newNonces()
	return n.listen(nodePrefix+n.cfg.NodeID, "serving node "+n.cfg.NodeID, func(m *nats.Msg) {
		if err := n.sig.verify(sigCommand, m, seen); err != nil {
			n.refused.Add(1)
			n.log.Warn("cluster: refused a command", "from", m.Header.Get(hdrNode), "err", err)
			if m.Reply != "" {
				n.replier(m)(nil, fmt.Errorf("command refused: %w", err))
			}
			return
		}
		h(ctx, m.Data, n.replier(m))
	})
}

// Refused counts the messages this node refused because no node of its
// cluster signed them (sign.go).
func (n *Node) Refused() int64 { return n.refused.Load() }

// acceptReply tells an answer to SendNode that the node it was sent to
// signed from a server's "no responders" (a node gone), and drops (with
// a log line) anything else.
func (n *Node) acceptReply(m *nats.Msg) bool {
	if len(m.Data) == 0 && m.Header.Get(hdrStatus) == statusNoResponders {
		return true
	}
	if err := n.sig.verify(sigReply, m, nil); err != nil {
		n.refused.Add(1)
		n.log.Warn("cluster: dropped an answer to a command", "from", m.Header.Get(hdrNode), "err", err)
		return false
	}
	return true
}

// Connected reports whether the node's NATS connection is up.
func (n *Node) Connected() bool { return n.nc.IsConnected() }

// Membership is this node's announcement in NodeBucket: renewed every
// LeaseTTL/3 until Stop, and gone from Members a lease TTL after the node
// stops renewing it (or at once with Remove).
type Membership struct {
	n       *Node
	kv      jetstream.KeyValue
	cancel  context.CancelFunc
	done    chan struct{}
	once    sync.Once
	leaving atomic.Bool
	addr    atomic.Pointer[string]
}

type memberRecord struct {
	Expires int64 `json:"expires"` // Unix ms, like a lease
	// Leaving: the node is handing its sessions over; nothing new is
	// placed on it, but it still answers what it was sent.
	Leaving bool `json:"leaving,omitempty"`
	// Addr is where the node serves its clients (host:port), for a node
	// that passes a client's request on to it.
	Addr string `json:"addr,omitempty"`
}

// NodeInfo is what a live node announces.
type NodeInfo struct {
	Leaving bool
	Addr    string
}

// Announce makes this node a member: Members on any node lists it from
// now until Leave (or a lease TTL after this process stops).
func (n *Node) Announce(ctx context.Context) (*Membership, error) {
	kv, err := n.nodeBucket(ctx)
	if err != nil {
		return nil, err
	}
	m := &Membership{n: n, kv: kv, done: make(chan struct{})}
	// A node started again while the bucket elects a leader (the server
	// that led it is the one that died) waits for the election.
	if _, err := whileLeaderless(ctx, func() (struct{}, error) { return struct{}{}, m.put(ctx) }); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go m.renew(rctx)
	return m, nil
}

// nodeBucket is NodeBucket, looked up (or made) once: the node list is
// read every lease TTL/3 and for every placement, and the lookup is a
// JetStream request of its own.
func (n *Node) nodeBucket(ctx context.Context) (jetstream.KeyValue, error) {
	n.mu.Lock()
	kv := n.nodesKV
	n.mu.Unlock()
	if kv != nil {
		return kv, nil
	}
	kv, err := n.keyValue(ctx, jetstream.KeyValueConfig{Bucket: NodeBucket, Description: "agentd live nodes", History: 1})
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.nodesKV = kv
	n.mu.Unlock()
	return kv, nil
}

func (m *Membership) put(ctx context.Context) error {
	rec := memberRecord{Expires: time.Now().Add(m.n.cfg.LeaseTTL).UnixMilli(), Leaving: m.leaving.Load()}
	if a := m.addr.Load(); a != nil {
		rec.Addr = *a
	}
	b, _ := json.Marshal(rec)
	if _, err := m.kv.Put(ctx, m.n.cfg.NodeID, b); err != nil {
		return fmt.Errorf("cluster: announcing node %s: %w", m.n.cfg.NodeID, err)
	}
	return nil
}

func (m *Membership) renew(ctx context.Context) {
	defer close(m.done)
	m.n.everyThirdTTL(ctx, func(every time.Duration) {
		pctx, cancel := context.WithTimeout(ctx, every)
		defer cancel()
		if err := m.put(pctx); err != nil && ctx.Err() == nil {
			m.n.log.Warn("cluster: renewing membership", "err", err)
		}
	})
}

// Advertise announces where the node serves its clients (host:port).
func (m *Membership) Advertise(ctx context.Context, addr string) error {
	m.addr.Store(&addr)
	return m.put(ctx)
}

// Leave says the node is leaving: Members no longer lists it, so nothing
// new is placed on it, while Nodes still does until Remove, so what it
// was sent is still waited for.
func (m *Membership) Leave(ctx context.Context) error {
	m.leaving.Store(true)
	return m.put(ctx)
}

// Stop ends the announcement's renewal, leaving the record to expire, as
// a crash would.
func (m *Membership) Stop() {
	m.once.Do(func() {
		m.cancel()
		<-m.done
	})
}

// Remove stops announcing and deletes the record at once.
func (m *Membership) Remove(ctx context.Context) error {
	m.Stop()
	if err := m.kv.Delete(ctx, m.n.cfg.NodeID); err != nil {
		return fmt.Errorf("cluster: leaving: %w", err)
	}
	return nil
}

// Members lists the live nodes that take new sessions, sorted.
func (n *Node) Members(ctx context.Context) ([]string, error) {
	all, err := n.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	return MembersOf(all), nil
}

// MembersOf is Members of a list Nodes read: the nodes not leaving, in
// order.
func MembersOf(all map[string]NodeInfo) []string {
	var out []string
	for id, info := range all {
		if !info.Leaving {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Nodes lists every live node, leaving or not.
func (n *Node) Nodes(ctx context.Context) (map[string]NodeInfo, error) {
	kv, err := n.nodeBucket(ctx)
	if err != nil {
		return nil, err
	}
	recs, err := n.nodeRecords(ctx, kv)
	if err != nil {
		return nil, fmt.Errorf("cluster: listing nodes: %w", err)
	}
	now := time.Now().UnixMilli()
	out := map[string]NodeInfo{}
	for k, b := range recs {
		var r memberRecord
		if json.Unmarshal(b, &r) == nil && r.Expires > now {
			out[k] = NodeInfo{Leaving: r.Leaving, Addr: r.Addr}
		}
	}
	return out, nil
}

// nodeRecords reads every node's record, by node id. The key listing
// is a consumer, whose creation only the bucket's leader answers: while
// the bucket elects one (up to about 10 s after the server that led it
// died) the listing goes unanswered, and a session created then on a
// surviving node failed ("listing nodes: context deadline exceeded",
// TestClusterEmbeddedHAKillANode, 1 run in 10 under load). When the
// first try goes unanswered, the records are read with direct gets,
// which every replica answers (directRecords), and only if that fails
// too is the listing tried again until ctx ends.
func (n *Node) nodeRecords(ctx context.Context, kv jetstream.KeyValue) (map[string][]byte, error) {
	list := func(ctx context.Context) ([]string, error) {
		lister, err := kv.ListKeys(ctx)
		if err != nil {
			return nil, err
		}
		var keys []string
		for k := range lister.Keys() {
			keys = append(keys, k)
		}
		if err := ctx.Err(); err != nil {
			return nil, err // cut off: the list may be partial
		}
		return keys, nil
	}
	actx, cancel := context.WithTimeout(ctx, firstAttempt)
	keys, err := list(actx)
	expired := actx.Err() != nil
	cancel()
	if err != nil && ctx.Err() == nil && (leaderless(err) || expired && errors.Is(err, context.DeadlineExceeded)) {
		if recs, ok := n.directRecords(ctx, "KV_"+NodeBucket, "$KV."+NodeBucket+"."); ok {
			n.log.Debug("cluster: the node list was read with direct gets: its listing went unanswered", "err", err)
			return recs, nil
		}
		keys, err = readWhileLeaderless(ctx, list)
	}
	if err != nil {
		return nil, err
	}
	recs := map[string][]byte{}
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue // gone meanwhile
		}
		recs[k] = e.Value()
	}
	return recs, nil
}

// LeaseOwner reads who holds a session's lease: the node and whether the
// lease is live (not past its expiry). ok is false when nobody holds it.
func (n *Node) LeaseOwner(ctx context.Context, sessionID string) (node string, live, ok bool, err error) {
	if err := CheckSessionID(sessionID); err != nil {
		return "", false, false, err
	}
	e, err := n.kv.Get(ctx, sessionID)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return "", false, false, nil
	}
	if err != nil {
		return "", false, false, fmt.Errorf("cluster: reading the lease of session %s: %w", sessionID, err)
	}
	r, _, err := decodeEntry(e)
	if err != nil {
		return "", false, true, nil
	}
	return r.Node, time.Now().Before(r.expires()), true, nil
}

// SendNode sends a request to one node (ServeNode) and returns at once;
// done is called exactly once, on another goroutine, with the answer or
// the failure (*NodeGoneError when nobody serves that node, *RemoteError,
// ErrNodeClosed when this node closes first, or ctx's error when it ends
// first). Requests sent by one caller, one after another, reach the node
// in that order, which a blocking request per goroutine would not
// promise. The answers come back on one subscription per node, shared by
// every request.
//
// The node owns the wait: Close ends it and returns only once done has
// returned, so done must not call Close. On a node already closed, done
// is called with ErrNodeClosed before SendNode returns.
func (n *Node) SendNode(ctx context.Context, nodeID string, payload []byte, done func([]byte, error)) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		done(nil, fmt.Errorf("cluster: sending a request to node %s: %w", nodeID, ErrNodeClosed))
		return
	}
	// Added under the lock that Close takes before it waits, so every Add
	// comes before the Wait.
	n.calls.Add(1)
	n.mu.Unlock()
	fail := func(err error) {
		go func() {
			defer n.calls.Done()
			done(nil, err)
		}()
	}
	if !ValidID(nodeID) {
		fail(fmt.Errorf("cluster: %q is not a node id (letters, digits, '-' and '_', at most 200)", nodeID))
		return
	}
	replies, inbox, cancel, err := n.replies(&n.sendReplies)
	if err != nil {
		fail(fmt.Errorf("cluster: sending a request to node %s: %w", nodeID, err))
		return
	}
	ch, token := replies.wait(1)
	req := &nats.Msg{Subject: nodePrefix + nodeID, Reply: inbox + token, Data: payload}
	n.sig.sign(sigCommand, req)
	if err := n.nc.PublishMsg(req); err != nil {
		replies.drop(token)
		fail(fmt.Errorf("cluster: sending a request to node %s: %w", nodeID, err))
		return
	}
	go func() {
		defer n.calls.Done()
		defer replies.drop(token)
		select {
		case <-ctx.Done():
			done(nil, fmt.Errorf("cluster: node %s did not answer: %w", nodeID, context.Cause(ctx)))
		case <-cancel:
			done(nil, fmt.Errorf("cluster: node %s did not answer: %w", nodeID, ErrNodeClosed))
		case m := <-ch:
			switch {
			case len(m.Data) == 0 && m.Header.Get(hdrStatus) == statusNoResponders:
				done(nil, &NodeGoneError{Node: nodeID})
			case m.Header.Get(hdrError) != "":
				done(nil, &RemoteError{Node: nodeID, Message: m.Header.Get(hdrError)})
			default:
				done(m.Data, nil)
			}
		}
	}()
}

// replyMux hands the messages arriving on one of a node's reply
// subscriptions to the requests waiting for them, by the last token of
// the subject: SendNode's answers, and the answers to direct gets
// (directget.go). A subscription per request cost more than a request.
type replyMux struct {
	// accept, if set, drops the messages it refuses before they reach
	// a request: a forged answer must not take the real one's place.
	accept func(*nats.Msg) bool

	mu      sync.Mutex // a leaf: guards next and waiting
	next    uint64
	waiting map[string]chan *nats.Msg
}

// wait registers a request whose answer is at most n messages; drop
// forgets it again.
func (r *replyMux) wait(n int) (chan *nats.Msg, string) {
	ch := make(chan *nats.Msg, n)
	r.mu.Lock()
	r.next++
	token := strconv.FormatUint(r.next, 36)
	r.waiting[token] = ch
	r.mu.Unlock()
	return ch, token
}

func (r *replyMux) drop(token string) {
	r.mu.Lock()
	delete(r.waiting, token)
	r.mu.Unlock()
}

// deliver never blocks the subscription: a message that does not fit
// (never, for an answer of the size asked for) is dropped, which a direct
// get notices as a gap in its answer's sequence.
func (r *replyMux) deliver(m *nats.Msg) {
	if r.accept != nil && !r.accept(m) {
		return
	}
	token := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	r.mu.Lock()
	ch := r.waiting[token]
	r.mu.Unlock()
	if ch != nil {
		select {
		case ch <- m:
		default:
		}
	}
}

// nodeReplies is one reply subscription of the node, made on first use.
type nodeReplies struct {
	accept func(*nats.Msg) bool // the mux's (replyMux.accept)
	once   sync.Once
	mux    *replyMux
	inbox  string // ends with '.'
	closed chan struct{}
	err    error
}

// replies is r's subscription, made now if it was not yet.
func (n *Node) replies(r *nodeReplies) (*replyMux, string, <-chan struct{}, error) {
	r.once.Do(func() {
		r.mux = &replyMux{waiting: map[string]chan *nats.Msg{}, accept: r.accept}
		r.inbox = n.nc.NewRespInbox() + "."
		_, r.err = n.nc.Subscribe(r.inbox+"*", r.mux.deliver)
		// Requests waiting when the connection closes end then.
		r.closed = n.ncClosed
	})
	return r.mux, r.inbox, r.closed, r.err
}
