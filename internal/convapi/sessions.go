package convapi

import (
	"net/http"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/server"
)

func (s *Server) sessions(w http.ResponseWriter, r *http.Request, _ params) error {
	loaded := map[string]*server.Hosted{}
	for _, h := range s.srv.Sessions() {
		loaded[h.ID()] = h
	}
	out := []SessionInfo{}
	for _, a := range s.att.list() {
		if !s.sees(r.Context(), a.conv) {
			continue
		}
		info := SessionInfo{ID: a.id, ConversationID: a.conv, CreatedAt: a.created.UTC().Format(time.RFC3339Nano),
			LastActivity: a.last.UTC().Format(time.RFC3339Nano), Streams: a.streams}
		if h := loaded[a.conv]; h != nil {
			sess := h.Session()
			name := modelName(sess.Model())
			info.Model, info.MessageCount, info.Generating = &name, len(sess.Messages()), sess.Running()
		}
		out = append(out, info)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) serverHealth(w http.ResponseWriter, r *http.Request, _ params) error {
	running := map[string]bool{}
	for _, h := range s.srv.Sessions() {
		running[h.ID()] = h.Session().Running()
	}
	out := ServerHealth{Slots: []HealthSlot{}, Health: "green"}
	for _, a := range s.att.list() {
		if !s.sees(r.Context(), a.conv) {
			continue
		}
		gen := running[a.conv]
		out.SessionCount++
		if gen {
			out.GeneratingCount++
		}
		out.Slots = append(out.Slots, HealthSlot{ID: a.id[:min(8, len(a.id))], Generating: gen})
	}
	out.IdleCount = out.SessionCount - out.GeneratingCount
	switch {
	case out.GeneratingCount == 0:
	case out.GeneratingCount < out.SessionCount:
		out.Health = "yellow"
	default:
		out.Health = "red"
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request, p params) error {
	at, ok := s.att.get(p.sid)
	if ok && !s.sees(r.Context(), at.conv) {
		return fault.New(fault.NotFound, "Session not found: "+p.sid)
	}
	streams, ok := s.att.remove(p.sid)
	if !ok {
		return fault.New(fault.NotFound, "Session not found: "+p.sid)
	}
	for _, c := range streams {
		c.Close(server.Close{Kind: server.CloseNormal, Reason: "Session deleted"})
	}
	// Other cluster nodes may serve streams of it (sse_cluster.go).
	s.srv.Note(face, marshal(attachmentNote{Deleted: p.sid, Conversation: at.conv}))
	writeJSON(w, http.StatusOK, StatusResponse{Status: "ok", Message: "Session " + p.sid + " deleted"})
	return nil
}
