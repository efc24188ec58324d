package interaction

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Errors of the broker. Test with errors.Is: the errors returned carry
// more detail (ResolvedError, CancelledError, ValidationError).
var (
	// ErrNotFound: no request with that id is pending or was resolved
	// recently enough to remember.
	ErrNotFound = errors.New("interaction: no such request")
	// ErrAlreadyResolved: the request ended before this answer arrived;
	// the error is a *ResolvedError saying how.
	ErrAlreadyResolved = errors.New("interaction: request already resolved")
	// ErrTimeout: Ask got no answer before the request expired.
	ErrTimeout = errors.New("interaction: no answer before the timeout")
	// ErrCancelled: the request was cancelled through Cancel, CancelAll or
	// Close; the error is a *CancelledError with the reason.
	ErrCancelled = errors.New("interaction: request cancelled")
	// ErrClosed: Ask on a closed broker.
	ErrClosed = errors.New("interaction: broker closed")
)

// ResolvedBy is how a request ended.
type ResolvedBy string

// The ways a request ends.
const (
	ResolvedAnswered  ResolvedBy = "answered"
	ResolvedTimeout   ResolvedBy = "timeout"
	ResolvedCancelled ResolvedBy = "cancelled"
)

// ResolvedError is returned to an Answer or Cancel that lost: the request
// had already ended, By says how. errors.Is(err, ErrAlreadyResolved) holds.
type ResolvedError struct {
	ID string
	By ResolvedBy
}

// Error says how the request ended, for the loser to report.
func (e *ResolvedError) Error() string {
	switch e.By {
	case ResolvedAnswered:
		return fmt.Sprintf("interaction %s was already answered", e.ID)
	case ResolvedTimeout:
		return fmt.Sprintf("interaction %s already timed out", e.ID)
	}
	return fmt.Sprintf("interaction %s was already cancelled", e.ID)
}

// Unwrap makes errors.Is(err, ErrAlreadyResolved) hold.
func (e *ResolvedError) Unwrap() error { return ErrAlreadyResolved }

// CancelledError is what Ask returns when the request was cancelled on the
// broker (Cancel, CancelAll, Close). errors.Is(err, ErrCancelled) holds.
type CancelledError struct {
	Reason string
}

// Error includes the reason, which is what a person or model acts on.
func (e *CancelledError) Error() string {
	if e.Reason == "" {
		return ErrCancelled.Error()
	}
	return ErrCancelled.Error() + ": " + e.Reason
}

// Unwrap makes errors.Is(err, ErrCancelled) hold.
func (e *CancelledError) Unwrap() error { return ErrCancelled }

// EventType says what happened to a request.
type EventType string

// The event types.
const (
	EventRequested EventType = "requested"
	EventResolved  EventType = "resolved"
)

// Resolution is how a request ended.
type Resolution struct {
	By ResolvedBy `json:"by"`
	// Response is the validated answer when By is ResolvedAnswered.
	Response Response `json:"response,omitzero"`
	// Reason explains a cancellation.
	Reason string `json:"reason,omitempty"`
}

// Event is a change in the broker's pending set, for clients to show and
// hide requests.
type Event struct {
	Type    EventType `json:"type"`
	Request Request   `json:"request"`
	// Resolution is set for EventResolved.
	Resolution *Resolution `json:"resolution,omitempty"`
}

// BrokerOptions configure a Broker.
type BrokerOptions struct {
	// Timeout is the default wait of a request whose own Timeout is 0;
	// 0 here means no limit.
	Timeout time.Duration
	// OnEvent observes every request and resolution. Calls are in the
	// order the events happened, one at a time, and never under the
	// broker's lock, so OnEvent may call back into the broker (answer a
	// request it was just shown, for instance). It runs on whichever
	// goroutine produced or is already delivering events: keep it short
	// and do not block in it.
	OnEvent func(Event)
	// Remember is how many resolved ids are kept so that a late answer is
	// told how the request ended rather than ErrNotFound; 0 means 1024.
	Remember int
}

// Broker holds the pending interactions of one session. It belongs to the
// session, not to a connection: a request outlives the client that first
// saw it, and any client may answer it. A Broker owns no goroutines; the
// waiting happens in Ask's caller.
type Broker struct {
	timeout  time.Duration
	onEvent  func(Event)
	remember int

	mu      sync.Mutex
	closed  bool
	seq     uint64
	pending map[string]*pending
	// settled are parked requests answered before any Ask adopted them;
	// the Ask that does gets the answer at once.
	settled map[string]*pending
	// resolved remembers how recent requests ended, evicted oldest first
	// through ring, so memory stays bounded in a long session. A
	// remembered id is not given to a new request (see freeIDLocked), so
	// that an answer meant for an old request never settles a new one.
	resolved map[string]ResolvedBy
	ring     []string
	ringNext int
	// queue and draining deliver events in order without holding mu and
	// without a goroutine: the first goroutine to find the queue idle
	// delivers everything queued until it is empty again.
	queue    []queued
	draining bool
}

type pending struct {
	req  Request
	seq  uint64
	done chan struct{}
	// seen is closed once the event of the resolution has been
	// delivered: the Ask waiting on done returns only after it, so the
	// caller's next events (a tool's execution) come after the
	// resolution on every observer's stream, even when another goroutine
	// (the one that answered) delivers it.
	seen chan struct{}
	// parked: published by Park, and no Ask waits on it yet.
	parked bool
	// Set once, under Broker.mu, before done is closed.
	res Resolution
	err error
}

// NewBroker returns an empty broker.
func NewBroker(opts BrokerOptions) *Broker {
	if opts.Remember <= 0 {
		opts.Remember = 1024
	}
	return &Broker{
		timeout:  opts.Timeout,
		onEvent:  opts.OnEvent,
		remember: opts.Remember,
		pending:  make(map[string]*pending),
		settled:  make(map[string]*pending),
		resolved: make(map[string]ResolvedBy),
	}
}

// Ask publishes req and blocks until it is answered, expires, is
// cancelled on the broker, or ctx is done. It returns the validated answer
// (which may be Cancelled: the person dismissed it), or ErrTimeout, a
// *CancelledError, context.Cause(ctx), ErrClosed, or a *ValidationError
// for a malformed request. A ctx that is already done returns at once
// without publishing anything.
//
// req.ID, when set, is the request's id (one derived from what it asks
// about, so that clients can name it across a restart; see ApprovalID);
// if a request with that id is waiting or was resolved recently, a
// suffix makes it unique.
// An id that names a parked request (see Park) adopts it instead: no new
// request is published, a parked request already answered returns its
// answer at once, and an adopted one does not time out, having waited
// for a person already.
func (b *Broker) Ask(ctx context.Context, req Request) (Response, error) {
	if err := req.Validate(); err != nil {
		return Response{}, err
	}
	if ctx.Err() != nil {
		return Response{}, context.Cause(ctx)
	}
	timeout := req.Timeout
	if timeout == 0 {
		timeout = b.timeout
	}

	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return Response{}, ErrClosed
	}
	var p *pending
	if req.ID != "" {
		if s := b.settled[req.ID]; s != nil {
			delete(b.settled, req.ID)
			b.mu.Unlock()
			return s.res.Response, nil
		}
		if q := b.pending[req.ID]; q != nil && q.parked {
			q.parked = false
			p, timeout = q, 0
		}
	}
	if p == nil {
		req.ID = b.freeIDLocked(req.ID)
		req.CreatedAt = time.Now()
		req.ExpiresAt = time.Time{}
		if timeout > 0 {
			req.ExpiresAt = req.CreatedAt.Add(timeout)
		}
		b.seq++
		p = &pending{req: req, seq: b.seq, done: make(chan struct{}), seen: make(chan struct{})}
		b.pending[req.ID] = p
		b.emitLocked(Event{Type: EventRequested, Request: req})
	}
	b.mu.Unlock()
	b.drain()

	// A timer channel in the select rather than time.AfterFunc: nothing
	// runs on the broker's behalf after Ask returns, and under
	// testing/synctest the wait is on the bubble's fake clock.
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-p.done:
	case <-expired:
		b.resolve(p, Resolution{By: ResolvedTimeout}, ErrTimeout)
	case <-ctx.Done():
		cause := context.Cause(ctx)
		b.resolve(p, Resolution{By: ResolvedCancelled, Reason: cause.Error()}, cause)
	}
	// resolve is a no-op when another path won the race; either way done
	// is closed and p.res/p.err are final.
	<-p.done
	<-p.seen
	if p.res.By == ResolvedAnswered {
		return p.res.Response, nil
	}
	return Response{}, p.err
}

// Park publishes req without waiting for it: a request that outlived the
// wait that asked it (a tool call interrupted by a restart) and waits for
// a person again. Clients see and answer it like any other; it never
// times out. An Ask with the same id later adopts it (see Ask), and an
// answer given before then waits for that Ask. Park returns the request
// as published: req.ID, or a random id when empty, made unique as in Ask.
func (b *Broker) Park(req Request) (Request, error) {
	if err := req.Validate(); err != nil {
		return Request{}, err
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return Request{}, ErrClosed
	}
	req.ID = b.freeIDLocked(req.ID)
	req.CreatedAt = time.Now()
	req.ExpiresAt = time.Time{}
	req.Timeout = 0
	b.seq++
	b.pending[req.ID] = &pending{req: req, seq: b.seq, done: make(chan struct{}), seen: make(chan struct{}), parked: true}
	b.emitLocked(Event{Type: EventRequested, Request: req})
	b.mu.Unlock()
	b.drain()
	return req, nil
}

// Parked reports whether id is a parked request nobody has adopted yet,
// answered or not.
func (b *Broker) Parked(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.pending[id]; p != nil {
		return p.parked
	}
	return b.settled[id] != nil
}

// Forget drops the answer of a parked request that no Ask will adopt
// (the conversation moved on, the run that would have was aborted).
func (b *Broker) Forget(id string) {
	b.mu.Lock()
	delete(b.settled, id)
	b.mu.Unlock()
}

// freeIDLocked returns id, or a fresh random id when empty, made unique
// with a ".2", ".3"… suffix among the requests waiting and those still
// remembered: the same tool call id may come twice from a model, or from
// two branches of a conversation, and a late answer to the first request
// must find it resolved, not settle the second.
func (b *Broker) freeIDLocked(id string) string {
	if id == "" {
		return newID()
	}
	taken := func(id string) bool {
		_, resolved := b.resolved[id]
		return resolved || b.pending[id] != nil || b.settled[id] != nil
	}
	if !taken(id) {
		return id
	}
	for n := 2; ; n++ {
		if c := id + "." + strconv.Itoa(n); !taken(c) {
			return c
		}
	}
}

// Answer resolves request id with resp. The answer is validated against
// the request first (a *ValidationError leaves the request pending, so the
// person can correct it). If the request already ended, the error is a
// *ResolvedError saying how; ErrNotFound if the id was never issued or is
// too old to remember.
func (b *Broker) Answer(id string, resp Response) error {
	b.mu.Lock()
	p, ok := b.pending[id]
	if !ok {
		err := b.goneLocked(id)
		b.mu.Unlock()
		return err
	}
	norm, err := p.req.ValidateResponse(resp)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	b.resolveLocked(p, Resolution{By: ResolvedAnswered, Response: norm}, nil)
	b.mu.Unlock()
	b.drain()
	return nil
}

// Cancel ends request id; its Ask returns a *CancelledError. Errors as for
// Answer.
func (b *Broker) Cancel(id string) error { return b.CancelWith(id, "cancelled") }

// CancelWith is Cancel with the reason clients and the asker are told.
func (b *Broker) CancelWith(id, reason string) error {
	b.mu.Lock()
	p, ok := b.pending[id]
	if !ok {
		err := b.goneLocked(id)
		b.mu.Unlock()
		return err
	}
	b.resolveLocked(p, Resolution{By: ResolvedCancelled, Reason: reason}, &CancelledError{Reason: reason})
	b.mu.Unlock()
	b.drain()
	return nil
}

// CancelAll ends every pending request with reason (an abort: the run
// that was waiting is gone) and returns how many there were. Later Asks
// work as before.
func (b *Broker) CancelAll(reason string) int {
	b.mu.Lock()
	n := b.cancelAllLocked(reason)
	b.mu.Unlock()
	b.drain()
	return n
}

// Close cancels every pending request with reason and makes later Asks
// fail with ErrClosed; for the end of the session.
func (b *Broker) Close(reason string) {
	b.mu.Lock()
	b.closed = true
	b.cancelAllLocked(reason)
	b.mu.Unlock()
	b.drain()
}

func (b *Broker) cancelAllLocked(reason string) int {
	ps := b.sortedLocked()
	for _, p := range ps {
		b.resolveLocked(p, Resolution{By: ResolvedCancelled, Reason: reason}, &CancelledError{Reason: reason})
	}
	return len(ps)
}

// Pending returns the requests waiting for an answer, oldest first, so
// a client that connects late shows them in the order they were asked.
func (b *Broker) Pending() []Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	ps := b.sortedLocked()
	out := make([]Request, len(ps))
	for i, p := range ps {
		out[i] = p.req
	}
	return out
}

// Get returns pending request id.
func (b *Broker) Get(id string) (Request, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.pending[id]
	if !ok {
		return Request{}, false
	}
	return p.req, true
}

func (b *Broker) sortedLocked() []*pending {
	ps := make([]*pending, 0, len(b.pending))
	for _, p := range b.pending {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].seq < ps[j].seq })
	return ps
}

func (b *Broker) goneLocked(id string) error {
	if by, ok := b.resolved[id]; ok {
		return &ResolvedError{ID: id, By: by}
	}
	return ErrNotFound
}

func (b *Broker) resolve(p *pending, res Resolution, err error) {
	b.mu.Lock()
	if _, ok := b.pending[p.req.ID]; ok {
		b.resolveLocked(p, res, err)
	}
	b.mu.Unlock()
	b.drain()
}

func (b *Broker) resolveLocked(p *pending, res Resolution, err error) {
	id := p.req.ID
	delete(b.pending, id)
	if len(b.ring) < b.remember {
		b.ring = append(b.ring, id)
	} else {
		delete(b.resolved, b.ring[b.ringNext])
		b.ring[b.ringNext] = id
		b.ringNext = (b.ringNext + 1) % b.remember
	}
	b.resolved[id] = res.By
	p.res, p.err = res, err
	if p.parked && res.By == ResolvedAnswered {
		b.settled[id] = p
	}
	close(p.done)
	b.queueLocked(Event{Type: EventResolved, Request: p.req, Resolution: &res}, p.seen)
}

func (b *Broker) emitLocked(e Event) { b.queueLocked(e, nil) }

// queueLocked queues e for delivery; seen, when not nil, is closed once
// it has been delivered (at once without an observer).
func (b *Broker) queueLocked(e Event, seen chan struct{}) {
	if b.onEvent == nil {
		if seen != nil {
			close(seen)
		}
		return
	}
	b.queue = append(b.queue, queued{e, seen})
}

// queued is an event waiting for delivery.
type queued struct {
	e    Event
	seen chan struct{}
}

// drain delivers queued events unless another goroutine already is; that
// goroutine will pick up whatever was queued meanwhile, which keeps the
// order without blocking the caller or holding mu during OnEvent.
func (b *Broker) drain() {
	b.mu.Lock()
	if b.draining {
		b.mu.Unlock()
		return
	}
	b.draining = true
	locked := true
	var cur chan struct{}
	defer func() {
		// Runs on a panic in OnEvent too, so one bad observer call does
		// not silence every later event, nor leave an Ask waiting.
		if cur != nil {
			close(cur)
		}
		if !locked {
			b.mu.Lock()
		}
		b.draining = false
		b.mu.Unlock()
	}()
	for len(b.queue) > 0 {
		q := b.queue[0]
		b.queue[0] = queued{}
		b.queue = b.queue[1:]
		b.mu.Unlock()
		locked = false
		cur = q.seen
		b.onEvent(q.e)
		if cur != nil {
			close(cur)
			cur = nil
		}
		b.mu.Lock()
		locked = true
	}
	b.queue = nil
}

// newID returns 16 random hex digits: unguessable enough that a client
// cannot answer a request it was not shown, and short enough to type.
func newID() string {
	var buf [8]byte
	_, _ = rand.Read(buf[:])
	return hex.EncodeToString(buf[:])
}
