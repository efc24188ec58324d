package pipeline

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
)

// Pipeline admits, orders and executes commands. Submit may be called from
// any goroutine; commands submitted from one goroutine to one lane run in
// submission order.
type Pipeline struct {
	reg        Registry
	journal    Journal
	emitFn     func(Event)
	onJErr     func(error)
	log        *slog.Logger
	ttl        time.Duration
	retention  time.Duration
	depTimeout time.Duration
	timeouts   map[Class]time.Duration
	keepRead   int
	keepData   int
	fpKey      []byte

	// hard is cancelled when a shutdown's drain deadline passes (or on
	// Close): running handlers are cancelled, queued commands fail.
	hard       context.Context
	hardCancel context.CancelFunc
	wg         sync.WaitGroup // lanes, handlers and control commands
	flights    sync.WaitGroup // admitted commands not yet finished

	// mu guards the fields below. Lock order: take it holding none of
	// the pipeline's locks. Under it the pipeline takes history.mu
	// (Adopt seeds the history) and runs Command.Admit, which takes the
	// server's rate-limit lock (a leaf); it never calls the journal,
	// a handler or a respond callback with mu held (couriers and lanes
	// run those after Unlock).
	mu        sync.Mutex
	closing   bool
	lanes     map[string]*lane
	byID      map[string]*flight // in flight, by command id
	byKey     map[string]*flight // in flight, by scope\x00key
	out       *outcomes
	versions  map[string]int
	nextSweep time.Time
	anonBase  string
	anonSeq   uint64
	inFlight  int // admitted commands not yet finished
	couriers  map[any]*courier
	// couriersIdle is closed when the last courier exits; nil while none runs.
	couriersIdle chan struct{}

	hist     *history
	recovery StartupRecovery // what New found in the journal; fixed
	jinfo    func() JournalInfo
}

type lane struct {
	name    string
	queue   []*flight
	running bool
}

type flight struct {
	cmd     Command
	h       Handler
	fp      string
	lane    string // "" for control commands, which bypass lanes
	scope   string
	keyIdx  string
	respond func(Response)
	// rerun marks the replay of a read whose data was not kept: it runs
	// again, unannounced (no command_started, spec §7.4), and answers
	// replayed without storing anything.
	rerun bool

	accepted sync.Once // command_accepted is emitted exactly once, before anything else

	// guarded by Pipeline.mu
	finished   bool
	hadSession bool
	waiters    []*flight // duplicates admitted while this one runs

	anon string // the lifecycle id of a command without an id

	// barrier, when set, makes the flight no command but a point in its
	// lane (Barrier).
	barrier func()

	done chan struct{} // closed once resp is final
	resp Response
}

// courier runs the callbacks of one Sender in order on a goroutine of its
// own: immediate answers (rejections, conflicts, replays) of commands one
// connection sent back to back arrive in the order sent, and a callback
// that blocks holds up only its own connection.
type courier struct {
	queue []func()
}

// New builds a Pipeline and loads the journal's outcomes.
func New(opts Options) (*Pipeline, error) {
	for name, h := range opts.Registry {
		if h.ReadOnly && h.Mutating {
			return nil, fmt.Errorf("handler %s: ReadOnly and Mutating exclude each other", name)
		}
	}
	p := &Pipeline{
		reg:        opts.Registry,
		journal:    opts.Journal,
		emitFn:     opts.Emit,
		onJErr:     opts.OnJournalError,
		log:        cmpOr(opts.Log, slog.New(slog.DiscardHandler)),
		ttl:        opts.IdempotencyTTL,
		retention:  opts.OutcomeRetention,
		depTimeout: opts.DependencyTimeout,
		timeouts:   map[Class]time.Duration{},
		keepRead:   orDefault(opts.KeepReadBytes, DefaultKeepReadBytes),
		keepData:   orDefault(opts.KeepDataBytes, DefaultKeepDataBytes),
		fpKey:      opts.FingerprintKey,
		lanes:      map[string]*lane{},
		byID:       map[string]*flight{},
		byKey:      map[string]*flight{},
		out:        newOutcomes(orDefault(opts.MaxOutcomes, DefaultMaxOutcomes), orDefault(opts.MaxOutcomeMemory, DefaultMaxOutcomeMemory)),
		versions:   map[string]int{},
		anonBase:   fmt.Sprint(time.Now().UnixMilli()),
		couriers:   map[any]*courier{},
		hist:       newHistory(orDefault(opts.HistoryEntries, DefaultHistoryEntries)),
	}
	if p.journal == nil {
		p.journal = NewMemJournal()
	}
	p.jinfo = func() JournalInfo { return JournalInfo{} }
	if ji, ok := p.journal.(interface{ Info() JournalInfo }); ok {
		p.jinfo = ji.Info
	}
	if p.ttl <= 0 {
		p.ttl = DefaultIdempotencyTTL
	}
	if p.retention <= 0 {
		p.retention = DefaultOutcomeRetention
	}
	if p.depTimeout <= 0 {
		p.depTimeout = DefaultDependencyTimeout
	}
	for c, d := range DefaultClassTimeouts {
		p.timeouts[c] = d
	}
	for c, d := range opts.ClassTimeouts {
		p.timeouts[c] = d
	}
	recs, err := p.journal.Load()
	if err != nil {
		return nil, fmt.Errorf("load journal: %w", err)
	}
	now := time.Now()
	p.file(recs, now)
	p.recovery = p.startupRecovery(recs, now)
	p.hard, p.hardCancel = context.WithCancel(context.Background())
	return p, nil
}

// file makes recs' outcomes answer replays by id and key. It returns how
// many it filed; an outcome of a command in flight here is left out.
// p.mu is held or p is not shared yet.
func (p *Pipeline) file(recs []Record, now time.Time) int {
	n := 0
	for _, r := range recs {
		if r.Response == nil {
			continue
		}
		o := &outcome{fp: r.Fingerprint, resp: p.keepable(p.reg[r.Command], *r.Response), journaled: true}
		if r.ID != "" && r.Expires.After(now) && p.byID[r.ID] == nil {
			o.id, o.idExpires = r.ID, r.Expires
		}
		key := r.Scope + "\x00" + r.Key
		if r.Key != "" && r.KeyExpires.After(now) && p.byKey[key] == nil {
			o.key, o.keyExpires = key, r.KeyExpires
		}
		if o.id != "" || o.key != "" {
			p.out.put(o)
			n++
		}
	}
	return n
}

// answers reports whether outcome o is the outcome of f's request. One
// read from a journal may have been fingerprinted before the journal's
// fingerprints were keyed (an earlier version, or a cluster node before
// the cluster had its key), unkeyed: a request repeated across that
// upgrade is replayed, not refused as another one. p.mu is held.
func (p *Pipeline) answers(o *outcome, f *flight) bool {
	if o.fp == f.fp {
		return true
	}
	return o.journaled && p.fpKey != nil && o.fp == Fingerprint(nil, f.cmd)
}

// Adopt takes over outcomes recorded by another process: in a cluster, by
// the node that owned a session before this one took it over. recs are
// what a Journal's Load returns (Recover of the session's records): from
// now on a command replayed by id or idempotency key gets its recorded
// outcome instead of running, and one that was in flight on the old owner
// answers as interrupted (Recover made it so) rather than running again.
// An outcome for a command now in flight here is left out: this process's
// own answer comes first. Adopt does not write recs to this pipeline's
// journal; the caller's store already holds them. It returns how many
// outcomes it filed.
func (p *Pipeline) Adopt(recs []Record) int {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.file(recs, now)
	for _, r := range recs {
		if r.Response != nil && r.ID != "" && r.Expires.After(now) {
			p.hist.seed(r)
		}
	}
	return n
}

func orDefault(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

// CreateSession starts version tracking for a session at 0 (spec §10).
// Handlers of create/load commands call it.
func (p *Pipeline) CreateSession(id string) {
	p.mu.Lock()
	p.versions[id] = 0
	p.mu.Unlock()
}

// DeleteSession removes a session's version state.
func (p *Pipeline) DeleteSession(id string) {
	p.mu.Lock()
	delete(p.versions, id)
	p.mu.Unlock()
}

// SessionVersion reports a session's version.
func (p *Pipeline) SessionVersion(id string) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.versions[id]
	return v, ok
}

// Submit admits cmd and arranges for respond to be called exactly once
// with its outcome. Submit never calls respond or Emit itself: both run on
// goroutines the pipeline owns, so the caller may hold what they wait for.
// For one command the order is command_accepted, command_started (when it
// runs), command_finished, then respond. Commands rejected before
// admission (shutdown, validation) are answered with no lifecycle events.
// The immediate answers (rejections, conflicts, replays) of commands with
// the same Sender are delivered in submission order. respond must not
// block for long: it holds up the answers of its Sender.
func (p *Pipeline) Submit(cmd Command, respond func(Response)) {
	if respond == nil {
		respond = func(Response) {}
	}
	h, verr := p.validate(cmd)
	f := &flight{cmd: cmd, h: h, respond: respond, done: make(chan struct{})}
	if verr == nil {
		// A server command that names a session (create, delete, load) is
		// ordered with that session's commands, so a client may send
		// create_session and its first prompt back to back.
		f.scope = "server"
		if h.Lane == LaneSession || cmd.SessionID != "" {
			f.scope = "session:" + cmd.SessionID
		}
		if h.Class != ClassControl && (h.Bypass == nil || !h.Bypass(cmd)) {
			f.lane = f.scope
		}
		if cmd.IdempotencyKey != "" {
			f.keyIdx = f.scope + "\x00" + cmd.IdempotencyKey
		}
		f.fp = Fingerprint(p.fpKey, cmd)
	}
	now := time.Now()

	p.mu.Lock()
	if p.closing {
		verr = errShuttingDown()
	}
	if verr != nil {
		p.deliverLocked(cmd.Sender, func() { respond(Response{ID: cmd.ID, Command: cmd.Type, Err: verr}) })
		p.mu.Unlock()
		return
	}
	if cmd.ID == "" {
		p.anonSeq++
		f.anon = fmt.Sprintf("anon:%s:%d", p.anonBase, p.anonSeq)
	}
	p.sweep(now)
	// Replay or conflict (spec §8): by id first, then by idempotency key.
	var (
		hit      *outcome
		waitFor  *flight
		conflict *fault.Error
	)
	if cmd.ID != "" {
		if o := p.out.byID(cmd.ID, now); o != nil {
			if !p.answers(o, f) {
				conflict = errConflictID(cmd.ID, o.resp.Command, cmd.Type)
			} else {
				hit = o
			}
		} else if o := p.byID[cmd.ID]; o != nil {
			if o.fp != f.fp {
				conflict = errConflictID(cmd.ID, o.cmd.Type, cmd.Type)
			} else {
				waitFor = o
			}
		}
	}
	if hit == nil && waitFor == nil && conflict == nil && f.keyIdx != "" {
		if o := p.out.byKey(f.keyIdx, now); o != nil {
			if !p.answers(o, f) {
				conflict = errConflictKey(cmd.IdempotencyKey, o.resp.Command, cmd.Type)
			} else {
				hit = o
			}
		} else if o := p.byKey[f.keyIdx]; o != nil {
			if o.fp != f.fp {
				conflict = errConflictKey(cmd.IdempotencyKey, o.cmd.Type, cmd.Type)
			} else {
				waitFor = o
			}
		}
	}
	switch {
	case conflict != nil:
		p.deliverLocked(cmd.Sender, func() {
			p.accept(f)
			r := Response{ID: cmd.ID, Command: cmd.Type, Err: conflict}
			p.emit(f, CommandFinished, &r)
			respond(r)
		})
		p.mu.Unlock()
		return
	case waitFor != nil:
		// Answered with the first one's outcome when it finishes.
		waitFor.waiters = append(waitFor.waiters, f)
		p.deliverLocked(cmd.Sender, func() { p.accept(f) })
		p.mu.Unlock()
		return
	case hit != nil && !(hit.resp.DataDropped && h.ReadOnly):
		r := hit.resp
		p.deliverLocked(cmd.Sender, func() { p.answerReplay(f, r) })
		p.mu.Unlock()
		return
	case hit != nil:
		f.rerun = true
	default:
		if cmd.Admit != nil {
			if err := cmd.Admit(); err != nil {
				p.deliverLocked(cmd.Sender, func() { respond(Response{ID: cmd.ID, Command: cmd.Type, Err: err}) })
				p.mu.Unlock()
				return
			}
		}
		if cmd.ID != "" {
			p.byID[cmd.ID] = f
		}
		if f.keyIdx != "" {
			p.byKey[f.keyIdx] = f
		}
	}
	p.flights.Add(1)
	p.inFlight++
	p.deliverLocked(cmd.Sender, func() { p.accept(f) })
	p.mu.Unlock()

	if f.durable() {
		err := p.journal.Append(Record{
			Op: OpBegin, Command: cmd.Type, ID: cmd.ID, Scope: f.scope, Key: cmd.IdempotencyKey,
			Fingerprint: f.fp, At: now, KeyExpires: f.keyExpiresAt(p, now), Expires: f.expires(p, now),
		})
		if err != nil {
			p.mu.Lock()
			p.deliverLocked(cmd.Sender, func() { p.finish(f, Response{Err: fault.Errorf(fault.Internal, "journal: %v", err)}) })
			p.mu.Unlock()
			return
		}
	}
	p.mu.Lock()
	if f.lane == "" {
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			p.execute(f)
		}()
		return
	}
	l := p.lanes[f.lane]
	if l == nil {
		l = &lane{name: f.lane}
		p.lanes[f.lane] = l
	}
	l.queue = append(l.queue, f)
	if !l.running {
		l.running = true
		p.wg.Add(1)
		go p.runLane(l)
	}
	p.mu.Unlock()
}

// Do submits cmd and waits for its response.
func (p *Pipeline) Do(cmd Command) Response {
	ch := make(chan Response, 1)
	p.Submit(cmd, func(r Response) { ch <- r })
	return <-ch
}

// deliverLocked queues fn on the courier of sender, starting it if it is
// idle; p.mu is held. A sender that cannot be a map key shares the
// courier of commands without one.
func (p *Pipeline) deliverLocked(sender any, fn func()) {
	if sender != nil && !reflect.ValueOf(sender).Comparable() {
		sender = nil
	}
	c := p.couriers[sender]
	if c == nil {
		c = &courier{}
		p.couriers[sender] = c
		if p.couriersIdle == nil {
			p.couriersIdle = make(chan struct{})
		}
		go p.runCourier(sender, c)
	}
	c.queue = append(c.queue, fn)
}

// runCourier runs c's callbacks until its queue is empty. Couriers are
// waited for by Shutdown through couriersIdle rather than p.wg, because
// commands rejected after Shutdown returned still need one.
func (p *Pipeline) runCourier(sender any, c *courier) {
	for {
		p.mu.Lock()
		if len(c.queue) == 0 {
			delete(p.couriers, sender)
			if len(p.couriers) == 0 {
				close(p.couriersIdle)
				p.couriersIdle = nil
			}
			p.mu.Unlock()
			return
		}
		fn := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		p.mu.Unlock()
		fn()
	}
}

// waitCouriers returns once no courier runs.
func (p *Pipeline) waitCouriers() {
	for {
		p.mu.Lock()
		idle := p.couriersIdle
		p.mu.Unlock()
		if idle == nil {
			return
		}
		<-idle
	}
}

func (f *flight) durable() bool { return !f.rerun && (f.cmd.ID != "" || f.keyIdx != "") }

func (f *flight) expires(p *Pipeline, now time.Time) time.Time {
	return now.Add(max(p.ttl, p.retention))
}

// Handler is the handler registered for a command type.
func (p *Pipeline) Handler(typ string) (Handler, bool) {
	h, ok := p.reg[typ]
	return h, ok
}

func (p *Pipeline) validate(cmd Command) (Handler, *fault.Error) {
	if cmd.Type == "" {
		return Handler{}, fault.Errorf(fault.Invalid, "Validation failed: type is required")
	}
	h, ok := p.reg[cmd.Type]
	if !ok || h.Run == nil {
		return Handler{}, fault.Errorf(fault.UnknownCommand, "Validation failed: type: Unknown command type '%s'", cmd.Type)
	}
	if h.Lane == LaneSession && cmd.SessionID == "" {
		return Handler{}, fault.Errorf(fault.Invalid, "Validation failed: sessionId is required for %s", cmd.Type)
	}
	if cmd.IfSessionVersion != nil && cmd.SessionID == "" {
		return Handler{}, fault.Errorf(fault.Invalid, "Validation failed: ifSessionVersion requires sessionId")
	}
	for _, d := range cmd.DependsOn {
		if d == "" {
			return Handler{}, fault.Errorf(fault.Invalid, "Validation failed: dependsOn entries must be non-empty")
		}
	}
	return h, nil
}

// sweep drops expired outcomes now and then; p.mu is held.
func (p *Pipeline) sweep(now time.Time) {
	if now.Before(p.nextSweep) {
		return
	}
	p.nextSweep = now.Add(time.Minute)
	p.out.sweep(now)
}

func (p *Pipeline) runLane(l *lane) {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		if len(l.queue) == 0 {
			l.running = false
			delete(p.lanes, l.name)
			p.mu.Unlock()
			return
		}
		f := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		p.mu.Unlock()
		if f.barrier != nil {
			p.passBarrier(f)
			continue
		}
		p.execute(f)
	}
}

// timeoutGrace bounds how long a lane waits for a timed-out handler to
// return after its context was cancelled.
const timeoutGrace = 5 * time.Second

type result struct {
	data json.RawMessage
	err  error
}

func (p *Pipeline) execute(f *flight) {
	if p.hard.Err() != nil {
		p.finish(f, Response{Err: errShuttingDown()})
		return
	}
	// A rerun is the same command, whose dependencies held when it first
	// ran; they may have expired since.
	if !f.rerun {
		if e := p.awaitDeps(f); e != nil {
			p.finish(f, Response{Err: e})
			return
		}
	}
	sid := f.cmd.SessionID
	p.mu.Lock()
	v, ok := p.versions[sid]
	if want := f.cmd.IfSessionVersion; want != nil {
		if !ok {
			p.mu.Unlock()
			p.finish(f, Response{Err: errSessionNotFound(sid)})
			return
		}
		if v != *want {
			p.mu.Unlock()
			p.finish(f, Response{Err: fault.Errorf(fault.VersionMismatch,
				"Session version mismatch: expected %d, got %d", *want, v)})
			return
		}
	}
	f.hadSession = sid != "" && ok
	p.mu.Unlock()

	if !f.rerun {
		p.accept(f)
		p.emit(f, CommandStarted, nil)
	}
	timeout := p.timeouts[f.h.Class]
	if f.h.Timeout != 0 {
		timeout = f.h.Timeout
	}
	ctx, cancel := context.WithCancelCause(p.hard)
	defer cancel(context.Canceled)
	res := make(chan result, 1)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer func() {
			if r := recover(); r != nil {
				res <- result{err: fault.Errorf(fault.Internal, "handler panic: %v", r)}
			}
		}()
		data, err := f.h.Run(ctx, f.cmd)
		res <- result{data, err}
	}()
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	select {
	case r := <-res:
		if r.err != nil {
			e := fault.As(r.err)
			if e == nil {
				// Not meant for the client: the operator reads the
				// cause, the client "Internal error".
				p.log.Error("command failed", "command", f.cmd.Type, "session", f.cmd.SessionID, "err", r.err)
				e = fault.Public(r.err)
			}
			p.finish(f, Response{Err: e})
		} else {
			p.finish(f, Response{Success: true, Data: r.data})
		}
	case <-timer:
		// Terminal: the late completion is discarded (spec §11).
		cancel(ErrTimeout)
		p.finish(f, Response{TimedOut: true, Err: fault.Errorf(fault.Timeout,
			"Command '%s' timed out after %dms", f.cmd.Type, timeout.Milliseconds())})
		// The client has its answer; the lane waits a little for the
		// cancelled handler to let go (a killed bash, a closed stream), so
		// the next command does not find the session still busy.
		grace := time.NewTimer(timeoutGrace)
		defer grace.Stop()
		select {
		case <-res:
		case <-grace.C:
		}
	case <-p.hard.Done():
		p.finish(f, Response{Err: errShuttingDown()})
	}
}

// awaitDeps checks f's dependencies (spec §9) when f is about to run.
func (p *Pipeline) awaitDeps(f *flight) *fault.Error {
	if len(f.cmd.DependsOn) == 0 {
		return nil
	}
	var deadline <-chan time.Time
	for _, d := range f.cmd.DependsOn {
		p.mu.Lock()
		if o := p.out.byID(d, time.Now()); o != nil {
			ok, e := o.resp.Success, o.resp.Err
			p.mu.Unlock()
			if !ok {
				return fault.Errorf(fault.Dependency, "Dependency '%s' failed: %s", d, errText(e))
			}
			continue
		}
		df := p.byID[d]
		p.mu.Unlock()
		if df == nil {
			return fault.Errorf(fault.Dependency, "Dependency '%s' is unknown", d)
		}
		if df == f {
			return fault.Errorf(fault.Dependency, "Command '%s' cannot depend on itself", d)
		}
		if f.lane != "" && df.lane == f.lane {
			// f holds its lane, so d is queued behind it: waiting would deadlock.
			return fault.Errorf(fault.Dependency, "Dependency '%s' is queued in the same lane and cannot be awaited from this command", d)
		}
		if deadline == nil {
			t := time.NewTimer(p.depTimeout)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-df.done:
			if !df.resp.Success {
				return fault.Errorf(fault.Dependency, "Dependency '%s' failed: %s", d, errText(df.resp.Err))
			}
		case <-deadline:
			return fault.Errorf(fault.Dependency, "Command 'dependsOn:%s' timed out after %dms", d, p.depTimeout.Milliseconds())
		case <-p.hard.Done():
			return errShuttingDown()
		}
	}
	return nil
}

// keepable is what of resp is kept for replay (see the package doc).
func (p *Pipeline) keepable(h Handler, resp Response) Response {
	if h.Keep != nil {
		resp = h.Keep(resp)
	}
	limit := p.keepData
	if h.ReadOnly {
		limit = p.keepRead
	}
	if len(resp.Data) > limit {
		resp.Data = nil
		resp.DataDropped = true
	}
	return resp
}

// finish stores f's terminal outcome (durably, if identified), emits
// command_finished and responds, exactly once. It runs on a pipeline
// goroutine: a lane, a control command's, or a courier.
func (p *Pipeline) finish(f *flight, resp Response) {
	sid := f.cmd.SessionID
	p.mu.Lock()
	if f.finished {
		p.mu.Unlock()
		return
	}
	f.finished = true
	resp.ID, resp.Command = f.cmd.ID, f.cmd.Type
	resp.Replayed = f.rerun
	// Versions ride on successes only: a failure changed nothing, and
	// pi-server's clients read a sessionVersion as "now at".
	if v, ok := p.versions[sid]; ok && sid != "" && resp.Success {
		if f.h.Mutating && f.hadSession {
			v++
			p.versions[sid] = v
		}
		resp.SessionVersion = &v
	}
	p.mu.Unlock()

	now := time.Now()
	kept := p.keepable(f.h, resp)
	if f.durable() {
		err := p.journal.Append(Record{
			Op: OpFinish, Command: f.cmd.Type, ID: f.cmd.ID, Scope: f.scope, Key: f.cmd.IdempotencyKey,
			Fingerprint: f.fp, Response: &kept, At: now,
			KeyExpires: f.keyExpiresAt(p, now), Expires: f.expires(p, now),
		})
		if err != nil && p.onJErr != nil {
			p.onJErr(err)
		}
	}

	p.mu.Lock()
	if !f.rerun {
		if f.cmd.ID != "" && p.byID[f.cmd.ID] == f {
			delete(p.byID, f.cmd.ID)
		}
		if f.keyIdx != "" && p.byKey[f.keyIdx] == f {
			delete(p.byKey, f.keyIdx)
		}
		if f.durable() {
			o := &outcome{fp: f.fp, resp: kept}
			if f.cmd.ID != "" {
				o.id, o.idExpires = f.cmd.ID, now.Add(p.retention)
			}
			if f.keyIdx != "" {
				o.key, o.keyExpires = f.keyIdx, now.Add(p.ttl)
			}
			p.out.put(o)
		}
	}
	waiters := f.waiters
	f.waiters = nil
	f.resp = resp
	close(f.done)
	p.mu.Unlock()

	p.accept(f)
	p.emit(f, CommandFinished, &resp)
	if len(waiters) > 0 {
		p.mu.Lock()
		for _, w := range waiters {
			p.deliverLocked(w.cmd.Sender, func() { p.answerReplay(w, resp) })
		}
		p.mu.Unlock()
	}
	f.respond(resp)
	p.mu.Lock()
	p.inFlight--
	p.mu.Unlock()
	p.flights.Done()
}

func (f *flight) keyExpiresAt(p *Pipeline, now time.Time) time.Time {
	if f.keyIdx == "" {
		return time.Time{}
	}
	return now.Add(p.ttl)
}

// answerReplay answers f with a stored outcome (spec §7.4, §5.1); it runs
// on f's courier.
func (p *Pipeline) answerReplay(f *flight, r Response) {
	p.accept(f)
	r.ID = f.cmd.ID // never leak the stored id
	r.Replayed = true
	p.emit(f, CommandFinished, &r)
	f.respond(r)
}

// accept emits f's command_accepted unless that was done already: by its
// courier soon after admission, or by whichever goroutine gets to f first.
func (p *Pipeline) accept(f *flight) {
	f.accepted.Do(func() { p.emit(f, CommandAccepted, nil) })
}

func (p *Pipeline) emit(f *flight, t EventType, r *Response) {
	lane := f.lane
	if lane == "" {
		lane = f.scope
	}
	id := f.cmd.ID
	if id == "" {
		id = f.anon
	}
	deps := f.cmd.DependsOn
	if deps == nil {
		deps = []string{}
	}
	ev := Event{Type: t, CommandID: id, Command: f.cmd.Type, SessionID: f.cmd.SessionID, DependsOn: deps,
		IfSessionVersion: f.cmd.IfSessionVersion, IdempotencyKey: f.cmd.IdempotencyKey, Lane: lane, Origin: f.cmd.Origin,
		Announced: f.cmd.Announced && (t == CommandAccepted || t == CommandStarted)}
	if r != nil {
		ev.Success, ev.Err, ev.Replayed, ev.TimedOut, ev.SessionVersion = r.Success, r.Err, r.Replayed, r.TimedOut, r.SessionVersion
	}
	hev := ev
	if r != nil && r.Err != nil && f.h.Keep != nil {
		// The history answers anyone who asks for it: it has the error
		// as kept for replays, not as its sender read it.
		hev.Err = f.h.Keep(*r).Err
	}
	p.hist.record(hev, f.fp, f.cmd.ID != "")
	if p.emitFn != nil {
		p.emitFn(ev)
	}
}

// Shutdown stops admitting commands and waits for admitted ones to finish.
// When ctx ends first, running handlers are cancelled and queued commands
// fail; Shutdown then waits for every goroutine and every answer to be
// delivered, and returns ctx's error. Commands submitted after Shutdown
// returned are refused; their answers are delivered on goroutines that a
// later Shutdown or Close waits for.
func (p *Pipeline) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.closing = true
	// Nothing is admitted once closing is set, so with none in flight
	// now the drain cannot be cut short: a server closed before it ran
	// anything (a port already in use) must not report cancelled
	// commands, whichever of the two ready channels select would pick.
	idle := p.inFlight == 0
	p.mu.Unlock()
	drained := make(chan struct{})
	go func() {
		p.flights.Wait()
		close(drained)
	}()
	var err error
	if idle {
		<-drained
	} else {
		select {
		case <-drained:
		case <-ctx.Done():
			err = ctx.Err()
			p.hardCancel()
			<-drained
		}
	}
	p.hardCancel()
	p.wg.Wait()
	p.waitCouriers()
	return err
}

// Close stops the pipeline at once: like Shutdown with no drain time.
func (p *Pipeline) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.Shutdown(ctx)
	return nil
}

// FingerprintKeyBytes is the length of a key for Fingerprint (and of
// Options.FingerprintKey): as long as HMAC-SHA256's output.
const FingerprintKeyBytes = 32

// Fingerprint is what identifies cmd's request for its idempotency key
// and its id: everything but id and idempotencyKey, with the payload's
// JSON canonicalized (spec §8.3), hashed. The journal keeps it next to
// outcomes for as long as they are replayable, and a payload may hold a
// secret (an MCP server's env), so with a key the hash is HMAC-SHA256
// under it: a fingerprint read off the disk cannot be checked against
// guesses of the secret without the key. nil key: plain SHA-256, for a
// journal whose fingerprints several processes without a shared key
// compare.
func Fingerprint(key []byte, cmd Command) string {
	var payload any
	if len(cmd.Payload) > 0 {
		dec := json.NewDecoder(bytes.NewReader(cmd.Payload))
		dec.UseNumber()
		if dec.Decode(&payload) != nil {
			payload = string(cmd.Payload)
		}
	}
	b, _ := json.Marshal(struct {
		T string   `json:"t"`
		S string   `json:"s"`
		D []string `json:"d"`
		V *int     `json:"v"`
		P any      `json:"p"`
	}{cmd.Type, cmd.SessionID, cmd.DependsOn, cmd.IfSessionVersion, payload})
	var sum []byte
	if key != nil {
		m := hmac.New(sha256.New, key)
		m.Write(b)
		sum = m.Sum(nil)
	} else {
		s := sha256.Sum256(b)
		sum = s[:]
	}
	return hex.EncodeToString(sum[:16])
}

// errText is a dependency's error for the message of its dependents.
func errText(e *fault.Error) string {
	if e == nil || e.Message == "" {
		return "unknown error"
	}
	return e.Message
}

// cmpOr is the first of a and b that is not nil.
func cmpOr[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}
