package server

import "github.com/agentd-dev/agentd/internal/session"

// How far back a cursor is replayed from the cluster's event stream.
//
// A session's own log keeps its last EventLogSize events; a client whose
// cursor is older is told to reload (TooOld). The cluster's stream keeps
// every event for as long as the operator says (by default for ever), so
// a resume served from it (a client of another node, or one of this node
// whose cursor is from before this node took the session over) read the
// session's whole history from its cursor on, 0 included, into memory,
// once per request. It reaches no further back than the log would, plus
// the jump of one takeover (at most the log's size, nextSeq): cursors
// resumed across a change of owner still resume, and one request costs
// at most that many events.

// tooFarBack reports whether cursor after is further back from seq cur
// than a replay from the stream reaches.
func (s *Server) tooFarBack(cur, after uint64) bool {
	n := s.cfg.EventLogSize
	if n <= 0 {
		n = session.DefaultEventLogSize
	}
	return after < cur && cur-after > 2*uint64(n)
}
