package server

import "sync"

// writeScratch is what a client's writer needs for one batch: the frames
// taken from the queue and their bytes.
type writeScratch struct {
	taken []queued
	batch [][]byte
}

// scratchPool lends writers their batch scratch for the time of a batch.
// A writer that kept its own would hold it, at the size of its largest
// batch (up to maxBatchFrames frames, ~50 KB), for as long as its
// connection stays open, busy or not; pooled, a streaming server reuses
// a few per processor and an idle one holds none once the collector has
// emptied the pool (relieveMemory).
type scratchPool struct{ pool sync.Pool }

func (p *scratchPool) get() *writeScratch {
	if sc, ok := p.pool.Get().(*writeScratch); ok {
		return sc
	}
	return &writeScratch{}
}

// put takes back sc, its slots cleared by the writer.
func (p *scratchPool) put(sc *writeScratch) { p.pool.Put(sc) }
