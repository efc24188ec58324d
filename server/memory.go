package server

import (
	"context"
	"runtime"
	"runtime/debug"
	"time"
)

// relieveEvery is how often the server checks for memory to give back.
const relieveEvery = 15 * time.Second

// relieveMemory gives memory back to the system after a burst of load.
// The Go runtime collects when the heap grows and frees pages lazily
// against the heap goal of the last busy moment, so a server that goes
// quiet after a burst holds its garbage and its pages for minutes. When
// the runtime has not collected since the last check (the server is
// quiet) and holds much more than a small heap, this forces a collection
// and returns what is free; a quiet server's collection is cheap.
func (s *Server) relieveMemory(ctx context.Context) {
	t := time.NewTicker(relieveEvery)
	defer t.Stop()
	var lastGC uint32
	var floor uint64 // heap held right after the last release
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		held := ms.HeapInuse + ms.HeapIdle - ms.HeapReleased
		if shouldRelease(ms.NumGC == lastGC, held, floor, ms.HeapIdle-ms.HeapReleased, ms.HeapInuse) {
			debug.FreeOSMemory()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			s.log.Debug("memory returned to the system", "held_before_mb", held>>20,
				"in_use_mb", after.HeapInuse>>20, "released_mb", (after.HeapReleased-ms.HeapReleased)>>20)
			ms = after
			floor = after.HeapInuse + after.HeapIdle - after.HeapReleased
		}
		lastGC = ms.NumGC
	}
}

// shouldRelease decides whether to force a collection and return memory:
// when the server is quiet (no collection since the last check) and holds
// 16 MiB more heap than right after the last release, or when idle pages
// (held, unused) are at least 32 MiB and more than the heap in use. A busy
// server, whose idle pages are about to be used again, is left to the
// runtime.
func shouldRelease(quiet bool, held, floor, idle, inUse uint64) bool {
	return (quiet && held >= floor+16<<20) || (idle >= 32<<20 && idle > inUse)
}
