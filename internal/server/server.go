// Package server is the face-neutral core of agentd serve: the sessions
// it hosts, by id, and everything every protocol face needs around them.
//
//   - Sessions by id, within a limit: creation, loading from a file,
//     deletion, and lazy reloading after a restart, so an id a client was
//     given keeps working without load_session. An index on disk remembers
//     every id, its file, and how far its event seq went, so seqs never go
//     backwards across restarts.
//   - Clients (connections of any face) with an outbound queue each,
//     bounded per client and for the whole server; subscriptions that take
//     a cursor and answer "too old" for one the log cannot serve (older
//     than the log, or newer than the session's last event); fan-out that
//     encodes each event once per wire format.
//   - The command pipeline (lanes, replay, idempotency, dependsOn,
//     versions, the durable journal), shared by every face, so commands
//     of one session are ordered whichever face sent them.
//   - Rate limits with a separate budget for control commands, the
//     load-path rule, the Host check every HTTP request passes, and the
//     counters behind health and metrics.
//
// A face translates its wire to these calls and their results and errors
// (*fault.Error) back to its wire. It reaches a session through the
// server for every command and never keeps one.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd-dev/agentd/internal/cluster"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/health"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
)

// Builder makes sessions; the engine (package engine) is one.
type Builder interface {
	Session(spec sessionspec.Spec) (*session.Session, error)
}

// BuilderFunc is a function used as a Builder.
type BuilderFunc func(spec sessionspec.Spec) (*session.Session, error)

// Session calls f.
func (f BuilderFunc) Session(spec sessionspec.Spec) (*session.Session, error) { return f(spec) }

// Limits bound what clients can ask of the server. Zero values take the
// defaults of DefaultLimits; a negative rate disables that rate limit.
type Limits struct {
	MaxSessions    int
	MaxConnections int
	// MaxFrameBytes bounds one inbound frame (WebSocket message, stdio
	// line, request body).
	MaxFrameBytes int
	// SessionRate and GlobalRate are data-plane commands per minute
	// (sliding window) per session (server commands share one window)
	// and for the whole server; ControlRate is control commands per
	// minute per session, counted apart; UIResponseRate bounds answers to
	// questions per session on top of that.
	SessionRate    int
	GlobalRate     int
	ControlRate    int
	UIResponseRate int
	// MaxPending bounds the commands one client has in flight.
	MaxPending int
	// MaxQueuedBytes bounds what may wait to be written to one client;
	// MaxQueuedBytesTotal what may wait for all clients together. A client
	// beyond either is disconnected (it can resume with its last seq).
	MaxQueuedBytes      int
	MaxQueuedBytesTotal int64
	// ShutdownTimeout is how long running commands may drain on shutdown.
	ShutdownTimeout time.Duration
	// DependencyTimeout, IdempotencyTTL and the command timeouts configure
	// the pipeline; LongCommandTimeout (prompt, bash, compact, ...) of 0
	// means none.
	DependencyTimeout  time.Duration
	IdempotencyTTL     time.Duration
	ReadTimeout        time.Duration
	MutateTimeout      time.Duration
	LongCommandTimeout time.Duration
}

// DefaultLimits are pi-server's limits, with agentd's per-client and
// server-wide ones.
func DefaultLimits() Limits {
	return Limits{
		MaxSessions: 100, MaxConnections: 1000, MaxFrameBytes: 10 << 20,
		SessionRate: 100, GlobalRate: 1000, ControlRate: 120, UIResponseRate: 60,
		MaxPending: 256, MaxQueuedBytes: 64 << 20, MaxQueuedBytesTotal: 256 << 20,
		ShutdownTimeout:   30 * time.Second,
		DependencyTimeout: pipeline.DefaultDependencyTimeout, IdempotencyTTL: pipeline.DefaultIdempotencyTTL,
		ReadTimeout: 30 * time.Second, MutateTimeout: 60 * time.Second,
	}
}

func (l *Limits) fill() {
	d := DefaultLimits()
	set := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	set(&l.MaxSessions, d.MaxSessions)
	set(&l.MaxConnections, d.MaxConnections)
	set(&l.MaxFrameBytes, d.MaxFrameBytes)
	set(&l.SessionRate, d.SessionRate)
	set(&l.GlobalRate, d.GlobalRate)
	set(&l.ControlRate, d.ControlRate)
	set(&l.UIResponseRate, d.UIResponseRate)
	set(&l.MaxPending, d.MaxPending)
	set(&l.MaxQueuedBytes, d.MaxQueuedBytes)
	if l.MaxQueuedBytesTotal == 0 {
		l.MaxQueuedBytesTotal = d.MaxQueuedBytesTotal
	}
	setD := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setD(&l.ShutdownTimeout, d.ShutdownTimeout)
	setD(&l.DependencyTimeout, d.DependencyTimeout)
	setD(&l.IdempotencyTTL, d.IdempotencyTTL)
	setD(&l.ReadTimeout, d.ReadTimeout)
	setD(&l.MutateTimeout, d.MutateTimeout)
}

// Config configures a Server.
type Config struct {
	Builder Builder
	// Sandbox is the mode the Builder's sessions run tools in when a
	// client chooses none (engine.Engine.SandboxMode); "" is full-access.
	// A client may choose it or a stricter one (sandbox.Choose).
	Sandbox sandbox.Mode
	// Cwd is the working directory of sessions created without one.
	Cwd string
	// SessionsDir is where sessions are stored; load_session accepts files
	// under it, under AllowedDirs, under ~/.pi/agent/sessions (Home) and
	// under Cwd's .pi/sessions (see CheckSessionPath).
	SessionsDir string
	AllowedDirs []string
	Home        string
	// StateDir holds the server's own files (the session index); "" keeps
	// them in memory.
	StateDir string
	// ExportsDir is where export_html may write besides a session's
	// working directory (the data dir's exports folder).
	ExportsDir string
	// Protected are files an export must never replace (the command
	// journal); the index and the hosted sessions' files are added.
	Protected []string
	// Journal keeps outcomes of identified commands across restarts; nil
	// keeps them in memory.
	Journal  pipeline.Journal
	Breakers *health.Breakers
	Health   *health.Health
	Metrics  *health.Metrics
	Limits   Limits
	// FingerprintKey keys the request fingerprints the journal keeps
	// (pipeline.Fingerprint). nil: a server on its own with a StateDir
	// makes one there once (fingerprint.key, 0600) and keeps it; a
	// cluster node, whose journal other nodes read, must be given the
	// cluster's (cluster.Node.FingerprintKey) and uses none without.
	FingerprintKey []byte
	// Auth, when set, decides about each connection besides the token
	// check (an operator's program: CommandAuthenticator).
	Auth Authenticator
	// Tokens, when set, verifies JWTs: a client presenting one acts for
	// its subject (see Principal).
	Tokens TokenVerifier
	// ReturnMemory makes the server give idle heap back to the system
	// after a burst (see relieveMemory). The process's runtime is the
	// server's then: set it in a server process, not in a test that
	// shares one.
	ReturnMemory bool
	Logger       *slog.Logger
	// Cluster, when set, makes the server one node of a cluster (see
	// cluster.go): sessions owned by leases, commands routed to the owner,
	// events through the cluster's stream. The caller joins and closes it
	// (after Shutdown); nil is a server on its own, exactly as without.
	Cluster *cluster.Node
	// SpreadSessions places a new session on its home node (rendezvous
	// hashing of its id over the live nodes) rather than on the node
	// that received the command creating it: load spreads evenly
	// whichever node clients reach, at the price of a hop for most of
	// their commands. A session whose owner is gone always goes to its
	// home.
	SpreadSessions bool
	// EventLogSize is how many events each session's log keeps (the
	// engine's setting; zero for session.DefaultEventLogSize). In a
	// cluster it bounds the seq jump after an owner's crash (nextSeq);
	// every node must use the same.
	EventLogSize int
}

// Server hosts sessions for every face.
type Server struct {
	cfg     Config
	lim     Limits
	log     *slog.Logger
	started time.Time
	rates   *rateLimits
	index   *index
	budget  budget
	scratch scratchPool // the writers' batch scratch

	ctx    context.Context // cancelled when the server closes
	cancel context.CancelFunc
	wg     sync.WaitGroup

	cl *clusterState // nil unless Config.Cluster

	reg         pipeline.Registry
	pipe        *pipeline.Pipeline
	onLifecycle []func(pipeline.Event)
	onShutdown  []func(drain time.Duration)
	onOpen      []func(h *Hosted)
	onNote      noteHandlers // by face (notes.go)

	// mu guards the session and client maps and the fields below. Lock
	// order: it is taken under a session's emitMu (Hosted.onEvent records
	// a new transcript file) and never held while calling a session,
	// the index, a subscription (Hosted.subMu) or a client: those are
	// read out under it and used after RUnlock.
	mu      sync.RWMutex
	clients map[*Client]struct{}
	// clientList is a snapshot of clients, replaced on every change.
	clientList atomic.Pointer[[]*Client]
	// sessions holds the hosted sessions; a nil value reserves an id
	// whose session is being made.
	sessions map[string]*Hosted
	// pending are ids whose session is on its way (an admitted create or
	// load, a lazy reload), closed when it has arrived or failed.
	pending map[string]chan struct{}
	closing bool

	wsBuffers      WriteBuffers
	executed       atomic.Int64
	doubleDetach   atomic.Int64
	rejected       sync.Map // Rejection -> *atomic.Int64
	rejectedBudget atomic.Int64
}

// New builds a server. Faces register their commands, then Start starts
// the pipeline.
func New(cfg Config) (*Server, error) {
	if cfg.Builder == nil {
		return nil, errors.New("server: no session builder")
	}
	cfg.Limits.fill()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Breakers == nil {
		cfg.Breakers = health.NewBreakers(health.Options{}, health.Options{})
	}
	if cfg.Health == nil {
		cfg.Health = health.NewHealth(cfg.Breakers)
	}
	s := &Server{
		cfg: cfg, lim: cfg.Limits, log: cfg.Logger, started: time.Now(),
		rates: newRateLimits(cfg.Limits), reg: pipeline.Registry{},
		clients: map[*Client]struct{}{}, sessions: map[string]*Hosted{}, pending: map[string]chan struct{}{},
	}
	s.budget.max = cfg.Limits.MaxQueuedBytesTotal
	s.ctx, s.cancel = context.WithCancel(context.Background())
	idx, err := openIndex(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	s.index = idx
	if s.cfg.FingerprintKey == nil && cfg.StateDir != "" && cfg.Cluster == nil {
		if s.cfg.FingerprintKey, err = fingerprintKey(cfg.StateDir); err != nil {
			_ = idx.close()
			return nil, err
		}
	}
	if cfg.Cluster != nil {
		s.cl = newClusterState(s, cfg.Cluster)
	}
	return s, nil
}

// WriteBuffers are the WebSocket write buffers of this server's
// connections.
func (s *Server) WriteBuffers() *WriteBuffers { return &s.wsBuffers }

// Limits are the limits in force.
func (s *Server) Limits() Limits { return s.lim }

// Breakers are the circuit breakers of the server's engine.
func (s *Server) Breakers() *health.Breakers { return s.cfg.Breakers }

// Health is the server's health.
func (s *Server) Health() *health.Health { return s.cfg.Health }

// Metrics are the server's /metrics (nil when none).
func (s *Server) Metrics() *health.Metrics { return s.cfg.Metrics }

// Logger is the server's logger.
func (s *Server) Logger() *slog.Logger { return s.log }

// Started is when the server started.
func (s *Server) Started() time.Time { return s.started }

// Context is cancelled when the server has closed.
func (s *Server) Context() context.Context { return s.ctx }

// Register adds a face's commands. Names must be unique across faces.
// Call it before Start.
func (s *Server) Register(reg pipeline.Registry) error {
	if s.pipe != nil {
		return errors.New("server: Register after Start")
	}
	for name, h := range reg {
		if _, dup := s.reg[name]; dup {
			return fmt.Errorf("server: command %q registered twice", name)
		}
		s.reg[name] = h
	}
	return nil
}

// OnLifecycle adds a listener of the pipeline's lifecycle events. It is
// called on the pipeline's goroutines and must not block.
func (s *Server) OnLifecycle(fn func(pipeline.Event)) { s.onLifecycle = append(s.onLifecycle, fn) }

// OnShutdown adds a function called when a shutdown begins, before the
// drain (a face tells its clients).
func (s *Server) OnShutdown(fn func(drain time.Duration)) { s.onShutdown = append(s.onShutdown, fn) }

// OnOpen registers fn to run when a session is created or loaded (also
// when it loads again after an unload or a restart), before the command
// that opened it goes on: a face restores what it keeps with a session
// there. It runs with no lock of the server held. Register before Start.
func (s *Server) OnOpen(fn func(h *Hosted)) { s.onOpen = append(s.onOpen, fn) }

// Start starts the command pipeline with every registered command.
func (s *Server) Start() error {
	if s.pipe != nil {
		return errors.New("server: started twice")
	}
	if s.cl != nil {
		s.cl.wrapHandlers(s.reg)
	}
	p, err := pipeline.New(pipeline.Options{
		Registry:          s.reg,
		Journal:           s.cfg.Journal,
		FingerprintKey:    s.cfg.FingerprintKey,
		Emit:              s.emitPipelineEvent,
		IdempotencyTTL:    s.lim.IdempotencyTTL,
		DependencyTimeout: s.lim.DependencyTimeout,
		ClassTimeouts: map[pipeline.Class]time.Duration{
			pipeline.ClassRead:   s.lim.ReadTimeout,
			pipeline.ClassMutate: s.lim.MutateTimeout,
			pipeline.ClassLong:   s.lim.LongCommandTimeout,
		},
		OnJournalError: func(err error) { s.log.Error("command journal", "err", err) },
		Log:            s.log,
	})
	if err != nil {
		return err
	}
	s.pipe = p
	if s.cl != nil {
		if err := s.cl.start(); err != nil {
			return fmt.Errorf("server: joining the cluster: %w", err)
		}
	}
	if s.cfg.ReturnMemory {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.relieveMemory(s.ctx)
		}()
	}
	return nil
}

func (s *Server) emitLifecycle(ev pipeline.Event) {
	for _, fn := range s.onLifecycle {
		fn(ev)
	}
}

// Pipeline is the command pipeline (after Start).
func (s *Server) Pipeline() *pipeline.Pipeline { return s.pipe }

// Submit puts a command through the pipeline; respond is called once with
// its outcome and must not block. On a cluster node, a command for a
// session another node runs goes there, and its outcome comes back here.
func (s *Server) Submit(cmd pipeline.Command, respond func(pipeline.Response)) {
	if s.cl != nil && cmd.Admit != nil {
		// A command may run on another node, whose pipeline knows its
		// replays: admitted here, before it goes, as every command.
		if err := cmd.Admit(); err != nil {
			respond(pipeline.Response{ID: cmd.ID, Command: cmd.Type, Err: err})
			return
		}
		cmd.Admit = nil
	}
	if s.cl != nil && s.cl.route(cmd, respond) {
		return
	}
	s.submitLocal(cmd, respond)
}

func (s *Server) submitLocal(cmd pipeline.Command, respond func(pipeline.Response)) {
	s.pipe.Submit(cmd, func(r pipeline.Response) {
		if r.Err == nil || r.Err.Code != fault.ShuttingDown {
			s.executed.Add(1)
		}
		respond(r)
	})
}

// Admit counts a command of session sid ("" for a server command)
// against the rate limits of its class, or returns the limit that refuses
// it.
func (s *Server) Admit(sid string, class RateClass) *RateError {
	if e := s.rates.admit(sid, class, time.Now()); e != nil {
		s.Reject(e.Limit)
		return e
	}
	return nil
}

// Reject counts a command refused by a limit.
func (s *Server) Reject(limit Rejection) {
	v, _ := s.rejected.LoadOrStore(limit, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// Rejected is how many commands limit refused.
func (s *Server) Rejected(limit Rejection) int64 {
	if v, ok := s.rejected.Load(limit); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// Executed is how many commands the server has answered (shutdown
// refusals aside).
func (s *Server) Executed() int64 { return s.executed.Load() }

// RateUsage is the global window's count.
func (s *Server) RateUsage() int { return s.rates.usage(time.Now()) }

// More rejection kinds, counted by the server itself.
const (
	RejectSessionLimit    Rejection = "sessionLimit"
	RejectConnectionLimit Rejection = "connectionLimit"
	RejectMessageSize     Rejection = "messageSize"
	RejectPending         Rejection = "pendingLimit"
	RejectSendBudget      Rejection = "sendBudget"
)

func (s *Server) addClient(c *Client, transport string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return fault.New(fault.ShuttingDown, "Server shutting down")
	}
	if len(s.clients) >= s.lim.MaxConnections {
		s.Reject(RejectConnectionLimit)
		return fault.Errorf(fault.Limit, "Connection limit reached (%d connections)", s.lim.MaxConnections)
	}
	s.clients[c] = struct{}{}
	s.snapshotClients()
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.ConnectionOpened(transport)
	}
	return nil
}

// snapshotClients publishes the client list for readers that must not
// take the lock or allocate per call (a broadcast per lifecycle event to
// every connection); s.mu is held.
func (s *Server) snapshotClients() {
	list := make([]*Client, 0, len(s.clients))
	for c := range s.clients {
		list = append(list, c)
	}
	s.clientList.Store(&list)
}

func (s *Server) removeClient(c *Client, transport string) {
	s.mu.Lock()
	_, ok := s.clients[c]
	delete(s.clients, c)
	if ok {
		s.snapshotClients()
	}
	s.mu.Unlock()
	if !ok {
		s.doubleDetach.Add(1)
	}
	if ok && s.cfg.Metrics != nil {
		s.cfg.Metrics.ConnectionClosed(transport)
	}
}

// Clients lists the attached clients of a face ("" for every face).
func (s *Server) Clients(face string) []*Client {
	all := s.allClients()
	if face == "" {
		return all
	}
	out := make([]*Client, 0, len(all))
	for _, c := range all {
		if c.face == face {
			out = append(out, c)
		}
	}
	return out
}

// allClients is the current client list; callers must not modify it.
func (s *Server) allClients() []*Client {
	if p := s.clientList.Load(); p != nil {
		return *p
	}
	return nil
}

// EachClient calls fn for every attached client of a face, without
// copying the list: the cheap way to broadcast.
func (s *Server) EachClient(face string, fn func(*Client)) {
	for _, c := range s.allClients() {
		if c.face == face {
			fn(c)
		}
	}
}

// ClientCount is the number of attached clients.
func (s *Server) ClientCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.clients)
}

// Broadcast sends a frame to every client of a face: the same bytes,
// one queue append each.
func (s *Server) Broadcast(face string, f []byte) {
	s.broadcastHere(face, f)
	if s.cl != nil {
		s.cl.relay(notice{Face: face, Frame: f})
	}
}

// broadcastHere is Broadcast to this node's clients only.
func (s *Server) broadcastHere(face string, f []byte) {
	s.EachClient(face, func(c *Client) { c.Send(f) })
}

// emitPipelineEvent is a lifecycle event of this node's pipeline: its
// listeners get it, and in a cluster so do the clients of every other
// node, as one server's clients would.
func (s *Server) emitPipelineEvent(ev pipeline.Event) {
	// A command of this node's client that came back through another
	// node (a draining one held it) was told to this node's clients as
	// it was forwarded, and is answered so: not again here.
	r, remote := ev.Origin.(*Remote)
	if !ev.Announced && (!remote || s.cl == nil || r.Node != s.cl.node.ID()) {
		s.emitLifecycle(ev)
	}
	if s.cl != nil {
		via := ""
		if r, ok := ev.Origin.(*Remote); ok {
			via = r.Node
		}
		s.cl.relay(notice{Via: via, Event: toClusterEvent(ev)})
	}
}

// furthestBehind is the client with the most bytes queued, nil when none
// has any.
func (s *Server) furthestBehind() *Client {
	var victim *Client
	var most int64
	for _, c := range s.allClients() {
		if q := c.queued.Load(); q > most && !c.Closing() {
			victim, most = c, q
		}
	}
	return victim
}

// DoubleDetaches counts clients detached when they were not attached: a
// bug if ever above 0.
func (s *Server) DoubleDetaches() int64 { return s.doubleDetach.Load() }

// QueuedBytes is what waits to be sent to all clients, and the budget.
func (s *Server) QueuedBytes() (queued, budget int64) { return s.budget.total.Load(), s.budget.max }

// Journal is the command journal (nil when kept in memory).
func (s *Server) Journal() pipeline.Journal { return s.cfg.Journal }

// KnownCount is the number of session ids the index knows, loaded or not,
// deleted ones aside.
func (s *Server) KnownCount() int {
	n := 0
	for _, e := range s.index.all() {
		if !e.Deleted {
			n++
		}
	}
	return n
}

// SendBudgetCuts is how many clients were cut off by the server-wide
// send budget.
func (s *Server) SendBudgetCuts() int64 { return s.rejectedBudget.Load() }

// Shutdown drains the server: faces tell their clients, new commands are
// refused, running ones get until ctx ends (or the configured drain time)
// to finish; then clients are closed and sessions stopped, each recording
// where its seq ended.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	s.mu.Unlock()
	s.cfg.Health.BeginShutdown()
	for _, fn := range s.onShutdown {
		fn(s.lim.ShutdownTimeout)
	}
	dctx, cancel := context.WithTimeout(ctx, s.lim.ShutdownTimeout)
	defer cancel()
	if s.cl != nil {
		// Before the pipeline refuses anything: commands for sessions
		// already handed over are passed on to their new node.
		s.cl.handOver(dctx)
	}
	var err error
	if s.pipe != nil {
		err = s.pipe.Shutdown(dctx)
	}
	if s.cl != nil {
		// Commands passed on for this node's clients (those held by
		// the handover among them) get their answers before the
		// clients are closed.
		if dl, ok := dctx.Deadline(); ok {
			s.cl.awaitInflight(time.Until(dl))
		}
	}
	clients := s.Clients("")
	for _, c := range clients {
		c.Close(Close{Kind: CloseGoingAway, Reason: "Server shutting down"})
	}
	for _, c := range clients {
		c.wait(5 * time.Second)
	}
	s.cancel()
	for _, h := range s.Sessions() {
		if cerr := s.unload(h, false); cerr != nil {
			s.log.Warn("closing session", "session", h.id, "err", cerr)
		}
	}
	if s.cl != nil {
		s.cl.stop()
	}
	s.wg.Wait()
	if cerr := s.index.close(); cerr != nil {
		s.log.Warn("closing the session index", "err", cerr)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		// The drain ended early: what was still running was cancelled,
		// which is what a bounded shutdown means, not a failure.
		s.log.Warn("shutdown drain cut short; running commands were cancelled", "timeout", s.lim.ShutdownTimeout)
		return nil
	}
	return err
}

// Close stops the server without a drain.
func (s *Server) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return s.Shutdown(ctx)
}

// ShuttingDown reports whether a shutdown has begun.
func (s *Server) ShuttingDown() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closing
}
