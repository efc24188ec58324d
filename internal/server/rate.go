package server

import (
	"fmt"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
)

// RateClass says which budget a command is counted against.
type RateClass int

// Rate classes.
const (
	// RateData is ordinary traffic: the server's window and the window of
	// the command's session (server commands share one).
	RateData RateClass = iota
	// RateControl is what a client needs to regain control of a session
	// (delete it, switch to it, abort it, answer its questions): a
	// separate window per session, so a flood of data-plane commands
	// never locks a client out of stopping what it started.
	RateControl
	// RateUIResponse is an answer to a question or approval: a control
	// command with a window of its own besides.
	RateUIResponse
)

// Rejection counts how many commands each limit refused.
type Rejection string

// Limits that refuse commands before admission.
const (
	RejectGlobalRate Rejection = "globalRateLimit"
	RejectRate       Rejection = "rateLimit"
	RejectUIRate     Rejection = "extensionUIResponseRateLimit"
	RejectControl    Rejection = "controlRateLimit"
)

// RateError is a command refused by a rate limit.
type RateError struct {
	Limit Rejection
	*fault.Error
}

// rateLimits are sliding one-minute windows: one for the server, one per
// session for data, one per session for control, and one per session for
// answers to questions.
type rateLimits struct {
	lim    Limits
	window time.Duration

	// mu is a leaf, taken under pipeline.Pipeline.mu (a command's Admit
	// runs there); nothing is taken under it.
	mu      sync.Mutex
	global  window
	data    map[string]*window
	control map[string]*window
	ui      map[string]*window
}

// window holds the times of the commands of the last minute, oldest first.
type window struct{ times []time.Time }

// full prunes the window and reports whether it has no room left.
func (w *window) full(now time.Time, span time.Duration, limit int) bool {
	cut := 0
	for cut < len(w.times) && now.Sub(w.times[cut]) >= span {
		cut++
	}
	w.times = w.times[cut:]
	return len(w.times) >= limit
}

func windowOf(m map[string]*window, key string) *window {
	w := m[key]
	if w == nil {
		w = &window{}
		m[key] = w
	}
	return w
}

func newRateLimits(l Limits) *rateLimits {
	return &rateLimits{lim: l, window: time.Minute, data: map[string]*window{}, control: map[string]*window{}, ui: map[string]*window{}}
}

// admit counts one command of session sid ("" for a server command)
// against the limits of its class, or says which refuses it.
func (r *rateLimits) admit(sid string, class RateClass, now time.Time) *RateError {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := sid
	if key == "" {
		key = "_server_"
	}
	// Every window is checked before any is charged: a command refused by
	// one limit must not use up another.
	var charge []*window
	if class == RateData {
		if r.lim.GlobalRate > 0 {
			if r.global.full(now, r.window, r.lim.GlobalRate) {
				return &RateError{RejectGlobalRate, fault.Errorf(fault.RateLimited, "Global rate limit exceeded (%d commands/minute)", r.lim.GlobalRate)}
			}
			charge = append(charge, &r.global)
		}
		if r.lim.SessionRate > 0 {
			w := windowOf(r.data, key)
			if w.full(now, r.window, r.lim.SessionRate) {
				return &RateError{RejectRate, fault.Errorf(fault.RateLimited, "Rate limit exceeded (%d commands/minute)", r.lim.SessionRate)}
			}
			charge = append(charge, w)
		}
	} else {
		if r.lim.ControlRate > 0 {
			w := windowOf(r.control, key)
			if w.full(now, r.window, r.lim.ControlRate) {
				return &RateError{RejectControl, fault.Errorf(fault.RateLimited, "Control rate limit exceeded (%d control commands/minute)", r.lim.ControlRate)}
			}
			charge = append(charge, w)
		}
		if class == RateUIResponse && r.lim.UIResponseRate > 0 {
			w := windowOf(r.ui, key)
			if w.full(now, r.window, r.lim.UIResponseRate) {
				return &RateError{RejectUIRate, fault.Errorf(fault.RateLimited, "Extension UI response rate limit exceeded (%d responses/minute)", r.lim.UIResponseRate)}
			}
			charge = append(charge, w)
		}
	}
	for _, w := range charge {
		w.times = append(w.times, now)
	}
	if len(r.data)+len(r.control) > 4096 {
		r.sweep(now)
	}
	return nil
}

// sweep forgets windows with nothing in the last minute, so ids that were
// used once do not accumulate.
func (r *rateLimits) sweep(now time.Time) {
	for _, m := range []map[string]*window{r.data, r.control, r.ui} {
		for k, w := range m {
			if len(w.times) == 0 || now.Sub(w.times[len(w.times)-1]) >= r.window {
				delete(m, k)
			}
		}
	}
}

// usage is the global window's count, for metrics.
func (r *rateLimits) usage(now time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, t := range r.global.times {
		if now.Sub(t) < r.window {
			n++
		}
	}
	return n
}

func (e *RateError) String() string { return fmt.Sprintf("%s: %s", e.Limit, e.Message) }
