package health

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
)

func openBreaker(t *testing.T, b *Breaker) {
	t.Helper()
	for b.State() != StateOpen {
		r := mustAllow(t, b)
		if b.Kind() == KindBash {
			r(ErrBashTimeout)
		} else {
			r(errServer)
		}
	}
}

func TestHealthCheckJSON(t *testing.T) {
	bs := NewBreakers(Options{FailureThreshold: 2, Cooldown: time.Hour}, Options{FailureThreshold: 1, Cooldown: time.Hour})
	h := NewHealth(bs)
	bs.Provider("openai")
	got, err := json.Marshal(h.Check())
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"healthy":true,"issues":[],"hasOpenCircuit":false,"hasOpenBashCircuit":false}`
	if string(got) != want {
		t.Fatalf("health_check data = %s\nwant %s", got, want)
	}

	openBreaker(t, bs.Provider("anthropic"))
	hc := h.Check()
	if hc.Healthy || !hc.HasOpenCircuit || hc.HasOpenBashCircuit ||
		!slices.Equal(hc.Issues, []string{"Circuit breaker open for provider anthropic"}) {
		t.Fatalf("after provider open: %+v", hc)
	}
	openBreaker(t, bs.Bash())
	h.BeginShutdown()
	hc = h.Check()
	if hc.Healthy || !hc.HasOpenCircuit || !hc.HasOpenBashCircuit || len(hc.Issues) != 3 {
		t.Fatalf("after bash open and shutdown: %+v", hc)
	}

	// get_metrics breaker part (spec §21.3).
	var m map[string]json.RawMessage
	raw, _ := json.Marshal(bs.Metrics())
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m["circuitBreakers"] == nil || m["bashCircuitBreaker"] == nil {
		t.Fatalf("get_metrics breaker keys: %s", raw)
	}
	var cm CircuitMetrics
	_ = json.Unmarshal(raw, &cm)
	if cm.CircuitBreakers["anthropic"].State != StateOpen || cm.CircuitBreakers["openai"].State != StateClosed ||
		cm.BashCircuitBreaker.State != StateOpen {
		t.Fatalf("states: %s", raw)
	}
	if !strings.Contains(string(raw), `"state":"open"`) {
		t.Fatalf("state not spelled as in spec: %s", raw)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestProbes(t *testing.T) {
	h := NewHealth(NewBreakers(Options{}, Options{}))
	srv := httptest.NewServer(NewMux(h, nil))
	defer srv.Close()
	if !strings.HasPrefix(srv.URL, "http://127.0.0.1:") {
		t.Fatalf("test server not on loopback: %s", srv.URL)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, srv.URL+path); code != 200 || !strings.Contains(body, `"ok"`) {
			t.Fatalf("%s = %d %s", path, code, body)
		}
	}
	h.BeginShutdown()
	if code, body := get(t, srv.URL+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, IssueShuttingDown) {
		t.Fatalf("/readyz while shutting down = %d %s", code, body)
	}
	if code, _ := get(t, srv.URL+"/healthz"); code != 200 {
		t.Fatalf("/healthz while shutting down = %d, want 200 (still alive)", code)
	}
}

// A condition the server needs (a cluster node's link to NATS) makes it
// unready and its liveness "degraded" while false, and health_check
// names it; both come back when it holds again.
func TestNeed(t *testing.T) {
	h := NewHealth(nil)
	var connected atomic.Bool
	const issue = "cluster: not connected to NATS (reconnecting)"
	h.Need(issue, connected.Load)
	srv := httptest.NewServer(NewMux(h, nil))
	defer srv.Close()
	if code, body := get(t, srv.URL+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, issue) {
		t.Fatalf("/readyz while the need is unmet = %d %s", code, body)
	}
	if code, body := get(t, srv.URL+"/healthz"); code != 200 || !strings.Contains(body, `"status":"degraded"`) || !strings.Contains(body, issue) {
		t.Fatalf("/healthz while the need is unmet = %d %s", code, body)
	}
	if hc := h.Check(); hc.Healthy || !slices.Contains(hc.Issues, issue) {
		t.Fatalf("health_check = %+v", hc)
	}
	connected.Store(true)
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, srv.URL+path); code != 200 || !strings.Contains(body, `"status":"ok"`) || strings.Contains(body, issue) {
			t.Fatalf("%s once met = %d %s", path, code, body)
		}
	}
	if hc := h.Check(); !hc.Healthy {
		t.Fatalf("health_check once met = %+v", hc)
	}
}

// scrape fetches /metrics and returns the sample lines and the declared
// type of each family.
func scrape(t *testing.T, url string) (samples []string, types map[string]string) {
	t.Helper()
	code, body := get(t, url)
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	types = map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
		} else if line != "" && !strings.HasPrefix(line, "#") {
			samples = append(samples, line)
		}
	}
	return samples, types
}

func hasSample(samples []string, want string) bool {
	return slices.ContainsFunc(samples, func(s string) bool { return strings.HasPrefix(s, want) })
}

func TestMetricsEndpoint(t *testing.T) {
	bs := NewBreakers(Options{FailureThreshold: 1, Cooldown: time.Hour}, Options{})
	m := NewMetrics()
	if err := m.WatchBreakers(bs); err != nil {
		t.Fatal(err)
	}
	openBreaker(t, bs.Provider("anthropic"))
	_, _ = bs.Provider("anthropic").Allow() // rejected
	m.ObserveCommand("prompt", true, 20*time.Millisecond)
	m.ObserveCommand("prompt", false, time.Second)
	m.ObserveCommand("Bad Name!", true, 0)
	m.Event("message_update")
	m.SessionOpened()
	m.SessionOpened()
	m.SessionClosed()
	m.ConnectionOpened("websocket")
	m.ProviderRequest("anthropic", nil)
	m.ProviderRequest("anthropic", errServer)
	m.ProviderRequest("anthropic", &llm.Error{Kind: llm.ErrOverloaded})

	srv := httptest.NewServer(NewMux(NewHealth(bs), m))
	defer srv.Close()
	samples, types := scrape(t, srv.URL+"/metrics")

	for name, typ := range map[string]string{
		MetricCommandsTotal:          "counter",
		MetricCommandDuration:        "histogram",
		MetricEventsTotal:            "counter",
		MetricSessions:               "gauge",
		MetricConnections:            "gauge",
		MetricProviderRequestsTotal:  "counter",
		MetricProviderErrorsTotal:    "counter",
		MetricBreakerState:           "gauge",
		MetricBreakerRejectionsTotal: "counter",
	} {
		if types[name] != typ {
			t.Errorf("%s type = %q, want %q", name, types[name], typ)
		}
	}
	for _, want := range []string{
		`agentd_commands_total{command="prompt",outcome="success"} 1`,
		`agentd_commands_total{command="prompt",outcome="error"} 1`,
		`agentd_commands_total{command="other",outcome="success"} 1`,
		`agentd_command_duration_seconds_count{command="prompt"} 2`,
		`agentd_events_total{type="message_update"} 1`,
		`agentd_sessions 1`,
		`agentd_connections{transport="websocket"} 1`,
		`agentd_provider_requests_total{provider="anthropic"} 3`,
		`agentd_provider_errors_total{kind="server",provider="anthropic"} 1`,
		`agentd_provider_errors_total{kind="overloaded",provider="anthropic"} 1`,
		`agentd_circuit_breaker_state{kind="provider",name="anthropic"} 2`,
		`agentd_circuit_breaker_state{kind="bash",name="bash"} 0`,
		`agentd_circuit_breaker_rejections_total{kind="provider",name="anthropic"} 1`,
		`go_goroutines `,
		`go_gc_heap_live_bytes `, // what agentd bench compares RSS with
	} {
		if !hasSample(samples, want) {
			t.Errorf("missing sample %q", want)
		}
	}

	// Two Metrics side by side do not collide, as they would on one registry.
	if err := NewMetrics().WatchBreakers(bs); err != nil {
		t.Fatal(err)
	}
}

// A lasting issue (tools running unsandboxed) stays in every
// health_check and makes the server unhealthy, but not unready.
func TestLastingIssue(t *testing.T) {
	h := NewHealth(nil)
	h.AddLasting("Tools are not sandboxed")
	for range 2 {
		hc := h.Check()
		if hc.Healthy || len(hc.Issues) != 1 || hc.Issues[0] != "Tools are not sandboxed" {
			t.Fatalf("Check = %+v", hc)
		}
	}
	if ok, _ := h.Ready(); !ok {
		t.Fatal("a lasting issue made the server unready")
	}
}

// /healthz carries the details it was given, read at each request, and
// only the status without any.
func TestLivenessDetails(t *testing.T) {
	h := NewHealth(NewBreakers(Options{}, Options{}))
	n := 0
	tests := []struct {
		name    string
		details []Detail
		want    []string
	}{
		{"none", nil, []string{`{"status":"ok"}` + "\n"}},
		{"one", []Detail{{Name: "cluster", Value: func() any { n++; return map[string]int{"members": n} }}},
			[]string{`{"cluster":{"members":1},"status":"ok"}` + "\n", `{"cluster":{"members":2},"status":"ok"}` + "\n"}},
		{"null", []Detail{{Name: "cluster", Value: func() any { return nil }}}, []string{`{"cluster":null,"status":"ok"}` + "\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(NewMux(h, nil, tc.details...))
			defer srv.Close()
			for _, want := range tc.want {
				if code, body := get(t, srv.URL+"/healthz"); code != 200 || body != want {
					t.Fatalf("/healthz = %d %q, want %q", code, body, want)
				}
			}
			resp, err := http.Post(srv.URL+"/healthz", "text/plain", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("POST /healthz = %d", resp.StatusCode)
			}
		})
	}
}
