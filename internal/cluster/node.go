// Package cluster is the foundation for running agentd as several nodes on
// NATS JetStream: which node owns a session (leases in a KV bucket, with an
// epoch to fence a stale owner's writes), how a command reaches the owner
// (request/reply on the owning node's subject) and how a session's events
// are kept so a client of any node can resume by seq (a stream with dedupe
// by message id). Package embeddednats runs the NATS server in the process
// when there is no external one.
//
// Nothing here reads the environment or knows about sessions beyond their
// ids; the serve wiring passes one Config and decides what the payloads are.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Names shared by every node of a cluster. They are fixed rather than
// configurable so two nodes can never disagree about them.
const (
	// LeaseBucket is the KV bucket holding one lease per owned session.
	LeaseBucket = "AGENTD_LEASES"
	// EventStream is the stream keeping every session's events.
	EventStream = "AGENTD_EVENTS"

	evPrefix = "agentd.ev."
)

// Defaults for what a Config leaves zero.
const (
	// DefaultLeaseTTL is Config.LeaseTTL's default.
	DefaultLeaseTTL = 10 * time.Second
	// DefaultRequestTimeout is Config.RequestTimeout's default.
	DefaultRequestTimeout = 10 * time.Second
)

// Bounds on the node's own talk with JetStream.
const (
	// setupAttempt bounds one try at creating the buckets and streams; a
	// request sent while JetStream has no leader gets no answer at all.
	setupAttempt = 2 * time.Second
	// setupRetry is the pause between those tries.
	setupRetry = 100 * time.Millisecond
	// dedupeWindow is how long a stream remembers a message id, so a
	// write retried within it is stored once.
	dedupeWindow = 2 * time.Minute
	// fetchWait bounds one fetch from a consumer (and directWait one
	// direct get's message).
	fetchWait = 5 * time.Second
	// consumerIdle is how long the server keeps a consumer nobody reads,
	// in case its deletion (bounded by consumerDelete) does not arrive.
	consumerIdle   = 30 * time.Second
	consumerDelete = time.Second
)

// Config is everything a Node needs; the serve wiring fills it from flags.
type Config struct {
	// NodeID names this node in leases and event headers; required and
	// unique in the cluster (two processes with one id would each believe
	// the other's leases are theirs).
	NodeID string
	// URL is the NATS server to connect to: an external cluster's address,
	// or embeddednats.Server.ClientURL. Several URLs may be given
	// comma-separated.
	URL string
	// LeaseTTL is how long a lease lasts without renewal, so how long a dead
	// node's sessions stay unowned. Renewal runs every LeaseTTL/3. Zero
	// means DefaultLeaseTTL.
	LeaseTTL time.Duration
	// RequestTimeout bounds each transcript mirror write and journal
	// append; a journal Load gets four times as long. Zero means
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Replicas is how many copies JetStream keeps of leases and events;
	// 1 for a single server, 3 for a production cluster. Zero means 1.
	Replicas int
	// EventMaxAge drops events older than this from the stream; zero keeps
	// them until the stream's limits (none by default).
	EventMaxAge time.Duration
	// JournalMaxAge drops command outcomes older than this from the
	// journal stream; it must exceed the pipeline's outcome retention (a
	// day by default). Zero means 25h.
	JournalMaxAge time.Duration
	// Key is the cluster's key (key.go), the same on every node;
	// required. Nodes sign what they send each other with it and act only
	// on what it signed, and the node authenticates to NATS with it
	// unless NATS names other credentials.
	Key *Key
	// NATS are the credentials and TLS settings for an external NATS.
	NATS Credentials
	// InProcess, when set, connects to a NATS server in this process
	// (embeddednats.Server) without a socket, whatever URL says: the
	// embedded server's TLS is then no concern of its own node.
	InProcess nats.InProcessConnProvider
	// Logger receives the node's diagnostics; nil discards them.
	Logger *slog.Logger
}

// Node is one agentd process's membership in the cluster: its NATS
// connection, the leases it holds and the goroutine renewing them.
type Node struct {
	cfg    Config
	log    *slog.Logger
	nc     *nats.Conn
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	events jetstream.Stream
	st     store // session state: transcripts, journal, index (store.go)

	// mu guards the fields below. Lock order: a leaf; no lease, follow
	// or signal lock is taken under it (leaseList copies the leases out).
	mu      sync.Mutex
	leases  map[string]*Lease // live leases by session id
	closed  bool
	nodesKV jetstream.KeyValue // NodeBucket once looked up (nodeBucket)
	fpKey   []byte             // the journal's fingerprint key (keys.go)

	sig *signer // signs and checks what nodes send each other (sign.go)

	stopRenew context.CancelFunc
	renewDone chan struct{}
	ncClosed  chan struct{}
	// reconn fires each time the connection to NATS comes back: leases
	// and the membership record are renewed at once, and follows start
	// again from their last seq (reconnect.go).
	reconn *signal

	// renewPaused stops renewals without stopping anything else, so a test
	// can play a node that froze (a long GC pause, a partition) and lose
	// its leases to another node while it still thinks it owns them.
	renewPaused atomic.Bool

	sendReplies nodeReplies // answers to SendNode (members.go)
	// refused counts messages refused for their signature (sign.go).
	refused atomic.Int64
	// calls counts SendNode's requests whose done has not returned yet;
	// Close waits for them.
	calls  sync.WaitGroup
	direct nodeReplies // answers to direct gets (directget.go)
	// consumerReads counts the reads that went on with a consumer after
	// direct gets (directget.go), so a test can tell the fast path works.
	consumerReads atomic.Int64
}

// ValidID reports whether id can name a session or a node in a cluster:
// it is part of NATS subjects, so it must be one subject token, of
// letters, digits, '-' and '_' only, at most 200 of them. A loop, not a
// regular expression: ^[A-Za-z0-9_-]{1,200}$ compiled at package init
// to 200 copies of its class, 194 KB in 2,630 allocations in every
// agentd process.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > 200 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// CheckSessionID tells whether id can name a session in a cluster (see
// ValidID).
func CheckSessionID(id string) error {
	if !ValidID(id) {
		return fmt.Errorf("cluster: session id %q is not usable as a NATS subject token (letters, digits, '-' and '_', at most 200)", id)
	}
	return nil
}

// Join connects to NATS, makes sure the lease bucket and the event stream
// exist (creating them with this node's settings if not), and starts the
// lease renewal goroutine. ctx bounds the setup only; Close ends the node.
// While a clustered JetStream is still electing its leader, Join retries
// until ctx is done.
func Join(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.NodeID == "" {
		return nil, errors.New("cluster: a node id is required")
	}
	if !ValidID(cfg.NodeID) {
		return nil, fmt.Errorf("cluster: node id %q must use letters, digits, '-' and '_', at most 200", cfg.NodeID)
	}
	if cfg.URL == "" {
		return nil, errors.New("cluster: a NATS URL is required")
	}
	if cfg.Key == nil {
		return nil, errors.New("cluster: the cluster key is required")
	}
	auth, err := cfg.NATS.options(cfg.Key)
	if err != nil {
		return nil, err
	}
	if cfg.InProcess != nil {
		auth = append(auth, nats.InProcessServer(cfg.InProcess))
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("node", cfg.NodeID)

	ncClosed := make(chan struct{})
	reconn := newSignal()
	nc, err := nats.Connect(cfg.URL, append(auth,
		nats.Name("agentd "+cfg.NodeID),
		// A node never gives NATS up: nats.go's default of 60 tries, 2 s
		// apart, left a node whose NATS was away for two minutes
		// disconnected for good, renewing nothing while it served.
		// Tries back off from 100 ms to 2 s, with up to half of that
		// again as jitter so that nodes do not all come back at once:
		// a flat 2 s (and 1 s of jitter) spent up to a third of a lease
		// after NATS was back before a node renewed what it held.
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(reconnectDelay),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("cluster: lost the connection to NATS; reconnecting", "err", err)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("cluster: reconnected to NATS", "url", c.ConnectedUrlRedacted())
			reconn.fire()
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(ncClosed) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Warn("cluster: NATS async error", "subject", subj, "err", err)
		}),
	)...)
	if err != nil {
		if (errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrNkeysNotSupported)) && !cfg.NATS.HasAuth() {
			return nil, fmt.Errorf("cluster: connecting to NATS at %s: %w (this node authenticated with its cluster key, public key %s: is it the key of the node running the NATS server, or does this NATS want other credentials?)", cfg.URL, err, cfg.Key.PublicKey())
		}
		return nil, fmt.Errorf("cluster: connecting to NATS at %s: %w", cfg.URL, err)
	}
	warnPlain(nc, cfg.InProcess != nil, log)
	n := &Node{
		cfg:       cfg,
		log:       log,
		nc:        nc,
		leases:    make(map[string]*Lease),
		renewDone: make(chan struct{}),
		ncClosed:  ncClosed,
		reconn:    reconn,
		sig:       newSigner(cfg.Key, cfg.NodeID),
	}
	n.sendReplies.accept = n.acceptReply
	if err := n.setup(ctx); err != nil {
		nc.Close()
		<-ncClosed
		return nil, err
	}
	// Not fatal: left as they are, those leases run out in a TTL.
	if dropped, err := n.dropOwnLeases(ctx); err != nil {
		log.Warn("cluster: the leases of this node's previous process stay until they run out", "err", err)
	} else if dropped > 0 {
		log.Info("cluster: dropped the leases of this node's previous process", "leases", dropped)
	}
	renewCtx, stop := context.WithCancel(context.Background())
	n.stopRenew = stop
	go n.renewLoop(renewCtx)
	return n, nil
}

// warnPlain logs a connection to NATS on another host that is not
// encrypted: the key never crosses it, but everything the nodes send does.
func warnPlain(nc *nats.Conn, inProcess bool, log *slog.Logger) {
	if inProcess {
		return
	}
	if _, err := nc.TLSConnectionState(); err == nil {
		return
	}
	host, _, err := net.SplitHostPort(nc.ConnectedAddr())
	if ip := net.ParseIP(host); err == nil && ip != nil && ip.IsLoopback() {
		return
	}
	log.Warn("cluster: the connection to NATS is not encrypted; what nodes send each other (sessions, transcripts) crosses the network readable: give the NATS server TLS and this node --nats-tls-ca", "nats", nc.ConnectedAddr())
}

func (n *Node) setup(ctx context.Context) error {
	js, err := jetstream.New(n.nc)
	if err != nil {
		return fmt.Errorf("cluster: JetStream: %w", err)
	}
	n.js = js
	kvCfg := jetstream.KeyValueConfig{
		Bucket:      LeaseBucket,
		Description: "agentd session ownership leases",
		History:     1,
	}
	evCfg := jetstream.StreamConfig{
		Name:        EventStream,
		Description: "agentd session events, by session",
		Subjects:    []string{evPrefix + ">"},
		Storage:     jetstream.FileStorage,
		Replicas:    n.cfg.Replicas,
		MaxAge:      n.cfg.EventMaxAge,
		Duplicates:  dedupeWindow,
		AllowDirect: true,
	}
	for {
		// Bound each attempt: a request sent while JetStream has no leader
		// gets no answer at all, and would otherwise wait for all of ctx.
		actx, cancel := context.WithTimeout(ctx, setupAttempt)
		err = n.ensure(actx, kvCfg, evCfg)
		cancel()
		if err == nil || errors.Is(err, errDamagedKey) || errors.Is(err, errWrongKey) {
			return err
		}
		n.log.Debug("cluster: JetStream not ready, retrying", "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: creating the lease bucket and streams: %w (gave up: %w)", err, context.Cause(ctx))
		case <-time.After(setupRetry):
		}
	}
}

func (n *Node) ensure(ctx context.Context, kvCfg jetstream.KeyValueConfig, evCfg jetstream.StreamConfig) error {
	// Another node may have created them with other replica counts or
	// limits; the first node's settings stand and this one adopts them,
	// rather than nodes rewriting each other's configuration on every start.
	kv, err := n.keyValue(ctx, kvCfg)
	if err != nil {
		return err
	}
	st, err := n.ensureStream(ctx, evCfg)
	if err != nil {
		return err
	}
	n.kv, n.events = kv, st
	if err := n.ensureStore(ctx); err != nil {
		return err
	}
	n.fpKey, err = n.fingerprintKey(ctx)
	return err
}

// ID is this node's id.
func (n *Node) ID() string { return n.cfg.NodeID }

// LeaseTTL is the lease duration in effect.
func (n *Node) LeaseTTL() time.Duration { return n.cfg.LeaseTTL }

// Close leaves the cluster abruptly, as a crash would: renewal stops, every
// lease ends locally with ErrNodeClosed (its Done closes) but stays in the
// bucket until it expires, so another node takes the sessions over after
// LeaseTTL. Use Drain to hand them over at once. Close waits for the
// renewal goroutine, for the handlers of requests in flight (ServeNode)
// to return, and for the requests this node sent (SendNode) to end: each
// not answered by then ends with ErrNodeClosed.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	leases := n.leaseList()
	n.mu.Unlock()

	n.stopRenew()
	<-n.renewDone
	for _, l := range leases {
		l.end(ErrNodeClosed)
	}
	// Drain lets handlers in flight finish and send their replies.
	if err := n.nc.Drain(); err != nil {
		n.nc.Close()
	}
	<-n.ncClosed
	// The connection is closed, so every request still waiting ends now.
	n.calls.Wait()
	return nil
}

// Drain hands this node's sessions over: it releases every lease (so
// another node can acquire each at once instead of after LeaseTTL), then
// closes the node. It returns the first release that failed; the node is
// closed whatever happened.
func (n *Node) Drain(ctx context.Context) error {
	n.mu.Lock()
	leases := n.leaseList()
	n.mu.Unlock()
	var first error
	for _, l := range leases {
		if err := l.Release(ctx); err != nil && first == nil {
			first = err
		}
	}
	n.Close()
	return first
}

// Leases lists the leases this node holds now.
func (n *Node) Leases() []*Lease {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leaseList()
}

func (n *Node) leaseList() []*Lease {
	out := make([]*Lease, 0, len(n.leases))
	for _, l := range n.leases {
		out = append(out, l)
	}
	return out
}

// Lease returns this node's live lease on a session, or nil.
func (n *Node) Lease(sessionID string) *Lease {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leases[sessionID]
}

// renewLoop renews every lease the node holds each LeaseTTL/3. A renewal
// that finds the lease taken ends it (its Done closes) from here, with no
// node lock held, so whatever watches Done may call back into the node.
func (n *Node) renewLoop(ctx context.Context) {
	defer close(n.renewDone)
	n.everyThirdTTL(ctx, func(every time.Duration) { n.renewAll(ctx, every) })
}

// everyThirdTTL calls fn every LeaseTTL/3, the interval of every renewal
// a node makes, and each time the connection to NATS comes back, until
// ctx ends; not while renewals are paused (a test
// freezing a node).
func (n *Node) everyThirdTTL(ctx context.Context, fn func(every time.Duration)) {
	every := n.cfg.LeaseTTL / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		// Also at once when NATS is back: renewals failed while it was
		// away, and the time left on each lease is short.
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.reconn.wait():
			t.Reset(every)
		}
		if !n.renewPaused.Load() {
			fn(every)
		}
	}
}

// renewers bounds the renewals in flight at once: one at a time, a
// node whose renewals slowed to milliseconds under load (JetStream's
// disk, a busy machine) got round to its thousandth lease after the
// lease had run out.
const renewers = 32

// renewAll renews every lease this node holds, renewers at a time, and
// returns when all have been tried.
func (n *Node) renewAll(ctx context.Context, every time.Duration) {
	leases := n.Leases()
	next := make(chan *Lease)
	var wg sync.WaitGroup
	for range min(renewers, len(leases)) {
		wg.Go(func() {
			for l := range next {
				rctx, cancel := context.WithTimeout(ctx, every)
				err := l.Renew(rctx)
				cancel()
				// A lease released meanwhile (a session unloaded, handed
				// over on SIGTERM) is not a failure.
				if err != nil && ctx.Err() == nil && !errors.Is(err, ErrReleased) {
					n.log.Warn("cluster: lease renewal failed", "session", l.sessionID, "epoch", l.epoch, "err", err)
				}
			}
		})
	}
	for _, l := range leases {
		if ctx.Err() != nil {
			break
		}
		next <- l
	}
	close(next)
	wg.Wait()
}

func (n *Node) track(l *Lease) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrNodeClosed
	}
	n.leases[l.sessionID] = l
	return nil
}

func (n *Node) untrack(l *Lease) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.leases[l.sessionID] == l {
		delete(n.leases, l.sessionID)
	}
}
