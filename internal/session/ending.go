package session

// runEnd is what a prompt sent after a run's agent_end waits for. pi
// clients (and its own rpc tests) send the next prompt once they read
// agent_end; in pi the run is over by then. Here the run's goroutine
// still winds down after agent_end (the retry and compaction checks,
// the checkpoint, the state going idle), so such a prompt could find the
// run slot taken and fail with ErrBusy under load. A prompt that comes
// while the run has emitted agent_end and started nothing since waits
// for the slot instead; one that comes during a retry or a compaction
// that follows agent_end is refused as before.
type runEnd struct {
	ended bool          // the run emitted agent_end and nothing started since (s.mu)
	wake  chan struct{} // closed when ended turns false or the run is over (s.mu)
}

// setRunEnded records that the run in progress emitted agent_end (true)
// or went on with a retry or compaction (false); false wakes the
// prompts waiting for its end, which then see the run still busy.
func (s *Session) setRunEnded(ended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runDone == nil {
		return
	}
	if ended {
		s.runEnd.ended = true
		return
	}
	s.wakeRunEndLocked()
}

// wakeRunEndLocked clears the mark and wakes the waiters; s.mu is held.
func (s *Session) wakeRunEndLocked() {
	s.runEnd.ended = false
	if s.runEnd.wake != nil {
		close(s.runEnd.wake)
		s.runEnd.wake = nil
	}
}

// runEndingLocked returns a channel to wait on when the run in progress
// is only winding down after its agent_end; s.mu is held.
func (s *Session) runEndingLocked() (<-chan struct{}, bool) {
	if s.runDone == nil || !s.runEnd.ended {
		return nil, false
	}
	if s.runEnd.wake == nil {
		s.runEnd.wake = make(chan struct{})
	}
	return s.runEnd.wake, true
}

// awaitRunTail waits while the run in progress is only winding down
// after its agent_end (its end-of-run checkpoint, retry and compaction
// checks): a client that saw agent_end may start the next thing at once,
// as with pi. s.mu must not be held. If the run goes on instead (a retry,
// a compaction), it returns and the caller finds the session busy.
func (s *Session) awaitRunTail() {
	s.mu.Lock()
	wake, ending := s.runEndingLocked()
	s.mu.Unlock()
	if ending {
		<-wake
	}
}
