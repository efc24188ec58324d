package health

import (
	"net/http"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/metrics"
)

// Metric names.
const (
	MetricCommandsTotal          = "agentd_commands_total"
	MetricCommandDuration        = "agentd_command_duration_seconds"
	MetricEventsTotal            = "agentd_events_total"
	MetricSessions               = "agentd_sessions"
	MetricConnections            = "agentd_connections"
	MetricProviderRequestsTotal  = "agentd_provider_requests_total"
	MetricProviderErrorsTotal    = "agentd_provider_errors_total"
	MetricBreakerState           = "agentd_circuit_breaker_state"
	MetricBreakerRejectionsTotal = "agentd_circuit_breaker_rejections_total"
)

// Command outcomes.
const (
	OutcomeSuccess = "success"
	OutcomeError   = "error"
)

// Metrics holds agentd's metrics on a registry of its own.
// All methods are safe for concurrent use.
type Metrics struct {
	reg *metrics.Registry

	commands    *metrics.CounterVec
	duration    *metrics.HistogramVec
	events      *metrics.CounterVec
	sessions    *metrics.Gauge
	connections *metrics.GaugeVec
	provReqs    *metrics.CounterVec
	provErrs    *metrics.CounterVec
}

// NewMetrics makes the metrics and their private registry, with the Go
// runtime's and the process's figures. Labels are listed by name, the
// order the exposition has always had them in.
func NewMetrics() *Metrics {
	sessions, sessionsFamily := metrics.NewGauge(MetricSessions, "Sessions loaded in memory.")
	m := &Metrics{
		reg: metrics.NewRegistry(),
		commands: metrics.NewCounterVec(MetricCommandsTotal,
			"Protocol commands handled, by command type and outcome.", "command", "outcome"),
		duration: metrics.NewHistogramVec(MetricCommandDuration,
			"Time from receiving a command to its response, by command type.",
			[]float64{.001, .005, .01, .05, .1, .5, 1, 5, 30, 120, 600}, "command"),
		events:      metrics.NewCounterVec(MetricEventsTotal, "Events sent to clients, by event type.", "type"),
		sessions:    sessions,
		connections: metrics.NewGaugeVec(MetricConnections, "Open client connections, by transport.", "transport"),
		provReqs:    metrics.NewCounterVec(MetricProviderRequestsTotal, "Model requests sent, by provider.", "provider"),
		provErrs: metrics.NewCounterVec(MetricProviderErrorsTotal,
			"Model requests that failed, by provider and error kind.", "kind", "provider"),
	}
	// go_gc_heap_live_bytes is among the Go collector's: the heap the
	// last collection found live, what RSS is measured against after
	// load (agentd bench --idle-wait).
	m.reg.MustRegister(m.commands, m.duration, m.events, sessionsFamily, m.connections, m.provReqs, m.provErrs,
		metrics.NewGoCollector(), metrics.NewProcessCollector())
	return m
}

// Registry is the private registry, for registering more collectors.
func (m *Metrics) Registry() *metrics.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler { return m.reg }

// labelValue bounds label cardinality: names come from clients, so only
// short snake_case names are kept, anything else becomes "other".
func labelValue(s string) string {
	if s == "" || len(s) > 64 {
		return "other"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return "other"
		}
	}
	return s
}

// ObserveCommand records a handled command.
func (m *Metrics) ObserveCommand(command string, ok bool, d time.Duration) {
	command = labelValue(command)
	outcome := OutcomeSuccess
	if !ok {
		outcome = OutcomeError
	}
	m.commands.With(command, outcome).Inc()
	m.duration.With(command).Observe(d.Seconds())
}

// Event records an event sent to a client.
func (m *Metrics) Event(eventType string) {
	m.events.With(labelValue(eventType)).Inc()
}

// SetSessions sets the number of sessions in memory.
func (m *Metrics) SetSessions(n int) { m.sessions.Set(float64(n)) }

// SessionOpened and SessionClosed move the session gauge by one.
func (m *Metrics) SessionOpened() { m.sessions.Inc() }

// SessionClosed: see SessionOpened.
func (m *Metrics) SessionClosed() { m.sessions.Dec() }

// ConnectionOpened and ConnectionClosed move the connection gauge of a
// transport ("stdio", "websocket", "sse", ...) by one.
func (m *Metrics) ConnectionOpened(transport string) {
	m.connections.With(labelValue(transport)).Inc()
}

// ConnectionClosed: see ConnectionOpened.
func (m *Metrics) ConnectionClosed(transport string) {
	m.connections.With(labelValue(transport)).Dec()
}

// ProviderRequest records a finished model request and, when err is not
// nil, its error kind (the llm.ErrorKind, "aborted" for a cancelled
// context, else "other").
func (m *Metrics) ProviderRequest(provider string, err error) {
	provider = labelValue(provider)
	m.provReqs.With(provider).Inc()
	if err == nil {
		return
	}
	kind := "other"
	if e, ok := llm.AsError(err); ok {
		kind = string(e.Kind)
	} else if Aborted(err) {
		kind = string(llm.ErrAborted)
	}
	m.provErrs.With(labelValue(kind), provider).Inc()
}

// WatchBreakers exports the breakers of bs, read at scrape time:
// agentd_circuit_breaker_state{kind,name} (0 closed, 1 half_open, 2 open)
// and agentd_circuit_breaker_rejections_total{kind,name}.
func (m *Metrics) WatchBreakers(bs *Breakers) error {
	return m.reg.Register(&breakerCollector{bs: bs})
}

// StateValue is a state's value in agentd_circuit_breaker_state.
func StateValue(s State) float64 {
	switch s {
	case StateHalfOpen:
		return 1
	case StateOpen:
		return 2
	}
	return 0
}

type breakerCollector struct{ bs *Breakers }

func (c *breakerCollector) Names() []string {
	return []string{MetricBreakerState, MetricBreakerRejectionsTotal}
}

func (c *breakerCollector) Collect(w *metrics.Writer) {
	all := append([]*Breaker{c.bs.Bash()}, c.bs.Providers()...)
	w.Family(MetricBreakerState, "Circuit breaker state: 0 closed, 1 half_open, 2 open.", metrics.TypeGauge)
	for _, b := range all {
		w.Sample(MetricBreakerState, StateValue(b.State()), "kind", string(b.Kind()), "name", labelValue(b.Name()))
	}
	w.Family(MetricBreakerRejectionsTotal, "Requests turned away by a circuit breaker.", metrics.TypeCounter)
	for _, b := range all {
		w.Sample(MetricBreakerRejectionsTotal, float64(b.Rejected()), "kind", string(b.Kind()), "name", labelValue(b.Name()))
	}
}
