package metrics

import (
	"flag"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	rm "runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the output")

// sample is a registry with every kind of family agentd writes, filled
// with values that exercise the format: label values to escape, a help
// text with a backslash and a newline, bucket bounds at and between
// observations, a gauge gone negative, and a family with no sample yet.
func sampleRegistry(t *testing.T) *Registry {
	t.Helper()
	r := NewRegistry()
	commands := NewCounterVec("agentd_commands_total", "Protocol commands handled, by command type and outcome.", "command", "outcome")
	duration := NewHistogramVec("agentd_command_duration_seconds", "Time from receiving a command to its response.", []float64{.001, .01, .1, 1, 600}, "command")
	conns := NewGaugeVec("agentd_connections", "Open client connections, by transport.", "transport")
	sessions, sessionsFamily := NewGauge("agentd_sessions", "Sessions loaded in memory.")
	empty := NewCounterVec("agentd_empty_total", "A family with no sample: a\\b\nnext line.", "x")
	if err := r.Register(commands, duration, conns, sessionsFamily, empty,
		NewGaugeFunc("agentd_cluster_connected", "1 while connected.", func() float64 { return 1 }),
		NewCounterFunc("agentd_cluster_takeovers_total", "Takeovers.", func() float64 { return 3 })); err != nil {
		t.Fatal(err)
	}
	commands.With("prompt", "success").Add(2)
	commands.With("prompt", "error").Inc()
	commands.With(`quote " back \ new`+"\n"+`line`, "success").Inc()
	commands.With("abort", "success").Add(1e6)
	for _, v := range []float64{0.0005, 0.001, 0.002, 0.5, 0.5, 700} {
		duration.With("prompt").Observe(v)
	}
	duration.With("abort").Observe(0.01)
	conns.With("websocket").Inc()
	conns.With("websocket").Inc()
	conns.With("sse").Dec()
	sessions.Set(3)
	sessions.Dec()
	return r
}

// The exposition of every kind of family, byte for byte
// (go test -run TestGolden -update rewrites it).
func TestGolden(t *testing.T) {
	got := Scrape(sampleRegistry(t))
	path := filepath.Join("testdata", "exposition.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("exposition differs from %s (-update rewrites it):\n%s", path, got)
	}
	if errs := checkExposition(got); len(errs) > 0 {
		t.Errorf("golden output breaks the format: %v", errs)
	}
}

// fullRegistry is what agentd serves: its families with the Go
// runtime's and the process's.
func fullRegistry(t *testing.T) *Registry {
	r := sampleRegistry(t)
	if err := r.Register(NewGoCollector(), NewProcessCollector()); err != nil {
		t.Fatal(err)
	}
	return r
}

// The Go and process families parse, and carry a sample each where the
// runtime and /proc have one.
func TestRuntimeAndProcess(t *testing.T) {
	out := Scrape(fullRegistry(t))
	if errs := checkExposition(out); len(errs) > 0 {
		t.Fatalf("output breaks the format: %v\n%s", errs, out)
	}
	names := slices.Concat(NewGoCollector().Names(), NewProcessCollector().Names())
	_, procErr := os.Stat("/proc/self/stat")
	for _, n := range names {
		if !strings.Contains(out, "# TYPE "+n+" ") {
			t.Errorf("no TYPE for %s", n)
		}
		if strings.HasPrefix(n, "process_") && procErr != nil {
			continue
		}
		if !strings.Contains(out, "\n"+n+" ") && !strings.Contains(out, "\n"+n+"{") && !strings.Contains(out, "\n"+n+"_count ") {
			t.Errorf("no sample of %s", n)
		}
	}
	// Every runtime/metrics source exists in this Go version.
	known := map[string]bool{}
	for _, d := range rm.All() {
		known[d.Name] = true
	}
	for _, g := range runtimeGauges {
		for _, s := range g.sources {
			if !known[s] {
				t.Errorf("%s: runtime/metrics has no %s", g.name, s)
			}
		}
	}
	for _, want := range []string{"go_gc_gogc_percent ", "go_goroutines ", "go_gc_heap_live_bytes ", `go_info{version="go`} {
		if !strings.Contains(out, "\n"+want) {
			t.Errorf("missing %q", want)
		}
	}
}

// /proc figures are this process's own.
func TestProcessFigures(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc:", err)
	}
	s, err := readStat()
	if err != nil {
		t.Fatal(err)
	}
	if s.rss == 0 || s.vsize == 0 || s.starttime == 0 {
		t.Errorf("stat = %+v", s)
	}
	fds, vm, err := readLimits()
	if err != nil || fds < 3 || vm == 0 {
		t.Errorf("limits = %v %v %v", fds, vm, err)
	}
	before, err := openFDs()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := openFDs()
	f.Close()
	if after != before+1 {
		t.Errorf("open fds %d, then %d after opening one", before, after)
	}
	if _, _, err := readNetDev(); err != nil {
		t.Errorf("net/dev: %v", err)
	}
	if _, err := bootTime(); err != nil {
		t.Errorf("btime: %v", err)
	}
}

// A family name goes on one registry once; invalid names are refused.
func TestRegister(t *testing.T) {
	tests := []struct {
		name  string
		first []Collector
		next  []Collector
	}{
		{"same name twice", []Collector{NewGaugeFunc("a", "", nil)}, []Collector{NewCounterFunc("a", "", nil)}},
		{"twice in one call", nil, []Collector{NewGaugeFunc("a", "", nil), NewCounterVec("a", "")}},
		{"go collector twice", []Collector{NewGoCollector()}, []Collector{NewGoCollector()}},
		{"a runtime name", []Collector{NewProcessCollector()}, []Collector{NewGaugeFunc("process_open_fds", "", nil)}},
		{"invalid name", nil, []Collector{NewGaugeFunc("agentd-x", "", nil)}},
		{"empty name", nil, []Collector{NewGaugeFunc("", "", nil)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRegistry()
			if err := r.Register(tc.first...); err != nil {
				t.Fatal(err)
			}
			if err := r.Register(tc.next...); err == nil {
				t.Fatal("registered")
			}
			// A refused call registers none of its collectors.
			if err := r.Register(NewGaugeFunc("b", "", func() float64 { return 0 })); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, labels := range [][]string{{"le"}, {"quantile"}, {"__x"}, {"a-b"}, {""}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("label %q accepted", labels)
				}
			}()
			NewGaugeVec("g", "", labels...)
		}()
	}
}

// Counting a labelled sample that exists allocates nothing: the stream
// path counts every event.
func TestWithAllocatesNothing(t *testing.T) {
	c := NewCounterVec("c", "", "a", "b")
	h := NewHistogramVec("h", "", []float64{1, 2}, "a")
	c.With("x", "y").Inc()
	h.With("x").Observe(1)
	if n := testing.AllocsPerRun(100, func() {
		c.With("x", "y").Inc()
		h.With("x").Observe(1.5)
	}); n != 0 {
		t.Errorf("%v allocations per count", n)
	}
}

// Counts from many goroutines add up while scrapes run (go test -race
// finds unsynchronised access).
func TestConcurrent(t *testing.T) {
	r := fullRegistry(t)
	c := NewCounterVec("c_total", "", "k")
	g := NewGaugeVec("g", "", "k")
	h := NewHistogramVec("h", "", []float64{1, 10}, "k")
	r.MustRegister(c, g, h)
	const workers, each = 8, 500
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			k := string(rune('a' + i%3))
			for range each {
				c.With(k).Inc()
				g.With(k).Inc()
				g.With(k).Dec()
				h.With(k).Observe(5)
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if errs := checkExposition(Scrape(r)); len(errs) > 0 {
				t.Errorf("scrape during counting: %v", errs)
				return
			}
		}
	})
	wg.Wait()
	var total uint64
	for _, k := range []string{"a", "b", "c"} {
		total += c.With(k).Value()
		if v := g.With(k).Value(); v != 0 {
			t.Errorf("gauge %s = %v", k, v)
		}
	}
	if total != workers*each {
		t.Errorf("counted %d, want %d", total, workers*each)
	}
	out := Scrape(r)
	if !strings.Contains(out, `h_sum{k="a"} `) || !strings.Contains(out, `h_count{k="a"} `) {
		t.Errorf("histogram missing:\n%s", out)
	}
	var sum float64
	for _, k := range []string{"a", "b", "c"} {
		sum += math.Float64frombits(h.With(k).sum.Load())
	}
	if sum != 5*workers*each {
		t.Errorf("histogram sum %v, want %v", sum, 5*workers*each)
	}
}

// /metrics answers the text format's content type.
func TestServeHTTP(t *testing.T) {
	srv := httptest.NewServer(fullRegistry(t))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/plain; version=0.0.4; charset=utf-8" {
		t.Fatalf("%d %q", resp.StatusCode, ct)
	}
	if errs := checkExposition(string(body)); len(errs) > 0 {
		t.Fatalf("%v", errs)
	}
}

// Prometheus's own linter accepts the output, where promtool is
// installed (Debian: apt-get install prometheus).
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not on PATH (Debian's prometheus package has it); the grammar rules of TestGrammarRules still apply")
	}
	for name, r := range map[string]*Registry{"sample": sampleRegistry(t), "full": fullRegistry(t)} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(promtool, "check", "metrics")
			cmd.Stdin = strings.NewReader(Scrape(r))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("promtool check metrics: %v\n%s", err, out)
			}
		})
	}
}
