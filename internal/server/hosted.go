package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/cluster"
	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/sandbox"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// Hosted is one session the server holds. A face gets it from the server
// for the command at hand (Session) and does not keep it.
type Hosted struct {
	srv     *Server
	id      string
	sess    *session.Session
	created time.Time
	cwd     string
	owner   string
	sandbox sandbox.Mode // what its tools run in
	file    transcript.FileID
	unsub   func()
	lastCmd atomic.Int64 // unix ms of the last command, for zombie detection

	// subMu guards subs and orders every frame queued to them. Lock
	// order: taken under the session's emitMu (fanOut runs in its
	// listener), never under Server.mu or Client.mu; under it are taken
	// Client.mu (SendFrame, watch, forget), Hold.mu (Subscribe) and
	// tracker.mu (a codec reading the status), which take nothing more.
	subMu sync.Mutex
	subs  map[*Client]*subscription

	track *tracker
	// gone is closed when the session is unloaded; deleted says whether
	// a client deleted it (rather than the server closing).
	gone    chan struct{}
	deleted atomic.Bool

	// started holds when each running tool call began, for the log; only
	// onEvent touches it, and the session calls that in order.
	started map[string]time.Time

	// cl is set on a cluster node for a session hosted here; feed for a
	// session hosted elsewhere that clients here watch (no sess then).
	cl   *hosted
	feed *feed
}

// ID is the id clients know the session by.
func (h *Hosted) ID() string { return h.id }

// Session is the engine's session.
func (h *Hosted) Session() *session.Session { return h.sess }

// Cwd is the session's working directory.
func (h *Hosted) Cwd() string { return h.cwd }

// Sandbox is the mode the session's tools run in: the one its client
// chose, else the server's.
func (h *Hosted) Sandbox() sandbox.Mode { return h.sandbox }

// Owner is the subject of the authenticated client that created (or
// first loaded) the session; "" when none was authenticated.
func (h *Hosted) Owner() string { return h.owner }

// Gone is closed once the session is unloaded: deleted by a client
// (Deleted), or closed with the server.
func (h *Hosted) Gone() <-chan struct{} { return h.gone }

// Deleted reports whether a client deleted the session.
func (h *Hosted) Deleted() bool { return h.deleted.Load() }

// Created is when the session was loaded into this server.
func (h *Hosted) Created() time.Time { return h.created }

// Subscribers counts the clients watching the session.
func (h *Hosted) Subscribers() int {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	return len(h.subs)
}

// Subscribed reports whether c watches the session.
func (h *Hosted) Subscribed(c *Client) bool {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	return h.subs[c] != nil
}

// LastCommand is when a command last reached the session.
func (h *Hosted) LastCommand() time.Time { return time.UnixMilli(h.lastCmd.Load()) }

// NewID makes a session id: session-<ms base 36>-<8 hex>, pi-server's form.
func NewID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "session-" + strconv.FormatInt(time.Now().UnixMilli(), 36) + "-" + hex.EncodeToString(b[:])
}

// Expect notes an admitted command that will create or load session id,
// so commands that do not wait in the session's lane (a get_state sent
// right behind create_session) wait for it instead of finding nothing.
// The caller calls the returned function once that command has its
// outcome, whatever it is, before anything that might look the session up.
func (s *Server) Expect(id string) (settled func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending[id] != nil {
		return func() {}
	}
	ch := make(chan struct{})
	s.pending[id] = ch
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.pending[id] == ch {
				delete(s.pending, id)
			}
			s.mu.Unlock()
			close(ch)
		})
	}
}

// Session finds session id: loaded, on its way (waited for within ctx), or
// known from before a restart (loaded again now, under the same id and
// with its seq continuing).
func (s *Server) Session(ctx context.Context, id string) (*Hosted, error) {
	for attempt := 0; ; attempt++ {
		s.mu.RLock()
		h := s.sessions[id]
		pending := s.pending[id]
		s.mu.RUnlock()
		if h != nil {
			h.lastCmd.Store(time.Now().UnixMilli())
			return h, nil
		}
		if pending != nil && attempt < 3 {
			select {
			case <-pending:
			case <-ctx.Done():
				return nil, fault.Errorf(fault.Timeout, "Session %s is still being created", id)
			}
			continue
		}
		e, ok := s.index.get(id)
		restore := false
		if s.cl != nil {
			// A cluster's index and stream are the truth: the session may
			// have run on another node since this one last had it.
			var err error
			if e, ok, restore, err = s.cl.lookup(ctx, id, e, ok); err != nil {
				return nil, err
			}
		}
		if !ok || e.Deleted || e.File == "" {
			return nil, fault.Errorf(fault.NotFound, "Session %s not found", id)
		}
		if _, err := os.Stat(e.File); err != nil && !restore {
			return nil, fault.Errorf(fault.NotFound, "Session %s not found (its file %s is gone)", id, e.File)
		}
		h, err := s.openAs(ctx, id, e.Cwd, e.File, e.Owner, sandbox.Mode(e.Sandbox), false, restore)
		if err != nil {
			if fe := fault.As(err); fe != nil && fe.Code == fault.Conflict && attempt < 3 {
				continue // brought back by another command meanwhile
			}
			return nil, err
		}
		return h, nil
	}
}

// Sessions lists the loaded sessions, oldest first.
func (s *Server) Sessions() []*Hosted {
	s.mu.RLock()
	out := make([]*Hosted, 0, len(s.sessions))
	for _, h := range s.sessions {
		if h != nil {
			out = append(out, h)
		}
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].created.Equal(out[j].created) {
			return out[i].created.Before(out[j].created)
		}
		return out[i].id < out[j].id
	})
	return out
}

// SessionCount is the number of loaded sessions.
func (s *Server) SessionCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.sessions)
}

// Known is a session the server knows by id but has not loaded since it
// started: a client made it before a restart. It is loaded on first use.
type Known struct {
	ID      string
	File    string
	Cwd     string
	Owner   string
	Created time.Time
	Info    transcript.Info // from the file; zero when unreadable
}

// KnownSessions lists the sessions known from before a restart that are
// not loaded, oldest first; on a cluster node, also every session of the
// cluster that this node does not host.
func (s *Server) KnownSessions() []Known {
	var out []Known
	for _, e := range s.index.all() {
		if e.Deleted || e.File == "" {
			continue
		}
		s.mu.RLock()
		_, loaded := s.sessions[e.ID]
		s.mu.RUnlock()
		if loaded {
			continue
		}
		info, err := transcript.ReadInfo(e.File)
		if err != nil {
			continue // the file is gone: the id no longer works
		}
		out = append(out, Known{ID: e.ID, File: e.File, Cwd: e.Cwd, Owner: e.Owner, Created: e.Created, Info: info})
	}
	if s.cl != nil {
		out = s.cl.known(out) // and those of the other nodes
	}
	return out
}

// CreateRequest asks for a new session.
type CreateRequest struct {
	// ID is the id to give it; "" makes one.
	ID string
	// Cwd is its working directory; "" is the server's.
	Cwd string
	// Who is the client asking; its subject becomes the owner.
	Who Principal
	// Sandbox is the mode the client chose for this session's tools:
	// the server's or a stricter one (sandbox.Choose); "" is the
	// server's. It is kept in the index, so the session keeps it when it
	// is loaded again after a restart.
	Sandbox sandbox.Mode
}

// SandboxMode is the mode sessions run tools in unless a client chooses
// a stricter one.
func (s *Server) SandboxMode() sandbox.Mode {
	if s.cfg.Sandbox == "" {
		return sandbox.FullAccess
	}
	return s.cfg.Sandbox
}

// CheckSandbox applies the one rule for a client's choice of mode, for
// every face: "" or a mode no looser than the server's, else an invalid
// request whose message names the field and the modes allowed.
func (s *Server) CheckSandbox(want string) error {
	if _, err := sandbox.Choose(s.SandboxMode(), want); err != nil {
		return fault.Wrap(fault.Invalid, err, err.Error())
	}
	return nil
}

// Create makes a new session.
func (s *Server) Create(ctx context.Context, r CreateRequest) (*Hosted, error) {
	id := r.ID
	if id == "" {
		id = NewID()
	} else if err := CheckID(id); err != nil {
		return nil, err
	}
	cwd := r.Cwd
	if cwd == "" {
		cwd = s.cfg.Cwd
	} else if err := CheckCwd(cwd); err != nil {
		return nil, err
	}
	if err := s.CheckSandbox(string(r.Sandbox)); err != nil {
		return nil, err
	}
	if e, ok := s.index.get(id); ok && !e.Deleted && e.File != "" {
		if _, err := os.Stat(e.File); err == nil {
			return nil, fault.Errorf(fault.Conflict, "Session %s already exists", id)
		}
	}
	if s.cl != nil {
		if err := s.cl.free(ctx, id); err != nil {
			return nil, err
		}
	}
	return s.open(ctx, id, cwd, "", r.Who.Subject, r.Sandbox, true)
}

// LoadRequest asks to load a stored session file.
type LoadRequest struct {
	// ID is the id to give it; "" uses the id it had on this server
	// before, else the file's own.
	ID string
	// Path is the session file; it must pass the load-path rule.
	Path string
	// Who is the client asking: its subject becomes the owner unless
	// the session had one on this server before, and a session it may
	// not see is not loaded for it.
	Who Principal
	// Sandbox is the mode for its tools, as CreateRequest's; "" keeps
	// the mode the file had on this server (the server's when none). A
	// copy of a session (a fork) passes its source's, so copying never
	// loosens what a client chose.
	Sandbox sandbox.Mode
}

// Load loads a stored session file.
func (s *Server) Load(ctx context.Context, r LoadRequest) (*Hosted, error) {
	if r.ID != "" {
		if err := CheckID(r.ID); err != nil {
			return nil, err
		}
	}
	path, err := s.CheckSessionPath(r.Path)
	if err != nil {
		return nil, err
	}
	info, err := transcript.ReadInfo(path)
	if errors.Is(err, transcript.ErrNotRegular) {
		return nil, fault.Wrap(fault.Invalid, err, "Failed to load session from "+r.Path+": it is not a regular file")
	}
	if err != nil {
		return nil, fault.Wrap(fault.Invalid, err, "Failed to load session from "+r.Path+": not a session file")
	}
	if err := s.CheckSandbox(string(r.Sandbox)); err != nil {
		return nil, err
	}
	mode := r.Sandbox
	id := r.ID
	known, wasKnown := s.index.idOf(path)
	if id == "" {
		id = info.ID
		if wasKnown {
			id = known
		}
	}
	if e, ok := s.index.get(known); wasKnown && ok && e.Sandbox != "" && (mode == "" || sandbox.Mode(e.Sandbox).Stricter(mode)) {
		// The file of a session that chose a mode keeps it, under
		// another id too: loading it again never lifts it.
		mode = sandbox.Mode(e.Sandbox)
	}
	cwd := info.Cwd
	if st, err := os.Stat(cwd); cwd == "" || err != nil || !st.IsDir() {
		cwd = s.cfg.Cwd
	}
	if e, ok := s.index.get(id); ok && e.Owner != "" && !r.Who.MaySee(id, e.Owner) {
		return nil, fault.Errorf(fault.Forbidden, "Failed to load session from %s: it belongs to another user", r.Path)
	}
	h, err := s.open(ctx, id, cwd, path, r.Who.Subject, mode, false)
	if err != nil {
		if fe := fault.As(err); fe != nil {
			return nil, fe
		}
		s.log.Warn("load_session", "path", path, "err", err)
		return nil, fault.Wrap(fault.Failed, err, "Failed to load session from "+r.Path)
	}
	return h, nil
}

// open makes session id from file (or a new file when "") and hosts it.
func (s *Server) open(ctx context.Context, id, cwd, file, owner string, mode sandbox.Mode, fresh bool) (*Hosted, error) {
	return s.openAs(ctx, id, cwd, file, owner, mode, fresh, false)
}

// openAs is open; restore (a cluster node taking the session over) first
// writes file from the cluster's copy of the transcript.
func (s *Server) openAs(ctx context.Context, id, cwd, file, owner string, mode sandbox.Mode, fresh, restore bool) (*Hosted, error) {
	return s.openSpec(ctx, id, cwd, file, owner, mode, fresh, restore, sessionspec.Spec{})
}

// openSpec is openAs building the session from base, a spec the server
// completes (a subagent's, see hostChild).
func (s *Server) openSpec(ctx context.Context, id, cwd, file, owner string, mode sandbox.Mode, fresh, restore bool, base sessionspec.Spec) (*Hosted, error) {
	s.mu.RLock()
	full := len(s.sessions) >= s.lim.MaxSessions
	s.mu.RUnlock()
	if full {
		s.evictIdle()
	}
	var fid transcript.FileID
	if file != "" && !restore { // a file being restored is not there yet
		var err error
		if fid, err = transcript.FileIDOf(file); err != nil {
			return nil, fault.Wrap(fault.Invalid, err, "Failed to load session from "+file+": "+err.Error())
		}
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil, fault.New(fault.ShuttingDown, "Server is shutting down")
	}
	if _, dup := s.sessions[id]; dup {
		s.mu.Unlock()
		return nil, fault.Errorf(fault.Conflict, "Session %s already exists", id)
	}
	if file != "" {
		for _, h := range s.sessions {
			if h != nil && h.file == fid {
				s.mu.Unlock()
				return nil, fault.Errorf(fault.Conflict, "Session file %s is already loaded as session %s", file, h.id)
			}
		}
	}
	// len counts the sessions being made too: their ids are reserved.
	if len(s.sessions) >= s.lim.MaxSessions {
		s.mu.Unlock()
		s.Reject(RejectSessionLimit)
		return nil, fault.Errorf(fault.Limit, "Session limit reached (%d sessions)", s.lim.MaxSessions)
	}
	s.sessions[id] = nil // reserve the id
	// Lookups of the id wait for this, unless an admitted command
	// announced it already (Expect).
	arrived := s.pending[id]
	if arrived == nil {
		arrived = make(chan struct{})
		s.pending[id] = arrived
		defer func() {
			s.mu.Lock()
			if s.pending[id] == arrived {
				delete(s.pending, id)
			}
			s.mu.Unlock()
			close(arrived)
		}()
	}
	s.mu.Unlock()

	prev, _ := s.index.get(id)
	first := prev.Seq // never backwards for an id, even a reused one
	var lease *cluster.Lease
	// unreserve gives back the id, and the lease if one was taken, when
	// the open fails.
	unreserve := func(err error) (*Hosted, error) {
		s.mu.Lock()
		delete(s.sessions, id)
		s.mu.Unlock()
		if lease != nil {
			_ = lease.Release(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	var topts []transcript.Option
	if s.cl != nil {
		var err error
		if lease, first, topts, err = s.cl.claim(ctx, id, first, file, restore); err != nil {
			return unreserve(err)
		}
		if restore {
			if fid, err = transcript.FileIDOf(file); err != nil {
				return unreserve(fault.Wrap(fault.Internal, err, "Session "+id+": its restored transcript cannot be read: "+err.Error()))
			}
		}
	}
	if mode == "" && !fresh && !prev.Deleted {
		// A session loaded again keeps the sandbox it was created with.
		mode = sandbox.Mode(prev.Sandbox)
	}
	run := mode
	if base := s.SandboxMode(); !fresh && base.Stricter(mode) {
		// The server was restarted stricter than the mode this session
		// chose: the server's mode binds it now, and it still loads. The
		// index keeps the choice.
		run = ""
	}
	spec := base
	spec.Cwd, spec.SessionsDir, spec.Open, spec.FirstSeq, spec.Sandbox = cwd, s.cfg.SessionsDir, file, first, run
	spec.ReserveSeq = func(next uint64) uint64 { return s.reserveSeq(id, next) }
	spec.TranscriptOptions = topts
	spec.Children = s.hostChild(func() string { return owner })
	sess, err := s.cfg.Builder.Session(spec)
	if err == nil && file == "" {
		if p := sess.File(); p != "" {
			if fid, err = transcript.FileIDOf(p); err != nil {
				_ = sess.Close()
			}
		}
	}
	if err != nil {
		return unreserve(err)
	}
	if !fresh && prev.Owner != "" && !prev.Deleted {
		owner = prev.Owner
	}
	effective, _ := sandbox.Choose(s.SandboxMode(), string(run)) // checked by the Builder
	h := &Hosted{srv: s, id: id, sess: sess, created: time.Now(), cwd: cwd, owner: owner, sandbox: effective, file: fid, subs: map[*Client]*subscription{}, started: map[string]time.Time{}}
	h.lastCmd.Store(time.Now().UnixMilli())
	h.track = newTracker(sess)
	h.gone = make(chan struct{})
	created := h.created
	if !fresh && !prev.Created.IsZero() {
		created = prev.Created
	}
	if err := s.index.put(indexEntry{ID: id, File: sess.File(), Cwd: cwd, Owner: owner, Created: created, Seq: first, Sandbox: string(mode)}, true); err != nil {
		s.log.Error("recording the session", "session", id, "err", err)
	}
	if lease != nil {
		if err := s.cl.host(ctx, h, lease, first, !fresh); err != nil {
			_ = sess.Close()
			return unreserve(err)
		}
	}
	s.mu.Lock()
	s.sessions[id] = h
	n := len(s.sessions)
	s.mu.Unlock()
	h.unsub = sess.Subscribe(func(ev session.Event) { h.onEvent(ev) })
	if lease != nil {
		s.cl.adoptFeed(h) // clients here that followed it from the stream
	}
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.SetSessions(n)
	}
	if s.pipe != nil {
		s.pipe.CreateSession(id)
	}
	for _, fn := range s.onOpen {
		fn(h)
	}
	how := "created"
	if file != "" {
		how = "loaded"
	}
	s.log.Info("session "+how, "session", id, "cwd", cwd, "file", sess.File(), "seq", first)
	return h, nil
}

// reserveSeq records durably that session id may use seqs up to a block
// beyond next.
func (s *Server) reserveSeq(id string, next uint64) uint64 {
	limit := next + seqBlock - 1
	if err := s.index.update(id, true, func(e *indexEntry) { e.Seq = max(e.Seq, limit) }); err != nil {
		s.log.Error("reserving event seqs", "session", id, "err", err)
	}
	if s.cl != nil {
		s.cl.reserve(id, limit)
	}
	return limit
}

// onEvent follows the session: a new transcript (new, switch, fork,
// clone) is recorded under the session's id; every event goes to the
// subscribers.
func (h *Hosted) onEvent(ev session.Event) {
	if ev.Type == session.EventSessionChanged && ev.SessionFile != "" {
		s := h.srv
		if fid, err := transcript.FileIDOf(ev.SessionFile); err == nil {
			s.mu.Lock()
			h.file = fid
			s.mu.Unlock()
		}
		if err := s.index.update(h.id, false, func(e *indexEntry) { e.File = ev.SessionFile }); err != nil {
			s.log.Error("recording the session file", "session", h.id, "err", err)
		}
		if h.cl != nil {
			h.cl.fileChanged()
		}
	}
	h.logEvent(ev)
	h.track.observe(ev)
	h.fanOut(ev)
	if h.cl != nil {
		h.cl.onEvent()
	}
}

// logEvent records what a session does for its clients: each shell
// command at info (what ran, how it ended, how long it took), other tool
// calls at debug, each run's outcome at info. Prompt text stays out.
func (h *Hosted) logEvent(ev session.Event) {
	log := h.srv.log
	switch {
	case ev.Agent != nil && ev.Type == session.EventType(agent.EventToolExecutionStart):
		h.started[ev.Agent.ToolCallID] = time.Now()
	case ev.Agent != nil && ev.Type == session.EventType(agent.EventToolExecutionEnd):
		a := ev.Agent
		began, ok := h.started[a.ToolCallID]
		delete(h.started, a.ToolCallID)
		attrs := []any{"session", h.id, "tool", a.ToolName, "error", a.IsError}
		if ok {
			attrs = append(attrs, "ms", time.Since(began).Milliseconds())
		}
		if a.ToolName == "bash" {
			var args struct {
				Command string `json:"command"`
			}
			_ = json.Unmarshal(a.Args, &args)
			log.Info("shell command", append(attrs, "command", clip(args.Command, 500))...)
			return
		}
		log.Debug("tool call", attrs...)
	case ev.Type == session.EventStateChanged && ev.Outcome != "":
		log.Info("run ended", "session", h.id, "outcome", ev.Outcome)
	}
}

// clip shortens s for a log line, at a character boundary.
func clip(s string, n int) string { return clipRunes(s, n) }

// Delete unloads session id: it stops, its file stays, and its id no
// longer finds it.
func (s *Server) Delete(ctx context.Context, id string) error {
	s.mu.RLock()
	h := s.sessions[id]
	_, reserved := s.sessions[id]
	pending := s.pending[id] != nil
	s.mu.RUnlock()
	if h == nil && (pending || reserved) {
		// A create or load admitted before this: delete what it makes.
		var err error
		if h, err = s.Session(ctx, id); err != nil {
			return err
		}
	}
	if h == nil {
		if e, ok := s.index.get(id); ok && !e.Deleted && e.File != "" {
			// Known from before a restart and not loaded: forget it.
			return s.index.update(id, true, func(e *indexEntry) { e.Deleted = true })
		}
		return fault.Errorf(fault.NotFound, "Session %s not found", id)
	}
	return s.unload(h, true)
}

// unload stops a hosted session; deleted marks its id as free.
func (s *Server) unload(h *Hosted, deleted bool) error {
	s.mu.Lock()
	if s.sessions[h.id] != h {
		s.mu.Unlock()
		return fault.Errorf(fault.NotFound, "Session %s not found", h.id)
	}
	delete(s.sessions, h.id)
	n := len(s.sessions)
	s.mu.Unlock()
	if s.pipe != nil {
		s.pipe.DeleteSession(h.id)
	}
	h.unsub()
	if s.cl != nil {
		s.cl.unhost(h, deleted)
	}
	h.deleted.Store(deleted)
	close(h.gone)
	h.dropSubscribers()
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.SetSessions(n)
	}
	err := h.sess.Close()
	if deleted {
		s.log.Info("session deleted", "session", h.id)
	}
	// The exact last seq, so a client resuming after a clean restart
	// misses nothing.
	head := h.sess.Seq()
	if ierr := s.index.update(h.id, true, func(e *indexEntry) {
		e.Seq, e.Deleted = head, deleted
	}); ierr != nil {
		err = errors.Join(err, ierr)
	}
	return err
}

// dropSubscribers ends every subscription to h and returns the clients
// that had one.
func (h *Hosted) dropSubscribers() []*Client {
	h.subMu.Lock()
	subs := h.subs
	h.subs = map[*Client]*subscription{}
	h.subMu.Unlock()
	out := make([]*Client, 0, len(subs))
	for c := range subs {
		c.forget(h.id)
		out = append(out, c)
	}
	return out
}

// evictIdleAfter is how long a session must have been left alone before
// it may be unloaded to make room for another.
const evictIdleAfter = time.Minute

// evictIdle unloads the session left alone longest, to make room at the
// session limit: one that no client watches, that runs nothing, waits
// for no one and had no command for evictIdleAfter. It stays known (the
// index has it), so the next command for it loads it again. It reports
// whether one was unloaded.
func (s *Server) evictIdle() bool {
	cut := time.Now().Add(-evictIdleAfter).UnixMilli()
	var victim *Hosted
	for _, h := range s.Sessions() {
		last := h.lastCmd.Load()
		if last >= cut || h.Subscribers() > 0 || h.sess.Running() || len(h.sess.Interactions()) > 0 {
			continue
		}
		if victim == nil || last < victim.lastCmd.Load() {
			victim = h
		}
	}
	if victim == nil {
		return false
	}
	if err := s.unload(victim, false); err != nil {
		s.log.Warn("unloading an idle session", "session", victim.id, "err", err)
		return false
	}
	s.log.Info("session unloaded to make room", "session", victim.id, "idle", time.Since(time.UnixMilli(victim.lastCmd.Load())).Round(time.Second))
	return true
}

// Zombies counts idle sessions no command has touched for 5 minutes and
// no client watches.
func (s *Server) Zombies() int {
	cut := time.Now().Add(-5 * time.Minute).UnixMilli()
	n := 0
	for _, h := range s.Sessions() {
		if h.Subscribers() == 0 && !h.sess.Running() && h.lastCmd.Load() < cut {
			n++
		}
	}
	return n
}

// SessionsDir is where sessions are stored.
func (s *Server) SessionsDir() string { return s.cfg.SessionsDir }

// SwitchFile makes h continue in another stored session file: one that
// passes the load-path rule and no other hosted session has open.
func (s *Server) SwitchFile(h *Hosted, path string) error {
	real, err := s.CheckSessionPath(path)
	if err != nil {
		return err
	}
	fid, err := transcript.FileIDOf(real)
	if err != nil {
		return fault.Wrap(fault.Invalid, err, "Failed to load session from "+path+": "+err.Error())
	}
	s.mu.RLock()
	for _, o := range s.sessions {
		if o != nil && o != h && o.file == fid {
			s.mu.RUnlock()
			return fault.Errorf(fault.Conflict, "Session file %s is already loaded as session %s", path, o.id)
		}
	}
	s.mu.RUnlock()
	return h.sess.Switch(real)
}
