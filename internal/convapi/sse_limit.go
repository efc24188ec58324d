package convapi

import (
	"strconv"
	"sync"

	"github.com/agentd-dev/agentd/internal/fault"
)

// streamCounts bounds the event streams one principal holds on this
// node: without it one JWT subject could open every connection the
// node takes (--max-connections) and leave none for anyone else. A
// stream is counted on the node that serves it (the conversation's
// owner or any other, sse_cluster.go) from before it opens until its
// handler returns. Principals without a subject (the shared token, a
// loopback server without one) are bounded by the node's connection
// limit alone, as on the per-session WebSocket: they reach every
// conversation anyway.
type streamCounts struct {
	max int

	mu sync.Mutex
	by map[string]int
}

// admit counts a stream of subject, or refuses it when subject holds
// its limit: a 429 with the body every limit of this face answers.
func (s *streamCounts) admit(subject string) error {
	if subject == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by[subject] >= s.max {
		return fault.New(fault.Limit, "Too many event streams for this user (at most "+strconv.Itoa(s.max)+"): close one first")
	}
	if s.by == nil {
		s.by = map[string]int{}
	}
	s.by[subject]++
	return nil
}

// leave releases a stream admit counted.
func (s *streamCounts) leave(subject string) {
	if subject == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by[subject]--; s.by[subject] <= 0 {
		delete(s.by, subject)
	}
}
