package convapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// forkPayload is rest.fork's payload.
type forkPayload struct {
	After int `json:"after"`
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request, p params) error {
	return s.answerCommand(w, r, p, commandRequest{name: "rest.fork", rate: server.RateData,
		decode: func(object) (any, string, error) {
			pl, err := decodeFork(r)
			return pl, "", err
		}})
}

// decodeFork reads fork's query: the message to copy up to and the
// branch (main).
func decodeFork(r *http.Request) (forkPayload, error) {
	q := r.URL.Query()
	v, ok := q["after_message"]
	if !ok {
		return forkPayload{}, fault.New(fault.Invalid, "after_message query parameter is required")
	}
	n, err := atoi(v[0])
	if err != nil {
		return forkPayload{}, fault.New(fault.Invalid, "after_message must be an integer")
	}
	if b, ok := q["branch"]; ok && b[0] != "main" {
		return forkPayload{}, fault.New(fault.NotFound, "Branch not found: "+clip(b[0], 100))
	}
	return forkPayload{After: n}, nil
}

func (s *Server) runFork(ctx context.Context, c *call) (any, error) {
	var p forkPayload
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	src := c.h.Session()
	if src.Running() {
		return nil, fault.New(fault.Conflict, "Cannot fork while generation is in progress")
	}
	msgs := src.Messages()
	if p.After < 0 || p.After >= len(msgs) {
		return nil, fault.New(fault.Invalid, fmt.Sprintf("Message index %d out of range (0-%d)", p.After, len(msgs)-1))
	}
	// A copy of the session file's current branch becomes a session of
	// its own, cut after the message asked for: tool calls, results and
	// settings come along as they are.
	file := src.File()
	if file == "" {
		return nil, fault.New(fault.Conflict, "This conversation is kept in memory only and cannot be forked")
	}
	f, err := transcript.Open(file)
	if err != nil {
		return nil, fmt.Errorf("reading the conversation to fork: %w", err)
	}
	nf, err := f.Clone(s.srv.SessionsDir())
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("copying the conversation: %w", err)
	}
	path := nf.Path()
	if err := nf.Close(); err != nil {
		return nil, fmt.Errorf("copying the conversation: %w", err)
	}
	id := server.NewID()
	// The fork's tools run in the mode its source's do.
	h, err := s.srv.Load(ctx, server.LoadRequest{ID: id, Path: path, Who: principalOf(ctx), Sandbox: c.h.Sandbox()})
	if err != nil {
		return nil, err
	}
	name := src.Name()
	if name == "" {
		name = c.h.ID()
	}
	err = func() error {
		sess := h.Session()
		if n := len(sess.Messages()); p.After+1 < n {
			if err := sess.TruncateAt(p.After + 1); err != nil {
				return err
			}
		}
		if err := sess.SetConfirmAll(true); err != nil {
			return err
		}
		return sess.SetName(fmt.Sprintf("Fork of %s @ msg %d", name, p.After+1))
	}()
	if err != nil {
		s.discard(ctx, id, "a fork that failed")
		return nil, err
	}
	at := s.att.create(id)
	return CreatedResponse{Status: "ok", ConversationID: id, SessionID: at.id}, nil
}
