package server

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// relieveEvery is how often the server looks at what it allocated. A
// look is a runtime/metrics read, which does not stop the world, so a
// second costs an idle server nothing it would notice.
const relieveEvery = time.Second

// What counts as load and as its end. A burst is at least burstBytes
// allocated since the last release; the load has ended when a burst is
// followed by quietTicks checks in a row each of which saw less than
// quietBytes allocated. An idle server with open connections allocates
// a few KiB a second (pings, timers); a streaming one MiBs.
const (
	burstBytes = 16 << 20
	quietBytes = 256 << 10
	quietTicks = 2
)

// relieveMemory gives memory back to the system once a burst of load
// has ended. The Go runtime collects when the heap grows and returns
// pages lazily against the heap goal of the last busy moment (with
// --gc-percent 200, three times the live heap), so a server that goes
// quiet after a burst would hold its garbage and its pages for minutes.
// Two seconds after the allocations stop, this forces one collection and
// returns every free page (debug.FreeOSMemory): RSS comes down to about
// the live heap, pools emptied. It runs once per burst and never while the server is
// busy, so it costs the streaming rate nothing.
func (s *Server) relieveMemory(ctx context.Context) {
	t := time.NewTicker(relieveEvery)
	defer t.Stop()
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(sample)
	r := newReleaser(sample[0].Value.Uint64())
	started := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(sample)
		if !r.tick(sample[0].Value.Uint64()) {
			continue
		}
		start := time.Now()
		if started {
			returnMemory()
		} else {
			// Start-up's garbage: no client has filled a pool yet, and
			// the second collection left an idle server 0.4 MB more
			// anonymous memory (3.3 MB against 2.9 MB).
			debug.FreeOSMemory()
			started = true
		}
		live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		metrics.Read(live)
		s.log.Debug("load ended: memory returned to the system", "live_heap_mb", live[0].Value.Uint64()>>20,
			"took", time.Since(start).Round(time.Microsecond))
		// What the collection itself allocated is not load.
		metrics.Read(sample)
		r.last = sample[0].Value.Uint64()
	}
}

// releaser decides when a burst of allocations has ended, from the
// runtime's running total of bytes allocated, read once per check.
type releaser struct {
	last  uint64 // the total at the previous check
	burst uint64 // allocated since the last release
	quiet int    // checks in a row that allocated less than quietBytes
}

// newReleaser starts from the total allocated so far. The start-up
// counts as a burst: what it allocated and dropped (flags, config,
// schemas, the first collections' leftovers) is returned as soon as the
// new server is quiet, so an idle server holds about its live heap.
func newReleaser(total uint64) releaser {
	return releaser{last: total, burst: burstBytes}
}

// tick takes the total allocated so far and reports whether to release
// now: a burst happened and has been quiet for quietTicks checks.
func (r *releaser) tick(total uint64) bool {
	d := total - r.last
	r.last = total
	r.burst += d
	if d >= quietBytes {
		r.quiet = 0
		return false
	}
	r.quiet++
	if r.burst < burstBytes || r.quiet < quietTicks {
		return false
	}
	r.burst, r.quiet = 0, 0
	return true
}

// returnMemory collects and returns every free page to the system.
// Two collections: the first moves what sync.Pools hold (queue arrays,
// WebSocket and SSE write buffers, writers' batch scratch: after a
// burst, up to one of each per client that wrote) to the pools' victim
// caches, the second, in FreeOSMemory, frees them; after one alone they
// would stay live, tens of MB after 1,000 streams.
func returnMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}
