package pipeline

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Pipeline admits, orders and executes commands. Submit may be called from
// any goroutine; commands submitted from one goroutine to one lane run in
// submission order.
type Pipeline struct {
	reg        Registry
	journal    Journal
	emitFn     func(Event)
	onJErr     func(error)
	ttl        time.Duration
	retention  time.Duration
	depTimeout time.Duration
	timeouts   map[Class]time.Duration

	// hard is cancelled when a shutdown's drain deadline passes (or on
	// Close): running handlers are cancelled, queued commands fail.
	hard       context.Context
	hardCancel context.CancelFunc
	wg         sync.WaitGroup // every goroutine the pipeline starts
	flights    sync.WaitGroup // admitted commands not yet finished

	mu        sync.Mutex
	closing   bool
	lanes     map[string]*lane
	byID      map[string]*flight // in flight, by command id
	byKey     map[string]*flight // in flight, by scope\x00key
	outID     map[string]*outcome
	outKey    map[string]*outcome
	versions  map[string]int
	nextSweep time.Time
	anonBase  string
	anonSeq   uint64
}

type outcome struct {
	fp      string
	resp    Response
	expires time.Time
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

	// guarded by Pipeline.mu
	finished   bool
	hadSession bool

	anon string // the lifecycle id of a command without an id

	done chan struct{} // closed once resp is final
	resp Response
}

// New builds a Pipeline and loads the journal's outcomes.
func New(opts Options) (*Pipeline, error) {
	p := &Pipeline{
		reg:        opts.Registry,
		journal:    opts.Journal,
		emitFn:     opts.Emit,
		onJErr:     opts.OnJournalError,
		ttl:        opts.IdempotencyTTL,
		retention:  opts.OutcomeRetention,
		depTimeout: opts.DependencyTimeout,
		timeouts:   map[Class]time.Duration{},
		lanes:      map[string]*lane{},
		byID:       map[string]*flight{},
		byKey:      map[string]*flight{},
		outID:      map[string]*outcome{},
		outKey:     map[string]*outcome{},
		versions:   map[string]int{},
		anonBase:   fmt.Sprint(time.Now().UnixMilli()),
	}
	if p.journal == nil {
		p.journal = NewMemJournal()
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
	for _, r := range recs {
		if r.Response == nil {
			continue
		}
		if r.ID != "" && r.Expires.After(now) {
			p.outID[r.ID] = &outcome{r.Fingerprint, *r.Response, r.Expires}
		}
		if r.Key != "" && r.KeyExpires.After(now) {
			p.outKey[r.Scope+"\x00"+r.Key] = &outcome{r.Fingerprint, *r.Response, r.KeyExpires}
		}
	}
	p.hard, p.hardCancel = context.WithCancel(context.Background())
	return p, nil
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
// with its outcome; command_finished is emitted just before respond is
// called. Rejections before admission (shutdown, validation) are
// answered synchronously with no lifecycle events. respond must not block.
func (p *Pipeline) Submit(cmd Command, respond func(Response)) {
	if respond == nil {
		respond = func(Response) {}
	}
	reject := func(e *Error) { respond(Response{ID: cmd.ID, Command: cmd.Type, Err: e}) }

	p.mu.Lock()
	closing := p.closing
	p.mu.Unlock()
	if closing {
		reject(errShuttingDown())
		return
	}
	h, verr := p.validate(cmd)
	if verr != nil {
		reject(verr)
		return
	}
	f := &flight{cmd: cmd, h: h, respond: respond, done: make(chan struct{})}
	if cmd.ID == "" {
		p.mu.Lock()
		p.anonSeq++
		f.anon = fmt.Sprintf("anon:%s:%d", p.anonBase, p.anonSeq)
		p.mu.Unlock()
	}
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
	f.fp = fingerprint(cmd)
	now := time.Now()

	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		reject(errShuttingDown())
		return
	}
	p.sweep(now)
	// Replay or conflict (spec §8): by id first, then by idempotency key.
	var (
		hit      *Response
		waitFor  *flight
		conflict *Error
	)
	if cmd.ID != "" {
		if o := p.outID[cmd.ID]; o != nil && o.expires.After(now) {
			if o.fp != f.fp {
				conflict = errConflictID(cmd.ID)
			} else {
				r := o.resp
				hit = &r
			}
		} else if o := p.byID[cmd.ID]; o != nil {
			if o.fp != f.fp {
				conflict = errConflictID(cmd.ID)
			} else {
				waitFor = o
			}
		}
	}
	if hit == nil && waitFor == nil && conflict == nil && f.keyIdx != "" {
		if o := p.outKey[f.keyIdx]; o != nil && o.expires.After(now) {
			if o.fp != f.fp {
				conflict = errConflictKey(cmd.IdempotencyKey)
			} else {
				r := o.resp
				hit = &r
			}
		} else if o := p.byKey[f.keyIdx]; o != nil {
			if o.fp != f.fp {
				conflict = errConflictKey(cmd.IdempotencyKey)
			} else {
				waitFor = o
			}
		}
	}
	if hit != nil || waitFor != nil || conflict != nil {
		p.mu.Unlock()
		p.emit(f, CommandAccepted, nil)
		switch {
		case conflict != nil:
			r := Response{ID: cmd.ID, Command: cmd.Type, Err: conflict}
			p.emit(f, CommandFinished, &r)
			respond(r)
		case hit != nil:
			p.replay(f, *hit)
		default:
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				<-waitFor.done
				p.replay(f, waitFor.resp)
			}()
		}
		return
	}
	if cmd.ID != "" {
		p.byID[cmd.ID] = f
	}
	if f.keyIdx != "" {
		p.byKey[f.keyIdx] = f
	}
	p.flights.Add(1)
	p.mu.Unlock()

	p.emit(f, CommandAccepted, nil)
	if f.durable() {
		err := p.journal.Append(Record{
			Op: OpBegin, Command: cmd.Type, ID: cmd.ID, Scope: f.scope, Key: cmd.IdempotencyKey,
			Fingerprint: f.fp, At: now, KeyExpires: f.keyExpiresAt(p, now), Expires: f.expires(p, now),
		})
		if err != nil {
			p.finish(f, Response{Err: Errorf(CodeInternal, "journal: %v", err)})
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

func (f *flight) durable() bool { return f.cmd.ID != "" || f.keyIdx != "" }

func (f *flight) expires(p *Pipeline, now time.Time) time.Time {
	return now.Add(max(p.ttl, p.retention))
}

func (p *Pipeline) validate(cmd Command) (Handler, *Error) {
	if cmd.Type == "" {
		return Handler{}, Errorf(CodeInvalid, "Validation failed: type is required")
	}
	h, ok := p.reg[cmd.Type]
	if !ok || h.Run == nil {
		return Handler{}, Errorf(CodeUnknownCommand, "Validation failed: type: Unknown command type '%s'", cmd.Type)
	}
	if h.Lane == LaneSession && cmd.SessionID == "" {
		return Handler{}, Errorf(CodeInvalid, "Validation failed: sessionId is required for %s", cmd.Type)
	}
	if cmd.IfSessionVersion != nil && cmd.SessionID == "" {
		return Handler{}, Errorf(CodeInvalid, "Validation failed: ifSessionVersion requires sessionId")
	}
	for _, d := range cmd.DependsOn {
		if d == "" {
			return Handler{}, Errorf(CodeInvalid, "Validation failed: dependsOn entries must be non-empty")
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
	for k, o := range p.outID {
		if !o.expires.After(now) {
			delete(p.outID, k)
		}
	}
	for k, o := range p.outKey {
		if !o.expires.After(now) {
			delete(p.outKey, k)
		}
	}
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
	if e := p.awaitDeps(f); e != nil {
		p.finish(f, Response{Err: e})
		return
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
			p.finish(f, Response{Err: Errorf(CodeVersionMismatch,
				"Session version mismatch: expected %d, got %d", *want, v)})
			return
		}
	}
	f.hadSession = sid != "" && ok
	p.mu.Unlock()

	p.emit(f, CommandStarted, nil)
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
				res <- result{err: Errorf(CodeInternal, "handler panic: %v", r)}
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
			var e *Error
			if !errors.As(r.err, &e) {
				e = &Error{Code: CodeFailed, Message: r.err.Error(), Cause: r.err}
			}
			p.finish(f, Response{Err: e})
		} else {
			p.finish(f, Response{Success: true, Data: r.data})
		}
	case <-timer:
		// Terminal: the late completion is discarded (spec §11).
		cancel(ErrTimeout)
		p.finish(f, Response{TimedOut: true, Err: Errorf(CodeTimeout,
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
func (p *Pipeline) awaitDeps(f *flight) *Error {
	if len(f.cmd.DependsOn) == 0 {
		return nil
	}
	var deadline <-chan time.Time
	for _, d := range f.cmd.DependsOn {
		p.mu.Lock()
		if o := p.outID[d]; o != nil && o.expires.After(time.Now()) {
			p.mu.Unlock()
			if !o.resp.Success {
				return Errorf(CodeDependency, "Dependency '%s' failed: %s", d, errText(o.resp.Err))
			}
			continue
		}
		df := p.byID[d]
		p.mu.Unlock()
		if df == nil {
			return Errorf(CodeDependency, "Dependency '%s' is unknown", d)
		}
		if df == f {
			return Errorf(CodeDependency, "Command '%s' cannot depend on itself", d)
		}
		if f.lane != "" && df.lane == f.lane {
			// f holds its lane, so d is queued behind it: waiting would deadlock.
			return Errorf(CodeDependency, "Dependency '%s' is queued in the same lane and cannot be awaited from this command", d)
		}
		if deadline == nil {
			t := time.NewTimer(p.depTimeout)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-df.done:
			if !df.resp.Success {
				return Errorf(CodeDependency, "Dependency '%s' failed: %s", d, errText(df.resp.Err))
			}
		case <-deadline:
			return Errorf(CodeDependency, "Command 'dependsOn:%s' timed out after %dms", d, p.depTimeout.Milliseconds())
		case <-p.hard.Done():
			return errShuttingDown()
		}
	}
	return nil
}

// finish stores f's terminal outcome (durably, if identified), responds and
// emits command_finished, exactly once.
func (p *Pipeline) finish(f *flight, resp Response) {
	sid := f.cmd.SessionID
	p.mu.Lock()
	if f.finished {
		p.mu.Unlock()
		return
	}
	f.finished = true
	resp.ID, resp.Command = f.cmd.ID, f.cmd.Type
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
	if f.durable() {
		r := resp
		err := p.journal.Append(Record{
			Op: OpFinish, Command: f.cmd.Type, ID: f.cmd.ID, Scope: f.scope, Key: f.cmd.IdempotencyKey,
			Fingerprint: f.fp, Response: &r, At: now,
			KeyExpires: f.keyExpiresAt(p, now), Expires: f.expires(p, now),
		})
		if err != nil && p.onJErr != nil {
			p.onJErr(err)
		}
	}

	p.mu.Lock()
	if f.cmd.ID != "" {
		if p.byID[f.cmd.ID] == f {
			delete(p.byID, f.cmd.ID)
		}
		p.outID[f.cmd.ID] = &outcome{f.fp, resp, now.Add(p.retention)}
	}
	if f.keyIdx != "" {
		if p.byKey[f.keyIdx] == f {
			delete(p.byKey, f.keyIdx)
		}
		p.outKey[f.keyIdx] = &outcome{f.fp, resp, now.Add(p.ttl)}
	}
	f.resp = resp
	close(f.done)
	p.mu.Unlock()

	p.emit(f, CommandFinished, &resp)
	f.respond(resp)
	p.flights.Done()
}

func (f *flight) keyExpiresAt(p *Pipeline, now time.Time) time.Time {
	if f.keyIdx == "" {
		return time.Time{}
	}
	return now.Add(p.ttl)
}

// replay answers f with a stored outcome (spec §7.4, §5.1).
func (p *Pipeline) replay(f *flight, r Response) {
	r.ID = f.cmd.ID // never leak the stored id
	r.Replayed = true
	p.emit(f, CommandFinished, &r)
	f.respond(r)
}

func (p *Pipeline) emit(f *flight, t EventType, r *Response) {
	if p.emitFn == nil {
		return
	}
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
		IfSessionVersion: f.cmd.IfSessionVersion, IdempotencyKey: f.cmd.IdempotencyKey, Lane: lane, Origin: f.cmd.Origin}
	if r != nil {
		ev.Success, ev.Err, ev.Replayed, ev.TimedOut, ev.SessionVersion = r.Success, r.Err, r.Replayed, r.TimedOut, r.SessionVersion
	}
	p.emitFn(ev)
}

// Shutdown stops admitting commands and waits for admitted ones to finish.
// When ctx ends first, running handlers are cancelled and queued commands
// fail; Shutdown then waits for every goroutine and returns ctx's error.
func (p *Pipeline) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	drained := make(chan struct{})
	go func() {
		p.flights.Wait()
		close(drained)
	}()
	var err error
	select {
	case <-drained:
	case <-ctx.Done():
		err = ctx.Err()
		p.hardCancel()
		<-drained
	}
	p.hardCancel()
	p.wg.Wait()
	return err
}

// Close stops the pipeline at once: like Shutdown with no drain time.
func (p *Pipeline) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.Shutdown(ctx)
	return nil
}

// fingerprint is the semantic payload of cmd: everything but id and
// idempotencyKey, with the payload's JSON canonicalized (spec §8.3).
func fingerprint(cmd Command) string {
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
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// errText is a dependency's error for the message of its dependents.
func errText(e *Error) string {
	if e == nil || e.Message == "" {
		return "unknown error"
	}
	return e.Message
}
