package pipeline

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
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
		log:        cmp.Or(opts.Log, slog.New(slog.DiscardHandler)),
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

// Handler is the handler registered for a command type.
func (p *Pipeline) Handler(typ string) (Handler, bool) {
	h, ok := p.reg[typ]
	return h, ok
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
