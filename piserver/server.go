// Package piserver is the pi-server protocol 1.0.0 as an agentd face: many
// sessions, many clients, over WebSocket and stdio. Commands go through the
// shared command pipeline (admission, lanes, replay, dependsOn, versions,
// timeouts, durable outcomes); session events fan out to the connections
// subscribed to the session, each through a bounded queue of its own.
package piserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd-dev/agentd/health"
	"github.com/agentd-dev/agentd/llm"
	"github.com/agentd-dev/agentd/pipeline"
	"github.com/agentd-dev/agentd/session"
)

// ProtocolVersion is the pi-server protocol version this face speaks.
const ProtocolVersion = "1.0.0"

// Models is what the face needs of the model registry.
type Models interface {
	// Available lists the models that can be used now, in a stable order.
	Available() []*llm.Model
}

// SessionSpec says which session to make: a new one in Cwd, or the one
// stored in Open.
type SessionSpec struct {
	Cwd  string
	Open string
}

// Limits bound what clients can ask of the server. Zero values take the
// defaults of DefaultLimits; a negative rate disables that rate limit.
type Limits struct {
	MaxSessions    int
	MaxConnections int
	// MaxFrameBytes bounds one inbound frame (WebSocket message or stdio
	// line).
	MaxFrameBytes int
	// SessionRate and GlobalRate are commands per minute (sliding window)
	// per session (server commands share one bucket) and for the whole
	// server; UIResponseRate bounds extension_ui_response per session.
	SessionRate    int
	GlobalRate     int
	UIResponseRate int
	// MaxPending bounds the commands one connection has in flight.
	MaxPending int
	// MaxQueuedBytes bounds what may wait to be written to one connection;
	// a client that falls further behind is disconnected (it can resume
	// with switch_session afterSeq).
	MaxQueuedBytes int
	// UITimeout bounds how long an extension UI request waits.
	UITimeout time.Duration
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
	// Heartbeat is the WebSocket ping interval; a client that does not
	// answer within the next interval is disconnected. 0 disables it.
	Heartbeat time.Duration
}

// DefaultLimits are pi-server's limits, with agentd's per-connection ones.
func DefaultLimits() Limits {
	return Limits{
		MaxSessions: 100, MaxConnections: 1000, MaxFrameBytes: 10 << 20,
		SessionRate: 100, GlobalRate: 1000, UIResponseRate: 60,
		MaxPending: 256, MaxQueuedBytes: 64 << 20,
		UITimeout: time.Minute, ShutdownTimeout: 30 * time.Second,
		DependencyTimeout: pipeline.DefaultDependencyTimeout, IdempotencyTTL: pipeline.DefaultIdempotencyTTL,
		ReadTimeout: 30 * time.Second, MutateTimeout: 60 * time.Second,
		Heartbeat: 30 * time.Second,
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
	set(&l.UIResponseRate, d.UIResponseRate)
	set(&l.MaxPending, d.MaxPending)
	set(&l.MaxQueuedBytes, d.MaxQueuedBytes)
	setD := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setD(&l.UITimeout, d.UITimeout)
	setD(&l.ShutdownTimeout, d.ShutdownTimeout)
	setD(&l.DependencyTimeout, d.DependencyTimeout)
	setD(&l.IdempotencyTTL, d.IdempotencyTTL)
	setD(&l.ReadTimeout, d.ReadTimeout)
	setD(&l.MutateTimeout, d.MutateTimeout)
}

// Options configure a Server.
type Options struct {
	// NewSession makes a session; the server owns it from then on.
	NewSession func(ctx context.Context, spec SessionSpec) (*session.Session, error)
	Models     Models
	// Cwd is the working directory of sessions created without one.
	Cwd string
	// SessionsDir is where sessions are stored; load_session accepts files
	// under it, under AllowedDirs, under ~/.pi/agent/sessions (Home) and
	// under any .pi/sessions directory.
	SessionsDir string
	AllowedDirs []string
	Home        string
	// StateDir holds the server's own files (the session index).
	StateDir string
	// Journal keeps outcomes of identified commands across restarts; nil
	// keeps them in memory.
	Journal  pipeline.Journal
	Breakers *health.Breakers
	Health   *health.Health
	Metrics  *health.Metrics
	Limits   Limits
	// Delta makes message_update events carry only the delta.
	Delta   bool
	Version string
	Logger  *slog.Logger
}

// Server is the pi-server face. Serve connections with ServeWebSocket or
// ServeStdio; stop it with Shutdown.
type Server struct {
	opt     Options
	lim     Limits
	log     *slog.Logger
	pipe    *pipeline.Pipeline
	started time.Time

	rates        *rateLimits
	index        *sessionIndex
	commandSpecs map[string]*commandSpec

	ctx    context.Context // cancelled when the server closes
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.RWMutex
	conns    map[*conn]struct{}
	sessions map[string]*entry
	// creations are the admitted create/load commands naming a session,
	// closed when they have answered.
	creations map[string]chan struct{}
	closing   bool

	executed atomic.Int64
	rejected rejections
}

type rejections struct {
	sessionLimit, messageSize, rateLimit, globalRateLimit, connectionLimit, uiRateLimit, pending atomic.Int64
}

// New builds a server. Close or Shutdown releases it.
func New(opt Options) (*Server, error) {
	if opt.NewSession == nil || opt.Models == nil {
		return nil, errors.New("piserver: NewSession and Models are required")
	}
	opt.Limits.fill()
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Breakers == nil {
		opt.Breakers = health.NewBreakers(health.Options{}, health.Options{})
	}
	if opt.Health == nil {
		opt.Health = health.NewHealth(opt.Breakers)
	}
	if opt.Version == "" {
		opt.Version = "dev"
	}
	s := &Server{
		opt: opt, lim: opt.Limits, log: opt.Logger, started: time.Now(),
		conns: map[*conn]struct{}{}, sessions: map[string]*entry{}, creations: map[string]chan struct{}{},
	}
	s.rates = newRateLimits(s.lim)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	idx, err := openIndex(opt.StateDir)
	if err != nil {
		return nil, err
	}
	s.index = idx
	p, err := pipeline.New(pipeline.Options{
		Registry:          s.registry(),
		Journal:           opt.Journal,
		Emit:              s.onLifecycle,
		IdempotencyTTL:    s.lim.IdempotencyTTL,
		DependencyTimeout: s.lim.DependencyTimeout,
		ClassTimeouts: map[pipeline.Class]time.Duration{
			pipeline.ClassRead:   s.lim.ReadTimeout,
			pipeline.ClassMutate: s.lim.MutateTimeout,
			pipeline.ClassLong:   s.lim.LongCommandTimeout,
		},
		OnJournalError: func(err error) { s.log.Error("command journal", "err", err) },
	})
	if err != nil {
		return nil, err
	}
	s.pipe = p
	return s, nil
}

// entry is one session the server holds.
type entry struct {
	id      string
	sess    *session.Session
	created time.Time
	cwd     string
	unsub   func()
	lastCmd atomic.Int64 // unix ms of the last command, for zombie detection

	mu   sync.Mutex
	subs map[*conn]*subscription
}

// subscription is one connection watching one session. Until ready, live
// events are held back while the events the client missed are sent.
type subscription struct {
	after   uint64 // events with a seq at or below this were sent already
	ready   bool
	pending [][]byte
	seqs    []uint64
}

// lookup finds a session. A session whose create_session or load_session
// is admitted but not finished is waited for (within ctx): commands that
// bypass the lane, such as get_state or switch_session sent right behind
// create_session, see the session the client just asked for.
func (s *Server) lookup(ctx context.Context, id string) (*entry, error) {
	s.mu.RLock()
	e := s.sessions[id]
	pending := s.creations[id]
	s.mu.RUnlock()
	if e == nil && pending != nil {
		select {
		case <-pending:
		case <-ctx.Done():
		}
		s.mu.RLock()
		e = s.sessions[id]
		s.mu.RUnlock()
	}
	if e == nil {
		return nil, pipeline.Errorf(pipeline.CodeSessionNotFound, "Session %s not found", id)
	}
	e.lastCmd.Store(time.Now().UnixMilli())
	return e, nil
}

// expectSession notes an admitted command that will create session id;
// settle is called with its answer.
func (s *Server) expectSession(id string) (settle func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.creations[id] != nil {
		return func() {}
	}
	ch := make(chan struct{})
	s.creations[id] = ch
	return func() {
		s.mu.Lock()
		if s.creations[id] == ch {
			delete(s.creations, id)
		}
		s.mu.Unlock()
		close(ch)
	}
}

// addSession makes and registers a session under id, within the limit.
func (s *Server) addSession(ctx context.Context, id string, spec SessionSpec) (*entry, error) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil, pipeline.Errorf(pipeline.CodeShuttingDown, "Server is shutting down")
	}
	if _, dup := s.sessions[id]; dup {
		s.mu.Unlock()
		return nil, pipeline.Errorf(pipeline.CodeInvalid, "Session %s already exists", id)
	}
	// len counts the sessions being made too: their ids are reserved.
	if len(s.sessions) >= s.lim.MaxSessions {
		s.mu.Unlock()
		s.rejected.sessionLimit.Add(1)
		return nil, pipeline.Errorf(pipeline.CodeInvalid, "Session limit reached (%d sessions)", s.lim.MaxSessions)
	}
	s.sessions[id] = nil // reserve the id
	s.mu.Unlock()

	sess, err := s.opt.NewSession(ctx, spec)
	s.mu.Lock()
	if err != nil {
		delete(s.sessions, id)
		s.mu.Unlock()
		return nil, err
	}
	e := &entry{id: id, sess: sess, created: time.Now(), cwd: spec.Cwd, subs: map[*conn]*subscription{}}
	e.lastCmd.Store(time.Now().UnixMilli())
	s.sessions[id] = e
	n := len(s.sessions)
	s.mu.Unlock()
	e.unsub = sess.Subscribe(func(ev session.Event) { s.fanOut(e, ev) })
	if s.opt.Metrics != nil {
		s.opt.Metrics.SetSessions(n)
	}
	s.pipe.CreateSession(id)
	s.index.put(indexEntry{ID: id, File: sess.File(), Cwd: spec.Cwd, Created: e.created})
	return e, nil
}

// removeSession unloads a session: it stops, its file stays.
func (s *Server) removeSession(id string) error {
	s.mu.Lock()
	e := s.sessions[id]
	if e == nil {
		s.mu.Unlock()
		return pipeline.Errorf(pipeline.CodeSessionNotFound, "Session %s not found", id)
	}
	delete(s.sessions, id)
	n := len(s.sessions)
	s.mu.Unlock()
	s.pipe.DeleteSession(id)
	e.unsub()
	e.mu.Lock()
	subs := e.subs
	e.subs = map[*conn]*subscription{}
	e.mu.Unlock()
	for c := range subs {
		c.forget(id)
	}
	if s.opt.Metrics != nil {
		s.opt.Metrics.SetSessions(n)
	}
	return e.sess.Close()
}

// subscribe makes c watch e. With resume, the events after afterSeq are
// sent first (missed reports false when the log no longer reaches back).
func (s *Server) subscribe(c *conn, e *entry, resume bool, afterSeq uint64) (seq uint64, resumed bool) {
	sub := &subscription{}
	e.mu.Lock()
	if old := e.subs[c]; old != nil && !resume {
		e.mu.Unlock()
		return e.sess.Seq(), false
	}
	e.subs[c] = sub // replaces an older subscription: the client asked to resume
	e.mu.Unlock()
	c.watch(e.id)

	var missed []session.Event
	ok := false
	if resume {
		missed, ok = e.sess.EventsSince(afterSeq)
	}
	cur := e.sess.Seq()

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.subs[c] != sub {
		return cur, false // unsubscribed meanwhile
	}
	sub.after = cur
	if resume && ok {
		sub.after = afterSeq
		for _, ev := range missed {
			if f := s.eventFrame(e.id, ev); f != nil {
				c.send(f)
			}
			sub.after = ev.Seq
		}
	}
	for i, f := range sub.pending {
		if sub.seqs[i] > sub.after {
			c.send(f)
			sub.after = sub.seqs[i]
		}
	}
	sub.pending, sub.seqs, sub.ready = nil, nil, true
	return max(cur, sub.after), resume && ok
}

// subscribed reports whether c watches e already.
func (e *entry) subscribed(c *conn) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.subs[c] != nil
}

func (s *Server) unsubscribeAll(c *conn, ids []string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, id := range ids {
		if e := s.sessions[id]; e != nil {
			e.mu.Lock()
			delete(e.subs, c)
			e.mu.Unlock()
		}
	}
}

// fanOut sends one session event to the session's subscribers. It runs on
// the session's emitting goroutine: it encodes once and only queues.
func (s *Server) fanOut(e *entry, ev session.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.subs) == 0 {
		return
	}
	f := s.eventFrame(e.id, ev)
	if f == nil {
		return
	}
	if s.opt.Metrics != nil {
		s.opt.Metrics.Event(string(ev.Type))
	}
	for c, sub := range e.subs {
		if !sub.ready {
			sub.pending = append(sub.pending, f)
			sub.seqs = append(sub.seqs, ev.Seq)
			continue
		}
		if ev.Seq > sub.after {
			sub.after = ev.Seq
			c.send(f)
		}
	}
}

// broadcast sends a frame to every connection.
func (s *Server) broadcast(f []byte) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for c := range s.conns {
		c.send(f)
	}
}

func (s *Server) addConn(c *conn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return &refusal{closeGoingAway, "Server shutting down"}
	}
	if len(s.conns) >= s.lim.MaxConnections {
		s.rejected.connectionLimit.Add(1)
		return &refusal{closeTryAgain, fmt.Sprintf("Connection limit reached (%d connections)", s.lim.MaxConnections)}
	}
	s.conns[c] = struct{}{}
	if s.opt.Metrics != nil {
		s.opt.Metrics.ConnectionOpened(c.transport)
	}
	return nil
}

func (s *Server) removeConn(c *conn) {
	s.mu.Lock()
	_, ok := s.conns[c]
	delete(s.conns, c)
	s.mu.Unlock()
	if ok && s.opt.Metrics != nil {
		s.opt.Metrics.ConnectionClosed(c.transport)
	}
}

// refusal is a connection the server turns away, with the close code and
// reason the client sees.
type refusal struct {
	code   int
	reason string
}

func (r *refusal) Error() string { return r.reason }

// Shutdown drains the server: every client is told, new commands are
// refused, running ones get until ctx ends (or the configured drain time)
// to finish; then connections are closed and sessions stopped.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	s.mu.Unlock()
	s.opt.Health.BeginShutdown()
	s.broadcast(shutdownFrame(s.lim.ShutdownTimeout))
	dctx, cancel := context.WithTimeout(ctx, s.lim.ShutdownTimeout)
	defer cancel()
	err := s.pipe.Shutdown(dctx)
	s.mu.RLock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.RUnlock()
	for _, c := range conns {
		c.shutdown(1001, "Server shutting down")
	}
	for _, c := range conns {
		c.wait(5 * time.Second)
	}
	s.cancel()
	s.mu.Lock()
	ids := make([]string, 0, len(s.sessions))
	for id, e := range s.sessions {
		if e != nil {
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	for _, id := range ids {
		_ = s.removeSession(id)
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

// entries lists the loaded sessions, oldest first.
func (s *Server) entries() []*entry {
	s.mu.RLock()
	out := make([]*entry, 0, len(s.sessions))
	for _, e := range s.sessions {
		if e != nil {
			out = append(out, e)
		}
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].created.Before(out[j].created) })
	return out
}

// absDir checks that dir is an existing absolute directory.
func absDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return pipeline.Errorf(pipeline.CodeInvalid, "Validation failed: cwd: must be an absolute path")
	}
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return pipeline.Errorf(pipeline.CodeInvalid, "Validation failed: cwd: %s is not a directory", dir)
	}
	return nil
}
