package piserver

import (
	"fmt"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/pipeline"
)

// rateError is a command refused by a rate limit, before admission.
type rateError struct {
	limit string // "global", "session" or "ui"
	msg   string
}

// rateLimits are pi-server's sliding one-minute windows: one for the whole
// server, one per session (server commands share one), and one more for
// extension_ui_response per session.
type rateLimits struct {
	lim    Limits
	window time.Duration
	now    func() time.Time

	mu     sync.Mutex
	global window
	keys   map[string]*window
	ui     map[string]*window
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
	return &rateLimits{lim: l, window: time.Minute, now: time.Now, keys: map[string]*window{}, ui: map[string]*window{}}
}

// admit counts cmd against the limits, or says which limit refuses it.
func (r *rateLimits) admit(cmd pipeline.Command) *rateError {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	// Every window is checked before any is charged: a command refused by
	// its session's limit must not use up the server's.
	if r.lim.GlobalRate > 0 && r.global.full(now, r.window, r.lim.GlobalRate) {
		return &rateError{"global", fmt.Sprintf("Global rate limit exceeded (%d commands/minute)", r.lim.GlobalRate)}
	}
	key := cmd.SessionID
	if key == "" {
		key = "_server_"
	}
	var charge []*window
	if r.lim.GlobalRate > 0 {
		charge = append(charge, &r.global)
	}
	if r.lim.SessionRate > 0 {
		w := windowOf(r.keys, key)
		if w.full(now, r.window, r.lim.SessionRate) {
			return &rateError{"session", fmt.Sprintf("Rate limit exceeded (%d commands/minute)", r.lim.SessionRate)}
		}
		charge = append(charge, w)
	}
	if cmd.Type == "extension_ui_response" && r.lim.UIResponseRate > 0 {
		w := windowOf(r.ui, key)
		if w.full(now, r.window, r.lim.UIResponseRate) {
			return &rateError{"ui", fmt.Sprintf("Extension UI response rate limit exceeded (%d responses/minute)", r.lim.UIResponseRate)}
		}
		charge = append(charge, w)
	}
	for _, w := range charge {
		w.times = append(w.times, now)
	}
	if len(r.keys) > 4096 {
		r.sweep(now)
	}
	return nil
}

// sweep forgets windows with nothing in the last minute, so ids that were
// used once do not accumulate.
func (r *rateLimits) sweep(now time.Time) {
	for _, m := range []map[string]*window{r.keys, r.ui} {
		for k, w := range m {
			if len(w.times) == 0 || now.Sub(w.times[len(w.times)-1]) >= r.window {
				delete(m, k)
			}
		}
	}
}

// usage reports the global count for get_metrics.
func (r *rateLimits) usage() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	n := 0
	for _, t := range r.global.times {
		if now.Sub(t) < r.window {
			n++
		}
	}
	return n
}
