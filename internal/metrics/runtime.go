package metrics

import (
	"runtime"
	"runtime/debug"
	rm "runtime/metrics"
	"time"
)

// runtimeGauge is a go_* family read from runtime/metrics: the sum of
// its sources. The names are the ones the Prometheus Go client gave
// agentd's /metrics before, so dashboards and `agentd bench` read on.
type runtimeGauge struct {
	name, help string
	typ        Type
	sources    []string
}

// runtimeGauges is constant data (laid out by the linker, not at init).
var runtimeGauges = []runtimeGauge{
	{"go_gc_gogc_percent", "The collector's GOGC percentage (/gc/gogc:percent).", TypeGauge, []string{"/gc/gogc:percent"}},
	{"go_gc_gomemlimit_bytes", "The runtime's memory limit, GOMEMLIMIT (/gc/gomemlimit:bytes).", TypeGauge, []string{"/gc/gomemlimit:bytes"}},
	{"go_gc_heap_live_bytes", "Heap bytes the last collection found live (/gc/heap/live:bytes).", TypeGauge, []string{"/gc/heap/live:bytes"}},
	{"go_memstats_alloc_bytes", "Heap bytes allocated and in use (/memory/classes/heap/objects:bytes).", TypeGauge, []string{"/memory/classes/heap/objects:bytes"}},
	{"go_memstats_alloc_bytes_total", "Heap bytes allocated since start (/gc/heap/allocs:bytes).", TypeCounter, []string{"/gc/heap/allocs:bytes"}},
	{"go_memstats_buck_hash_sys_bytes", "Bytes of the profiling bucket hash table (/memory/classes/profiling/buckets:bytes).", TypeGauge, []string{"/memory/classes/profiling/buckets:bytes"}},
	{"go_memstats_frees_total", "Heap objects freed since start (/gc/heap/frees:objects + /gc/heap/tiny/allocs:objects).", TypeCounter, []string{"/gc/heap/frees:objects", "/gc/heap/tiny/allocs:objects"}},
	{"go_memstats_gc_sys_bytes", "Bytes of collector metadata (/memory/classes/metadata/other:bytes).", TypeGauge, []string{"/memory/classes/metadata/other:bytes"}},
	{"go_memstats_heap_alloc_bytes", "Heap bytes allocated and in use, as go_memstats_alloc_bytes.", TypeGauge, []string{"/memory/classes/heap/objects:bytes"}},
	{"go_memstats_heap_idle_bytes", "Heap bytes not in use, released or free (/memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes).", TypeGauge, []string{"/memory/classes/heap/released:bytes", "/memory/classes/heap/free:bytes"}},
	{"go_memstats_heap_inuse_bytes", "Heap bytes in spans in use (/memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes).", TypeGauge, []string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes"}},
	{"go_memstats_heap_objects", "Heap objects allocated and not yet freed (/gc/heap/objects:objects).", TypeGauge, []string{"/gc/heap/objects:objects"}},
	{"go_memstats_heap_released_bytes", "Heap bytes given back to the OS (/memory/classes/heap/released:bytes).", TypeGauge, []string{"/memory/classes/heap/released:bytes"}},
	{"go_memstats_heap_sys_bytes", "Heap bytes obtained from the OS.", TypeGauge, []string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes", "/memory/classes/heap/released:bytes", "/memory/classes/heap/free:bytes"}},
	{"go_memstats_mallocs_total", "Heap objects allocated since start (/gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects).", TypeCounter, []string{"/gc/heap/allocs:objects", "/gc/heap/tiny/allocs:objects"}},
	{"go_memstats_mcache_inuse_bytes", "Bytes of mcache structures in use (/memory/classes/metadata/mcache/inuse:bytes).", TypeGauge, []string{"/memory/classes/metadata/mcache/inuse:bytes"}},
	{"go_memstats_mcache_sys_bytes", "Bytes of mcache structures obtained from the OS.", TypeGauge, []string{"/memory/classes/metadata/mcache/inuse:bytes", "/memory/classes/metadata/mcache/free:bytes"}},
	{"go_memstats_mspan_inuse_bytes", "Bytes of mspan structures in use (/memory/classes/metadata/mspan/inuse:bytes).", TypeGauge, []string{"/memory/classes/metadata/mspan/inuse:bytes"}},
	{"go_memstats_mspan_sys_bytes", "Bytes of mspan structures obtained from the OS.", TypeGauge, []string{"/memory/classes/metadata/mspan/inuse:bytes", "/memory/classes/metadata/mspan/free:bytes"}},
	{"go_memstats_next_gc_bytes", "Heap size at which the next collection starts (/gc/heap/goal:bytes).", TypeGauge, []string{"/gc/heap/goal:bytes"}},
	{"go_memstats_other_sys_bytes", "Bytes of other runtime allocations (/memory/classes/other:bytes).", TypeGauge, []string{"/memory/classes/other:bytes"}},
	{"go_memstats_stack_inuse_bytes", "Bytes of goroutine stacks in the heap (/memory/classes/heap/stacks:bytes).", TypeGauge, []string{"/memory/classes/heap/stacks:bytes"}},
	{"go_memstats_stack_sys_bytes", "Bytes of stacks obtained from the OS (/memory/classes/heap/stacks:bytes + /memory/classes/os-stacks:bytes).", TypeGauge, []string{"/memory/classes/heap/stacks:bytes", "/memory/classes/os-stacks:bytes"}},
	{"go_memstats_sys_bytes", "Bytes obtained from the OS (/memory/classes/total:bytes).", TypeGauge, []string{"/memory/classes/total:bytes"}},
	{"go_sched_gomaxprocs_threads", "GOMAXPROCS (/sched/gomaxprocs:threads).", TypeGauge, []string{"/sched/gomaxprocs:threads"}},
}

// The families the Go collector writes besides runtimeGauges.
const (
	goGCDuration = "go_gc_duration_seconds"
	goGoroutines = "go_goroutines"
	goInfo       = "go_info"
	goLastGC     = "go_memstats_last_gc_time_seconds"
	goThreads    = "go_threads"
)

// NewGoCollector writes the Go runtime's go_* families, read at each
// scrape (runtime/metrics, which does not stop the world, and the GC
// pause statistics).
func NewGoCollector() Collector { return goCollector{} }

type goCollector struct{}

func (goCollector) Names() []string {
	names := []string{goGCDuration, goGoroutines, goInfo, goLastGC, goThreads}
	for _, g := range runtimeGauges {
		names = append(names, g.name)
	}
	return names
}

func (goCollector) Collect(w *Writer) {
	var gc debug.GCStats
	gc.PauseQuantiles = make([]time.Duration, 5)
	debug.ReadGCStats(&gc)
	w.Family(goGCDuration, "Stop-the-world pause of garbage collections, in seconds.", TypeSummary)
	for i, q := range []string{"0", "0.25", "0.5", "0.75", "1"} {
		w.Sample(goGCDuration, gc.PauseQuantiles[i].Seconds(), "quantile", q)
	}
	w.sample(goGCDuration, "_sum", nil, "", "", gc.PauseTotal.Seconds())
	w.sample(goGCDuration, "_count", nil, "", "", float64(gc.NumGC))

	w.Family(goGoroutines, "Goroutines that exist.", TypeGauge)
	w.Sample(goGoroutines, float64(runtime.NumGoroutine()))
	w.Family(goInfo, "The Go version agentd was built with.", TypeGauge)
	w.Sample(goInfo, 1, "version", runtime.Version())
	w.Family(goLastGC, "When the last garbage collection ended, in seconds since 1970.", TypeGauge)
	last := 0.0
	if !gc.LastGC.IsZero() {
		last = float64(gc.LastGC.UnixNano()) / 1e9
	}
	w.Sample(goLastGC, last)
	w.Family(goThreads, "OS threads the runtime created.", TypeGauge)
	threads, _ := runtime.ThreadCreateProfile(nil)
	w.Sample(goThreads, float64(threads))

	var samples []rm.Sample
	index := map[string]int{}
	for _, g := range runtimeGauges {
		for _, s := range g.sources {
			if _, ok := index[s]; !ok {
				index[s] = len(samples)
				samples = append(samples, rm.Sample{Name: s})
			}
		}
	}
	rm.Read(samples)
	for _, g := range runtimeGauges {
		w.Family(g.name, g.help, g.typ)
		sum, ok := 0.0, true
		for _, s := range g.sources {
			switch v := samples[index[s]].Value; v.Kind() {
			case rm.KindUint64:
				sum += float64(v.Uint64())
			case rm.KindFloat64:
				sum += v.Float64()
			default: // not in this Go version
				ok = false
			}
		}
		if ok {
			w.Sample(g.name, sum)
		}
	}
}
