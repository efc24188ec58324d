// Package metrics is agentd's /metrics: counters, gauges and histograms,
// with or without labels, kept in atomics, and a registry that writes them
// in the Prometheus text exposition format 0.0.4 when scraped.
//
// It replaces the Prometheus Go client, whose package initialisation
// (its own, procfs's, which reads /proc, and the protobuf model's) cost
// agentd about 210 KB in 1,500 allocations at every start, `agentd
// version` included. Nothing
// here runs or allocates at init: a [Registry] is a value its server
// makes and owns, and the Go runtime's and the process's figures
// ([NewGoCollector], [NewProcessCollector]) are read at each scrape.
package metrics

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Type is a metric family's TYPE in the exposition format.
type Type string

// The family types agentd writes.
const (
	TypeCounter   Type = "counter"
	TypeGauge     Type = "gauge"
	TypeHistogram Type = "histogram"
	TypeSummary   Type = "summary"
)

// ContentType is what /metrics answers with: the text format 0.0.4,
// which every Prometheus version and compatible scraper reads.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// A Collector writes metric families at each scrape.
type Collector interface {
	// Names are the families Collect writes; a registry refuses a
	// collector that would write a family another one already writes.
	Names() []string
	// Collect writes the families, each with its HELP and TYPE before
	// its samples. It may run concurrently with itself.
	Collect(w *Writer)
}

// Registry is the set of collectors one /metrics serves. Its zero value
// is ready to use; it is safe for concurrent use.
type Registry struct {
	mu    sync.Mutex
	cs    []Collector
	names map[string]bool
	// last is the size of the last scrape's output, to size the next.
	last atomic.Int64
}

// NewRegistry makes an empty registry.
func NewRegistry() *Registry { return &Registry{} }

// Register adds collectors, none of them when one has an invalid family
// name or one another collector already writes.
func (r *Registry) Register(cs ...Collector) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, c := range cs {
		for _, n := range c.Names() {
			if !validName(n, true) {
				return fmt.Errorf("metrics: invalid metric name %q", n)
			}
			if r.names[n] || seen[n] {
				return fmt.Errorf("metrics: %s is already registered", n)
			}
			seen[n] = true
		}
	}
	if r.names == nil {
		r.names = map[string]bool{}
	}
	for n := range seen {
		r.names[n] = true
	}
	r.cs = append(r.cs, cs...)
	return nil
}

// MustRegister is Register for collectors whose names are constants: an
// error is a programming error.
func (r *Registry) MustRegister(cs ...Collector) {
	if err := r.Register(cs...); err != nil {
		panic(err)
	}
}

// Append appends the exposition of every registered family to b, in the
// order the collectors were registered.
func (r *Registry) Append(b []byte) []byte {
	r.mu.Lock()
	cs := slices.Clone(r.cs)
	r.mu.Unlock()
	w := &Writer{b: b}
	for _, c := range cs {
		c.Collect(w)
	}
	return w.b
}

// WriteTo writes the exposition to w.
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(r.scrape())
	return int64(n), err
}

// scrape is the exposition, in a buffer sized by the last one.
func (r *Registry) scrape() []byte {
	b := r.Append(make([]byte, 0, r.last.Load()+512))
	r.last.Store(int64(len(b)))
	return b
}

// ServeHTTP answers a scrape.
func (r *Registry) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	b := r.scrape()
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// Writer appends families in the text format. Collectors get one from
// the registry.
type Writer struct{ b []byte }

// Family starts a family: its HELP and TYPE lines.
func (w *Writer) Family(name, help string, t Type) {
	w.b = append(w.b, "# HELP "...)
	w.b = append(w.b, name...)
	w.b = append(w.b, ' ')
	for i := 0; i < len(help); i++ {
		switch c := help[i]; c {
		case '\\':
			w.b = append(w.b, `\\`...)
		case '\n':
			w.b = append(w.b, `\n`...)
		default:
			w.b = append(w.b, c)
		}
	}
	w.b = append(w.b, "\n# TYPE "...)
	w.b = append(w.b, name...)
	w.b = append(w.b, ' ')
	w.b = append(w.b, t...)
	w.b = append(w.b, '\n')
}

// Sample writes one sample of the current family. labels are name,
// value pairs, written in the order given.
func (w *Writer) Sample(name string, v float64, labels ...string) {
	w.sample(name, "", labels, "", "", v)
}

// sample writes name+suffix{labels, extra="extraValue"} v; labels are
// pairs.
func (w *Writer) sample(name, suffix string, labels []string, extra, extraValue string, v float64) {
	w.b = append(w.b, name...)
	w.b = append(w.b, suffix...)
	if len(labels) > 0 || extra != "" {
		w.b = append(w.b, '{')
		for i := 0; i+1 < len(labels); i += 2 {
			w.label(i > 0, labels[i], labels[i+1])
		}
		if extra != "" {
			w.label(len(labels) > 0, extra, extraValue)
		}
		w.b = append(w.b, '}')
	}
	w.b = append(w.b, ' ')
	w.b = appendFloat(w.b, v)
	w.b = append(w.b, '\n')
}

func (w *Writer) label(comma bool, name, value string) {
	if comma {
		w.b = append(w.b, ',')
	}
	w.b = append(w.b, name...)
	w.b = append(w.b, `="`...)
	for i := 0; i < len(value); i++ {
		switch c := value[i]; c {
		case '\\':
			w.b = append(w.b, `\\`...)
		case '"':
			w.b = append(w.b, `\"`...)
		case '\n':
			w.b = append(w.b, `\n`...)
		default:
			w.b = append(w.b, c)
		}
	}
	w.b = append(w.b, '"')
}

// appendFloat writes v as Go's shortest 'g' form, which is what the
// format's parsers read: 1, 0.005, 1.234e+06, +Inf, -Inf, NaN.
func appendFloat(b []byte, v float64) []byte {
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

// validName reports whether s is a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)
// or, without colons, a label name.
func validName(s string, colon bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || colon && c == ':' || i > 0 && c >= '0' && c <= '9'
		if !ok {
			return false
		}
	}
	return true
}

// Counter is a count that only goes up.
type Counter struct{ n atomic.Uint64 }

// Inc adds one.
func (c *Counter) Inc() { c.n.Add(1) }

// Add adds n.
func (c *Counter) Add(n uint64) { c.n.Add(n) }

// Value is the count.
func (c *Counter) Value() uint64 { return c.n.Load() }

// Gauge is a value that goes up and down.
type Gauge struct{ bits atomic.Uint64 }

// Set sets the value.
func (g *Gauge) Set(v float64) { g.bits.Store(math.Float64bits(v)) }

// Add adds d, which may be negative.
func (g *Gauge) Add(d float64) { addFloat(&g.bits, d) }

// Inc adds one.
func (g *Gauge) Inc() { g.Add(1) }

// Dec subtracts one.
func (g *Gauge) Dec() { g.Add(-1) }

// Value is the value.
func (g *Gauge) Value() float64 { return math.Float64frombits(g.bits.Load()) }

func addFloat(bits *atomic.Uint64, d float64) {
	for {
		old := bits.Load()
		if bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

// Histogram counts observations in buckets by upper bound.
type Histogram struct {
	upper []float64       // ascending bounds, shared with the vector's other histograms
	count []atomic.Uint64 // per bucket, not cumulative; the last is above every bound
	sum   atomic.Uint64
}

func newHistogram(upper []float64) *Histogram {
	return &Histogram{upper: upper, count: make([]atomic.Uint64, len(upper)+1)}
}

// Observe records v: in the first bucket whose bound is at least v.
func (h *Histogram) Observe(v float64) {
	h.count[sort.SearchFloat64s(h.upper, v)].Add(1)
	addFloat(&h.sum, v)
}

// write writes the histogram's _bucket, _sum and _count samples. _count
// is the +Inf bucket's count, read once, so the two always agree.
func (h *Histogram) write(w *Writer, name string, labels []string) {
	var total uint64
	var le [24]byte
	for i, bound := range h.upper {
		total += h.count[i].Load()
		w.sample(name, "_bucket", labels, "le", string(appendFloat(le[:0], bound)), float64(total))
	}
	total += h.count[len(h.upper)].Load()
	w.sample(name, "_bucket", labels, "le", "+Inf", float64(total))
	w.sample(name, "_sum", labels, "", "", math.Float64frombits(h.sum.Load()))
	w.sample(name, "_count", labels, "", "", float64(total))
}

// desc is a family's name, help and label names.
type desc struct {
	name, help string
	labels     []string
}

func newDesc(name, help string, labels []string) desc {
	for _, l := range labels {
		if !validName(l, false) || strings.HasPrefix(l, "__") || l == "le" || l == "quantile" {
			panic(fmt.Sprintf("metrics: %s: invalid label name %q", name, l))
		}
	}
	return desc{name, help, slices.Clone(labels)}
}

func (d *desc) Names() []string { return []string{d.name} }

// pairs interleaves the label names with values.
func (d *desc) pairs(values []string) []string {
	p := make([]string, 0, 2*len(values))
	for i, v := range values {
		p = append(p, d.labels[i], v)
	}
	return p
}

// vec is a family's children by label values.
type vec[T any] struct {
	desc
	make func() *T
	mu   sync.RWMutex
	m    map[string]*child[T]
}

type child[T any] struct {
	values []string
	m      *T
}

// with finds or makes the child of values, without allocating when it
// exists. It panics on a wrong number of values, a programming error.
func (v *vec[T]) with(values []string) *T {
	if len(values) != len(v.labels) {
		panic(fmt.Sprintf("metrics: %s takes %d label values, got %d", v.name, len(v.labels), len(values)))
	}
	var buf [128]byte
	key := buf[:0]
	for i, s := range values {
		if i > 0 {
			key = append(key, 0xff) // in no UTF-8 label value
		}
		key = append(key, s...)
	}
	v.mu.RLock()
	c := v.m[string(key)]
	v.mu.RUnlock()
	if c != nil {
		return c.m
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if c = v.m[string(key)]; c == nil {
		if v.m == nil {
			v.m = map[string]*child[T]{}
		}
		c = &child[T]{values: slices.Clone(values), m: v.make()}
		v.m[string(key)] = c
	}
	return c.m
}

// each calls f for every child, by label values in order.
func (v *vec[T]) each(f func(labels []string, m *T)) {
	v.mu.RLock()
	keys := make([]string, 0, len(v.m))
	for k := range v.m {
		keys = append(keys, k)
	}
	cs := make([]*child[T], 0, len(keys))
	slices.Sort(keys)
	for _, k := range keys {
		cs = append(cs, v.m[k])
	}
	v.mu.RUnlock()
	for _, c := range cs {
		f(v.pairs(c.values), c.m)
	}
}

// CounterVec is a counter family with labels.
type CounterVec struct{ v vec[Counter] }

// NewCounterVec makes a counter family whose samples carry the labels,
// written in the order given.
func NewCounterVec(name, help string, labels ...string) *CounterVec {
	return &CounterVec{vec[Counter]{desc: newDesc(name, help, labels), make: func() *Counter { return new(Counter) }}}
}

// With is the counter of the label values, given in the labels' order.
func (c *CounterVec) With(values ...string) *Counter { return c.v.with(values) }

// Names implements [Collector].
func (c *CounterVec) Names() []string { return c.v.Names() }

// Collect implements [Collector].
func (c *CounterVec) Collect(w *Writer) {
	w.Family(c.v.name, c.v.help, TypeCounter)
	c.v.each(func(labels []string, m *Counter) { w.Sample(c.v.name, float64(m.Value()), labels...) })
}

// GaugeVec is a gauge family with labels.
type GaugeVec struct{ v vec[Gauge] }

// NewGaugeVec makes a gauge family whose samples carry the labels.
func NewGaugeVec(name, help string, labels ...string) *GaugeVec {
	return &GaugeVec{vec[Gauge]{desc: newDesc(name, help, labels), make: func() *Gauge { return new(Gauge) }}}
}

// With is the gauge of the label values, given in the labels' order.
func (g *GaugeVec) With(values ...string) *Gauge { return g.v.with(values) }

// Names implements [Collector].
func (g *GaugeVec) Names() []string { return g.v.Names() }

// Collect implements [Collector].
func (g *GaugeVec) Collect(w *Writer) {
	w.Family(g.v.name, g.v.help, TypeGauge)
	g.v.each(func(labels []string, m *Gauge) { w.Sample(g.v.name, m.Value(), labels...) })
}

// HistogramVec is a histogram family with labels.
type HistogramVec struct{ v vec[Histogram] }

// NewHistogramVec makes a histogram family with the bucket bounds
// (ascending, without +Inf, which every histogram has).
func NewHistogramVec(name, help string, buckets []float64, labels ...string) *HistogramVec {
	upper := slices.Clone(buckets)
	if !slices.IsSorted(upper) || slices.Contains(upper, math.Inf(1)) {
		panic(fmt.Sprintf("metrics: %s: buckets must ascend and leave out +Inf", name))
	}
	return &HistogramVec{vec[Histogram]{desc: newDesc(name, help, labels), make: func() *Histogram { return newHistogram(upper) }}}
}

// With is the histogram of the label values, given in the labels' order.
func (h *HistogramVec) With(values ...string) *Histogram { return h.v.with(values) }

// Names implements [Collector].
func (h *HistogramVec) Names() []string { return h.v.Names() }

// Collect implements [Collector].
func (h *HistogramVec) Collect(w *Writer) {
	w.Family(h.v.name, h.v.help, TypeHistogram)
	h.v.each(func(labels []string, m *Histogram) { m.write(w, h.v.name, labels) })
}

// NewGauge makes a gauge family without labels and its one gauge.
func NewGauge(name, help string) (*Gauge, Collector) {
	g := new(Gauge)
	return g, &funcCollector{desc{name, help, nil}, TypeGauge, g.Value}
}

// NewGaugeFunc makes a gauge family without labels whose value f gives
// at each scrape.
func NewGaugeFunc(name, help string, f func() float64) Collector {
	return &funcCollector{desc{name, help, nil}, TypeGauge, f}
}

// NewCounterFunc makes a counter family without labels whose value f
// gives at each scrape; f never goes down.
func NewCounterFunc(name, help string, f func() float64) Collector {
	return &funcCollector{desc{name, help, nil}, TypeCounter, f}
}

type funcCollector struct {
	desc
	typ Type
	f   func() float64
}

func (c *funcCollector) Collect(w *Writer) {
	w.Family(c.name, c.help, c.typ)
	w.Sample(c.name, c.f())
}

// Scrape is a registry's exposition as text, for tests and logs.
func Scrape(r *Registry) string {
	var b strings.Builder
	_, _ = r.WriteTo(&b)
	return b.String()
}
