package health

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// State is a circuit breaker state as the spec (§21.1) names it.
type State string

// Breaker states.
const (
	StateClosed   State = "closed"    // normal operation
	StateOpen     State = "open"      // failing, rejecting requests
	StateHalfOpen State = "half_open" // testing recovery
)

func fromGobreaker(s gobreaker.State) State {
	switch s {
	case gobreaker.StateOpen:
		return StateOpen
	case gobreaker.StateHalfOpen:
		return StateHalfOpen
	default:
		return StateClosed
	}
}

// Kind says what a breaker guards.
type Kind string

// Breaker kinds.
const (
	KindProvider Kind = "provider"
	KindBash     Kind = "bash"
)

// BashBreakerName is the name of the single bash breaker.
const BashBreakerName = "bash"

// Error texts of spec §22.1.
const (
	ProviderOpenText = "Circuit breaker open"
	BashOpenText     = "Bash circuit breaker open"
)

// ErrOpen matches every [*OpenError] under errors.Is.
var ErrOpen = errors.New("circuit breaker open")

// OpenError is returned by [Breaker.Allow] and [Breaker.Do] when the
// breaker rejects a request: it is open, or half-open with all its probe
// slots taken. Its Error() text is the spec's (§22.1): "Circuit breaker
// open" for a provider, "Bash circuit breaker open" for bash.
type OpenError struct {
	Kind  Kind
	Name  string // provider name, or BashBreakerName
	State State  // StateOpen or StateHalfOpen
}

func (e *OpenError) Error() string {
	if e.Kind == KindBash {
		return BashOpenText
	}
	return ProviderOpenText
}

// Is makes errors.Is(err, ErrOpen) true.
func (e *OpenError) Is(target error) bool { return target == ErrOpen }

// Options configure one kind of breaker. Zero fields take the default of
// that kind ([DefaultProviderOptions], [DefaultBashOptions]).
type Options struct {
	// FailureThreshold is how many failures open the breaker: consecutive
	// failures when Window is 0, failures within the rolling Window
	// otherwise.
	FailureThreshold uint32
	// Window, when positive, counts failures over a rolling window of this
	// length instead of counting consecutive failures.
	Window time.Duration
	// Cooldown is how long the breaker stays open before it lets probes
	// through (half_open).
	Cooldown time.Duration
	// HalfOpenProbes is how many requests may run while half_open; that
	// many successes in a row close the breaker, one failure reopens it.
	HalfOpenProbes uint32
	// IsFailure reports whether an error counts against the breaker.
	// Errors it rejects (and are not ignored) count as successes: the
	// other side answered.
	IsFailure func(error) bool
	// IsIgnored reports errors that count neither way, such as the
	// caller's own cancellation.
	IsIgnored func(error) bool
}

// DefaultProviderOptions: 5 consecutive provider-side failures open the
// breaker for 30 s; one probe then decides.
func DefaultProviderOptions() Options {
	return Options{
		FailureThreshold: 5,
		Cooldown:         30 * time.Second,
		HalfOpenProbes:   1,
		IsFailure:        ProviderFailure,
		IsIgnored:        Aborted,
	}
}

// DefaultBashOptions: 10 timeouts within 2 minutes open the bash breaker
// for 30 s; one probe then decides. Non-zero exit codes are not failures.
func DefaultBashOptions() Options {
	return Options{
		FailureThreshold: 10,
		Window:           2 * time.Minute,
		Cooldown:         30 * time.Second,
		HalfOpenProbes:   1,
		IsFailure:        BashFailure,
		IsIgnored:        Aborted,
	}
}

func (o Options) withDefaults(d Options) Options {
	if o.FailureThreshold == 0 {
		o.FailureThreshold = d.FailureThreshold
	}
	if o.Window < 0 {
		o.Window = 0
	}
	if o.Cooldown <= 0 {
		o.Cooldown = d.Cooldown
	}
	if o.HalfOpenProbes == 0 {
		o.HalfOpenProbes = d.HalfOpenProbes
	}
	if o.IsFailure == nil {
		o.IsFailure = d.IsFailure
	}
	if o.IsIgnored == nil {
		o.IsIgnored = d.IsIgnored
	}
	return o
}

// StateChange is passed to state-change listeners.
type StateChange struct {
	Kind     Kind
	Name     string
	From, To State
}

// Breaker is one circuit breaker. It is safe for concurrent use.
type Breaker struct {
	kind     Kind
	name     string
	cb       *gobreaker.TwoStepCircuitBreaker[struct{}]
	rejected atomic.Uint64
}

// Name is the provider name, or BashBreakerName.
func (b *Breaker) Name() string { return b.name }

// Kind is what the breaker guards.
func (b *Breaker) Kind() Kind { return b.kind }

// State is the current state; an open breaker whose cooldown has passed
// reads as half_open.
func (b *Breaker) State() State { return fromGobreaker(b.cb.State()) }

// Rejected is how many requests the breaker has turned away.
func (b *Breaker) Rejected() uint64 { return b.rejected.Load() }

// Allow asks whether a request may start. If not, it returns an
// [*OpenError] whose text is the spec's. If so, the caller must call
// report exactly once with the request's final error (nil on success),
// after a stream has ended; later calls are no-ops. A half-open breaker
// keeps its probe slot until report is called.
func (b *Breaker) Allow() (report func(error), err error) {
	done, err := b.cb.Allow()
	if err != nil {
		b.rejected.Add(1)
		st := StateOpen
		if errors.Is(err, gobreaker.ErrTooManyRequests) {
			st = StateHalfOpen
		}
		return nil, &OpenError{Kind: b.kind, Name: b.name, State: st}
	}
	var once sync.Once
	return func(err error) { once.Do(func() { done(err) }) }, nil
}

// Do runs fn if the breaker allows it and reports fn's error. A context
// already done returns its error without touching the breaker.
func (b *Breaker) Do(ctx context.Context, fn func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	report, err := b.Allow()
	if err != nil {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			report(errPanic)
			panic(p)
		}
	}()
	err = fn(ctx)
	report(err)
	return err
}

var errPanic = errors.New("health: request panicked")

// Status is one breaker's entry in get_metrics (spec §21.3).
type Status struct {
	State               State  `json:"state"`
	Requests            uint32 `json:"requests"`
	Failures            uint32 `json:"failures"`
	ConsecutiveFailures uint32 `json:"consecutiveFailures"`
	Rejected            uint64 `json:"rejected"`
}

// Status returns the breaker's state and the counts of its current
// period (they restart on every state change).
func (b *Breaker) Status() Status {
	st := b.State()
	c := b.cb.Counts()
	return Status{
		State:               st,
		Requests:            c.Requests,
		Failures:            c.TotalFailures,
		ConsecutiveFailures: c.ConsecutiveFailures,
		Rejected:            b.Rejected(),
	}
}

// Breakers is the server's set of breakers: one per provider name, made
// on first use, and one for bash.
type Breakers struct {
	provOpts, bashOpts Options

	mu        sync.Mutex
	providers map[string]*Breaker
	bash      *Breaker

	lmu       sync.RWMutex
	listeners []func(StateChange)
}

// NewBreakers makes a set; zero option fields take the defaults.
func NewBreakers(provider, bash Options) *Breakers {
	bs := &Breakers{
		provOpts:  provider.withDefaults(DefaultProviderOptions()),
		bashOpts:  bash.withDefaults(DefaultBashOptions()),
		providers: make(map[string]*Breaker),
	}
	bs.bash = bs.newBreaker(KindBash, BashBreakerName, bs.bashOpts)
	return bs
}

// OnStateChange adds a listener called on every state change of every
// breaker in the set. It runs synchronously while the breaker is locked:
// it must be quick and must not call into the same breaker.
func (bs *Breakers) OnStateChange(fn func(StateChange)) {
	bs.lmu.Lock()
	bs.listeners = append(bs.listeners, fn)
	bs.lmu.Unlock()
}

func (bs *Breakers) notify(c StateChange) {
	bs.lmu.RLock()
	ls := bs.listeners
	bs.lmu.RUnlock()
	for _, fn := range ls {
		fn(c)
	}
}

func (bs *Breakers) newBreaker(kind Kind, name string, o Options) *Breaker {
	isFailure, isIgnored := o.IsFailure, o.IsIgnored
	st := gobreaker.Settings{
		Name:        name,
		MaxRequests: o.HalfOpenProbes,
		Timeout:     o.Cooldown,
		IsExcluded:  func(err error) bool { return err != nil && isIgnored(err) },
		IsSuccessful: func(err error) bool {
			return err == nil || !isFailure(err)
		},
		OnStateChange: func(_ string, from, to gobreaker.State) {
			bs.notify(StateChange{Kind: kind, Name: name, From: fromGobreaker(from), To: fromGobreaker(to)})
		},
	}
	threshold := o.FailureThreshold
	if o.Window > 0 {
		st.Interval = o.Window
		// Twelve buckets make the window roll rather than jump.
		st.BucketPeriod = max(o.Window/12, time.Millisecond)
		st.ReadyToTrip = func(c gobreaker.Counts) bool { return c.TotalFailures >= threshold }
	} else {
		st.ReadyToTrip = func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= threshold }
	}
	return &Breaker{kind: kind, name: name, cb: gobreaker.NewTwoStepCircuitBreaker[struct{}](st)}
}

// Provider returns the breaker of a model provider, making it on first use.
func (bs *Breakers) Provider(name string) *Breaker {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b, ok := bs.providers[name]
	if !ok {
		b = bs.newBreaker(KindProvider, name, bs.provOpts)
		bs.providers[name] = b
	}
	return b
}

// Bash returns the bash breaker.
func (bs *Breakers) Bash() *Breaker { return bs.bash }

// Providers returns the provider breakers made so far, by name.
func (bs *Breakers) Providers() []*Breaker {
	bs.mu.Lock()
	out := make([]*Breaker, 0, len(bs.providers))
	for _, b := range bs.providers {
		out = append(out, b)
	}
	bs.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// CircuitMetrics is the breaker part of the get_metrics response
// (spec §21.3).
type CircuitMetrics struct {
	CircuitBreakers    map[string]Status `json:"circuitBreakers"`
	BashCircuitBreaker Status            `json:"bashCircuitBreaker"`
}

// Metrics snapshots every breaker for get_metrics.
func (bs *Breakers) Metrics() CircuitMetrics {
	m := CircuitMetrics{CircuitBreakers: make(map[string]Status)}
	for _, b := range bs.Providers() {
		m.CircuitBreakers[b.name] = b.Status()
	}
	m.BashCircuitBreaker = bs.bash.Status()
	return m
}
