package health

import (
	"net/http"
	"regexp"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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

// Metrics holds agentd's Prometheus metrics on a registry of its own.
// All methods are safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	commands    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	events      *prometheus.CounterVec
	sessions    prometheus.Gauge
	connections *prometheus.GaugeVec
	provReqs    *prometheus.CounterVec
	provErrs    *prometheus.CounterVec
	// eventCounters caches the counter of each event type: Event runs for
	// every event of every watched session, and finding a labelled
	// counter hashes its labels each time.
	eventCounters sync.Map // string -> prometheus.Counter
}

// NewMetrics makes the metrics and their private registry, with the Go
// runtime and process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricCommandsTotal,
			Help: "Protocol commands handled, by command type and outcome.",
		}, []string{"command", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricCommandDuration,
			Help:    "Time from receiving a command to its response, by command type.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 30, 120, 600},
		}, []string{"command"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricEventsTotal,
			Help: "Events sent to clients, by event type.",
		}, []string{"type"}),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricSessions,
			Help: "Sessions loaded in memory.",
		}),
		connections: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricConnections,
			Help: "Open client connections, by transport.",
		}, []string{"transport"}),
		provReqs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricProviderRequestsTotal,
			Help: "Model requests sent, by provider.",
		}, []string{"provider"}),
		provErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricProviderErrorsTotal,
			Help: "Model requests that failed, by provider and error kind.",
		}, []string{"provider", "kind"}),
	}
	m.reg.MustRegister(m.commands, m.duration, m.events, m.sessions, m.connections, m.provReqs, m.provErrs,
		// go_gc_heap_live_bytes besides the defaults: the heap the last
		// collection found live, what RSS is measured against after load
		// (agentd bench --idle-wait).
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the private registry, for registering more collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

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
	m.commands.WithLabelValues(command, outcome).Inc()
	m.duration.WithLabelValues(command).Observe(d.Seconds())
}

// Event records an event sent to a client.
func (m *Metrics) Event(eventType string) {
	if c, ok := m.eventCounters.Load(eventType); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c := m.events.WithLabelValues(labelValue(eventType))
	m.eventCounters.Store(eventType, c)
	c.Inc()
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
	m.connections.WithLabelValues(labelValue(transport)).Inc()
}

// ConnectionClosed: see ConnectionOpened.
func (m *Metrics) ConnectionClosed(transport string) {
	m.connections.WithLabelValues(labelValue(transport)).Dec()
}

// ProviderRequest records a finished model request and, when err is not
// nil, its error kind (the llm.ErrorKind, "aborted" for a cancelled
// context, else "other").
func (m *Metrics) ProviderRequest(provider string, err error) {
	provider = labelValue(provider)
	m.provReqs.WithLabelValues(provider).Inc()
	if err == nil {
		return
	}
	kind := "other"
	if e, ok := llm.AsError(err); ok {
		kind = string(e.Kind)
	} else if Aborted(err) {
		kind = string(llm.ErrAborted)
	}
	m.provErrs.WithLabelValues(provider, labelValue(kind)).Inc()
}

// WatchBreakers exports the breakers of bs, read at scrape time:
// agentd_circuit_breaker_state{kind,name} (0 closed, 1 half_open, 2 open)
// and agentd_circuit_breaker_rejections_total{kind,name}.
func (m *Metrics) WatchBreakers(bs *Breakers) error {
	return m.reg.Register(&breakerCollector{bs: bs})
}

var (
	breakerStateDesc = prometheus.NewDesc(MetricBreakerState,
		"Circuit breaker state: 0 closed, 1 half_open, 2 open.", []string{"kind", "name"}, nil)
	breakerRejectedDesc = prometheus.NewDesc(MetricBreakerRejectionsTotal,
		"Requests turned away by a circuit breaker.", []string{"kind", "name"}, nil)
)

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

func (c *breakerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- breakerStateDesc
	ch <- breakerRejectedDesc
}

func (c *breakerCollector) Collect(ch chan<- prometheus.Metric) {
	all := append(c.bs.Providers(), c.bs.Bash())
	for _, b := range all {
		kind, name := string(b.Kind()), labelValue(b.Name())
		ch <- prometheus.MustNewConstMetric(breakerStateDesc, prometheus.GaugeValue, StateValue(b.State()), kind, name)
		ch <- prometheus.MustNewConstMetric(breakerRejectedDesc, prometheus.CounterValue, float64(b.Rejected()), kind, name)
	}
}
