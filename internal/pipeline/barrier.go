package pipeline

// Laned reports whether cmd, submitted now, would wait in a lane for the
// commands before it (rather than run at once, as control commands and
// those their handler's Bypass lets past do). A command the pipeline
// would refuse is not laned.
func (p *Pipeline) Laned(cmd Command) bool {
	h, err := p.validate(cmd)
	if err != nil {
		return false
	}
	return h.Class != ClassControl && (h.Bypass == nil || !h.Bypass(cmd))
}

// Barrier runs fn in session sessionID's lane: after every command
// submitted to that lane before it has finished, before any submitted
// after it starts. It is no command: no lifecycle event, no journal
// record, no answer. A cluster node handing a session over orders its
// unload there, so that no command it accepted starts on a session it
// is about to give up. fn runs on the lane's goroutine; it reports false
// (and fn never runs) once the pipeline is shutting down.
func (p *Pipeline) Barrier(sessionID string, fn func()) bool {
	f := &flight{barrier: fn, lane: "session:" + sessionID, done: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return false
	}
	p.flights.Add(1)
	p.inFlight++
	l := p.lanes[f.lane]
	if l == nil {
		l = &lane{name: f.lane}
		p.lanes[f.lane] = l
	}
	l.queue = append(l.queue, f)
	if !l.running {
		l.running = true
		p.wg.Add(1)
		go p.runLane(l)
	}
	return true
}

// passBarrier runs barrier f on its lane's goroutine.
func (p *Pipeline) passBarrier(f *flight) {
	defer func() {
		p.mu.Lock()
		p.inFlight--
		p.mu.Unlock()
		close(f.done)
		p.flights.Done()
	}()
	f.barrier()
}
