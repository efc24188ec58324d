package server

import "encoding/json"

// A face's notes: what a face on one cluster node tells its own
// handlers on the others, about state of its own the layer does not
// know (the REST face's attachments). They travel with the notices
// (cluster.go: at most once; a lost note costs what a lost notice does,
// a client kept informed a little less) and are dropped without a
// cluster.

// noteHandlers are the faces' OnNote handlers, by face.
type noteHandlers map[string][]func(json.RawMessage)

// OnNote registers fn to receive face's notes from the other nodes
// (Note). fn runs on the cluster connection's delivery goroutine: it
// must not block. Register before Start.
func (s *Server) OnNote(face string, fn func(note json.RawMessage)) {
	if s.onNote == nil {
		s.onNote = noteHandlers{}
	}
	s.onNote[face] = append(s.onNote[face], fn)
}

// Note sends note, which must be JSON, to face's handlers (OnNote) on
// every other node of the cluster; without a cluster it does nothing.
func (s *Server) Note(face string, note json.RawMessage) {
	if s.cl != nil && json.Valid(note) {
		s.cl.relay(notice{Face: face, Note: note})
	}
}

// noteHere passes another node's note to this node's handlers.
func (s *Server) noteHere(face string, note json.RawMessage) {
	for _, fn := range s.onNote[face] {
		fn(note)
	}
}
