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
// The Go runtime frees pages lazily, against the heap goal of the last
// busy moment, and a server that goes quiet after a burst collects
// rarely: its RSS would stay near the peak for minutes. When much more
// heap is idle than the server uses, this forces a collection and returns
// the idle pages, so RSS comes back near idle within a check or two.
func (s *Server) relieveMemory(ctx context.Context) {
	t := time.NewTicker(relieveEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if shouldRelease(ms.HeapIdle-ms.HeapReleased, ms.HeapInuse) {
			debug.FreeOSMemory()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			s.log.Debug("memory returned to the system", "idle_before_mb", (ms.HeapIdle-ms.HeapReleased)>>20,
				"in_use_mb", after.HeapInuse>>20, "released_mb", (after.HeapReleased-ms.HeapReleased)>>20)
		}
	}
}

// shouldRelease decides whether heap pages held but unused (idle) are
// worth a forced collection to return: at least 32 MiB of them, and more
// than the heap in use (so a busy server, whose idle pages are about to
// be used again, is left alone).
func shouldRelease(idle, inUse uint64) bool {
	return idle >= 32<<20 && idle > inUse
}
