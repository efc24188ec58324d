package server

import "sync"

// SubjectCounts bounds what one principal holds open on this node at
// once (the per-session WebSocket's connections, REST's event streams):
// without a bound one JWT subject could take every connection the node
// takes (--max-connections) and leave none for anyone else. Principals
// without a subject (the shared token, a loopback server without one)
// are bounded by the node's connection limit alone: they reach every
// session anyway. The zero value with Max set is ready to use.
type SubjectCounts struct {
	// Max is how many one subject may hold.
	Max int

	mu sync.Mutex // a leaf: guards by
	by map[string]int
}

// Admit counts one more for subject, or reports false when it holds Max
// already.
func (s *SubjectCounts) Admit(subject string) bool {
	if subject == "" {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by[subject] >= s.Max {
		return false
	}
	if s.by == nil {
		s.by = map[string]int{}
	}
	s.by[subject]++
	return true
}

// Leave releases one that Admit counted.
func (s *SubjectCounts) Leave(subject string) {
	if subject == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by[subject]--; s.by[subject] <= 0 {
		delete(s.by, subject)
	}
}

// Held is how many subject holds now.
func (s *SubjectCounts) Held(subject string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.by[subject]
}
