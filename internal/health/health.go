package health

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// HealthCheck is the data of a health_check response (spec §17.1, §21.2).
type HealthCheck struct {
	Healthy            bool     `json:"healthy"`
	Issues             []string `json:"issues"` // never null: [] when healthy
	HasOpenCircuit     bool     `json:"hasOpenCircuit"`
	HasOpenBashCircuit bool     `json:"hasOpenBashCircuit"`
}

// Issue texts.
const (
	IssueShuttingDown = "Server shutting down"
	IssueBashOpen     = BashOpenText
)

// IssueProviderOpen is the issue text for an open provider breaker.
func IssueProviderOpen(provider string) string {
	return ProviderOpenText + " for provider " + provider
}

// Health answers health_check and the liveness and readiness probes.
type Health struct {
	breakers     *Breakers
	shuttingDown atomic.Bool
	lasting      atomic.Pointer[[]string]
	// needs are conditions the server cannot serve without (a cluster
	// node's link to NATS), each with the issue it is while false. Set
	// before the server serves (Need), read at each check.
	needs []need
}

type need struct {
	issue string
	ok    func() bool
}

// Need makes ok a condition of readiness: while it is false the server
// is not ready (/readyz answers 503 with issue), /healthz's status is
// "degraded" with the issue, and health_check reports it. Call it before
// the server serves.
func (h *Health) Need(issue string, ok func() bool) {
	h.needs = append(h.needs, need{issue, ok})
}

// unmet lists the issues of the conditions that are false now.
func (h *Health) unmet() []string {
	var out []string
	for _, n := range h.needs {
		if !n.ok() {
			out = append(out, n.issue)
		}
	}
	return out
}

// AddLasting adds an issue that lasts as long as the server does (tools
// running without the sandbox the configuration asked for): health_check
// reports it, and the server is not healthy, while it stays ready.
func (h *Health) AddLasting(issue string) {
	for {
		old := h.lasting.Load()
		var next []string
		if old != nil {
			next = append(next, *old...)
		}
		next = append(next, issue)
		if h.lasting.CompareAndSwap(old, &next) {
			return
		}
	}
}

// Add adds an issue that lasts until remove is called (an MCP server of
// a session that failed to start, for as long as the session lives).
// Calling remove again does nothing.
func (h *Health) Add(issue string) (remove func()) {
	h.AddLasting(issue)
	var once sync.Once
	return func() {
		once.Do(func() {
			for {
				old := h.lasting.Load()
				if old == nil {
					return
				}
				i := slices.Index(*old, issue)
				if i < 0 {
					return
				}
				next := slices.Delete(slices.Clone(*old), i, i+1)
				if h.lasting.CompareAndSwap(old, &next) {
					return
				}
			}
		})
	}
}

// NewHealth watches bs (nil for no breakers).
func NewHealth(bs *Breakers) *Health { return &Health{breakers: bs} }

// BeginShutdown marks the server as draining: readiness fails from now on
// and health_check reports the issue. It cannot be undone.
func (h *Health) BeginShutdown() { h.shuttingDown.Store(true) }

// ShuttingDown reports whether BeginShutdown was called.
func (h *Health) ShuttingDown() bool { return h.shuttingDown.Load() }

// Check builds the health_check payload. A breaker counts as open only in
// the open state; half_open (probing) is not an issue. Healthy is true
// when there is no issue.
func (h *Health) Check() HealthCheck {
	hc := HealthCheck{Issues: []string{}}
	if l := h.lasting.Load(); l != nil {
		hc.Issues = append(hc.Issues, *l...)
	}
	if h.ShuttingDown() {
		hc.Issues = append(hc.Issues, IssueShuttingDown)
	}
	hc.Issues = append(hc.Issues, h.unmet()...)
	if h.breakers != nil {
		for _, b := range h.breakers.Providers() {
			if b.State() == StateOpen {
				hc.HasOpenCircuit = true
				hc.Issues = append(hc.Issues, IssueProviderOpen(b.Name()))
			}
		}
		if h.breakers.Bash().State() == StateOpen {
			hc.HasOpenBashCircuit = true
			hc.Issues = append(hc.Issues, IssueBashOpen)
		}
	}
	hc.Healthy = len(hc.Issues) == 0
	return hc
}

// Ready reports whether the server should get new traffic: it is not
// ready once shutting down, nor while a condition given to Need is false. Open breakers do not make it unready: they
// concern one provider (or bash), and the other commands still work; they
// show in health_check and the metrics instead.
func (h *Health) Ready() (bool, string) {
	if h.ShuttingDown() {
		return false, IssueShuttingDown
	}
	if unmet := h.unmet(); len(unmet) > 0 {
		return false, strings.Join(unmet, "; ")
	}
	return true, ""
}

type probeBody struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

func writeProbe(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// Detail is a named part of the /healthz answer besides its status, read
// at each request: a cluster node's view of the cluster, say.
type Detail struct {
	Name  string
	Value func() any
}

// LivenessHandler answers /healthz: 200 while the process serves HTTP,
// with the details besides the status; the status is "degraded", with
// the issues, while a condition given to Need is false (the process is
// alive: restarting it would not help, but it must not say "ok").
func (h *Health) LivenessHandler(details ...Detail) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		body := map[string]any{"status": "ok"}
		if unmet := h.unmet(); len(unmet) > 0 {
			body["status"] = "degraded"
			body["issues"] = unmet
		}
		for _, d := range details {
			body[d.Name] = d.Value()
		}
		writeProbe(w, http.StatusOK, body)
	})
}

// ReadinessHandler answers /readyz: 200 when [Health.Ready], else 503.
func (h *Health) ReadinessHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if ok, reason := h.Ready(); !ok {
			writeProbe(w, http.StatusServiceUnavailable, probeBody{Status: "unavailable", Reason: reason})
			return
		}
		writeProbe(w, http.StatusOK, probeBody{Status: "ok"})
	})
}

// NewMux serves /metrics (when m is not nil), /healthz (with details)
// and /readyz.
func NewMux(h *Health, m *Metrics, details ...Detail) *http.ServeMux {
	mux := http.NewServeMux()
	if m != nil {
		mux.Handle("GET /metrics", m.Handler())
	}
	mux.Handle("GET /healthz", h.LivenessHandler(details...))
	mux.Handle("GET /readyz", h.ReadinessHandler())
	return mux
}
