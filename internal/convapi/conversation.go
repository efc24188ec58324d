package convapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/registry"
	"github.com/agentd-dev/agentd/internal/server"
)

// conversation finds conversation id: loaded, or known from before a
// restart (loaded now). One the principal of ctx may not see is not
// found, exactly as one that does not exist.
func (s *Server) conversation(ctx context.Context, id string) (*server.Hosted, error) {
	h, err := s.srv.SessionFor(ctx, id, principalOf(ctx))
	if err != nil {
		if fault.CodeOf(err) == fault.NotFound {
			return nil, fault.New(fault.NotFound, "Conversation not found: "+id)
		}
		return nil, err
	}
	return h, nil
}

// attachmentOf checks the session_id a request names: it must exist and
// belong to the conversation. "" is no attachment (the design document's
// requests have none).
func (s *Server) attachmentOf(ctx context.Context, conv, sid string) (*attachment, error) {
	if sid == "" {
		return nil, nil
	}
	at, ok := s.att.get(sid)
	if !ok {
		return nil, fault.New(fault.NotFound, "Session not found: "+sid)
	}
	if _, err := s.conversation(ctx, conv); err != nil {
		return nil, err
	}
	if at.conv != conv {
		return nil, fault.New(fault.Forbidden, "Session "+sid+" does not belong to conversation "+conv)
	}
	return at, nil
}

// body reads a request body as a JSON object.
func (s *Server) body(w http.ResponseWriter, r *http.Request, emptyMsg string) (object, error) {
	b, err := readBody(w, r, s.srv.Limits().MaxFrameBytes)
	if err != nil {
		return nil, err
	}
	return parseObject(b, emptyMsg)
}

// findModel finds "provider/id" (or a bare id, when one provider has it)
// among the models that can be used now (registry.Pick), in this face's
// words.
func (s *Server) findModel(name string) (*llm.Model, error) {
	m, err := registry.Pick(s.opt.Models.Available(), name)
	switch {
	case errors.Is(err, registry.ErrAmbiguousModel):
		return nil, fault.New(fault.Invalid, "Model "+name+" is ambiguous: name it as provider/id")
	case err != nil:
		return nil, fault.New(fault.Invalid, "Model not found: "+name+" (GET /api/v2/models lists the models that can be used)")
	}
	return m, nil
}

func modelName(m *llm.Model) string {
	if m == nil {
		return ""
	}
	return m.Provider + "/" + m.ID
}

func (s *Server) getConversation(w http.ResponseWriter, r *http.Request, p params) error {
	q := r.URL.Query()
	limit, before := -1, -1
	if v, ok := q["limit"]; ok {
		n, err := atoi(v[0])
		if err != nil || n <= 0 {
			return fault.New(fault.Invalid, "limit must be a positive integer")
		}
		limit = min(n, 10000)
	}
	if v, ok := q["before"]; ok {
		n, err := atoi(v[0])
		if err != nil || n < 0 {
			return fault.New(fault.Invalid, "before must be a non-negative integer")
		}
		before = n
		if limit < 0 {
			return fault.New(fault.Invalid, "before requires limit to be set")
		}
	}
	h, err := s.conversation(r.Context(), p.conv)
	if err != nil {
		return err
	}
	// A weak validator of what this answer shows: the conversation's last
	// seq (every change is an event) and the page asked for.
	etag := fmt.Sprintf(`W/"%s-%d-%d-%d"`, sha(h.ID()+"\x00"+h.Session().File()), h.Session().Seq(), limit, before)
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "no-cache")
	if match := r.Header.Get("If-None-Match"); match != "" && etagMatches(match, etag) {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	c := s.conversationOf(h)
	if limit > 0 {
		total := len(c.Log)
		end := total
		if before >= 0 {
			end = min(before, total)
		}
		start := max(0, end-limit)
		c.Log = c.Log[start:end]
		more := start > 0
		c.TotalMessages, c.HasMore = &total, &more
		if more {
			c.Before = &start
		}
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}

// conversationOf is a conversation as GET answers it. Its seq is read
// before its messages, so events after that seq cover anything newer.
func (s *Server) conversationOf(h *server.Hosted) Conversation {
	sess := h.Session()
	seq := sess.Seq()
	msgs := sess.Messages()
	log := wireLog(msgs)
	file := sess.File()
	c := Conversation{ID: h.ID(), Name: sess.Name(), Log: log, Logfile: file, Branches: map[string][]Message{"main": log}, Seq: seq}
	if file != "" {
		c.Logdir = filepath.Dir(file)
	}
	if c.Name == "" {
		c.Name = h.ID()
	}
	if a, ok := s.att.latest(h.ID()); ok {
		c.Session = &ConversationSession{ID: a.id, Generating: sess.Running(), LastError: lastError(msgs)}
	}
	return c
}

func (s *Server) deleteConversation(w http.ResponseWriter, r *http.Request, p params) error {
	if _, _, err := s.command(w, r, p, commandRequest{name: "rest.delete", rate: server.RateControl}); err != nil {
		return err
	}
	for _, c := range s.att.removeConversation(p.conv) {
		c.Close(server.Close{Kind: server.CloseNormal, Reason: "Conversation deleted"})
	}
	writeJSON(w, http.StatusOK, StatusResponse{Status: "ok"})
	return nil
}

func (s *Server) runDelete(ctx context.Context, c *call) (any, error) {
	id := c.cmd.SessionID
	h, err := s.conversation(ctx, id)
	if err != nil {
		return nil, err
	}
	if h.Session().Running() {
		return nil, fault.New(fault.Conflict, "Cannot delete while generation is in progress")
	}
	if err := s.srv.Delete(ctx, id); err != nil {
		if fault.CodeOf(err) == fault.NotFound {
			return nil, fault.New(fault.NotFound, "Conversation not found: "+id)
		}
		if fault.CodeOf(err) != fault.Internal {
			return nil, err
		}
		// The conversation is gone; only closing its file failed.
		s.srv.Logger().Warn("closing a deleted conversation", "session", id, "err", err)
	}
	return StatusResponse{Status: "ok"}, nil
}
