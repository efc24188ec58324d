package piserver

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/piwire"
)

// ---- events around commands ----

// reportedSeq is the "seq" of a response's data or of a sessionInfo: the
// last event the client was told about.
func reportedSeq(data json.RawMessage) uint64 {
	var d struct {
		Seq uint64 `json:"seq"`
	}
	_ = json.Unmarshal(data, &d)
	return d.Seq
}

// afterResponse does what follows a command's response: the
// session_created / session_deleted broadcasts, and, for a replayed
// create, load or switch (whose handler did not run this time), the
// subscription the original made.
func (s *Server) afterResponse(c *conn, cmd pipeline.Command, r pipeline.Response) {
	if !r.Success {
		return
	}
	switch cmd.Type {
	case "create_session", "load_session":
		var d struct {
			SessionID   string          `json:"sessionId"`
			SessionInfo json.RawMessage `json:"sessionInfo"`
		}
		if json.Unmarshal(r.Data, &d) != nil {
			return
		}
		if r.Replayed {
			s.resubscribe(c, d.SessionID, reportedSeq(d.SessionInfo))
		}
		if cmd.Type == "create_session" && !r.Replayed {
			s.srv.Broadcast(face, piwire.Marshal(frame{"session_created", d}))
		}
	case "switch_session":
		if r.Replayed {
			var d struct {
				Seq uint64 `json:"seq"`
			}
			_ = json.Unmarshal(r.Data, &d)
			s.resubscribe(c, cmd.SessionID, d.Seq)
		}
	case "delete_session":
		if !r.Replayed {
			s.srv.Broadcast(face, piwire.Marshal(frame{"session_deleted", map[string]string{"sessionId": cmd.SessionID}}))
		}
	}
}

// resubscribe subscribes c to session id after the seq a replayed
// response reported. It runs on the pipeline's goroutine, off the
// connection's reader, and gives up quickly: a session deleted since, or
// unknown after a restart, is simply not watched.
func (s *Server) resubscribe(c *conn, id string, seq uint64) {
	ctx, cancel := context.WithTimeout(s.srv.Context(), 5*time.Second)
	defer cancel()
	h, err := s.srv.SessionFor(ctx, id, c.who)
	if err != nil || c.client == nil {
		return
	}
	if !h.Subscribed(c.client) {
		s.srv.Subscribe(c.client, h, s.codec, &seq, nil)
	}
}

// log records a command at info: who sent it, what it was, how it ended
// and how long it took. Prompt text and other payloads only at debug.
func (s *Server) log(cmd pipeline.Command, r pipeline.Response, took time.Duration) {
	log := s.srv.Logger()
	attrs := []any{"command", cmd.Type, "ms", took.Milliseconds(), "success", r.Success}
	if cmd.ID != "" {
		attrs = append(attrs, "id", cmd.ID)
	}
	if cmd.SessionID != "" {
		attrs = append(attrs, "session", cmd.SessionID)
	}
	if o, _ := cmd.Origin.(*origin); o != nil {
		attrs = append(attrs, "transport", o.c.transport)
		if o.c.remote != "" {
			attrs = append(attrs, "remote", o.c.remote)
		}
	}
	if r.Replayed {
		attrs = append(attrs, "replayed", true)
	}
	if cmd.Type == "bash" {
		// A shell command run for a client is what an operator most needs
		// to see; it is not conversation text.
		var p struct {
			Command string `json:"command"`
		}
		_ = json.Unmarshal(cmd.Payload, &p)
		if len(p.Command) > 500 {
			p.Command = p.Command[:500] + "…"
		}
		attrs = append(attrs, "shell", p.Command)
	}
	if r.Err != nil {
		attrs = append(attrs, "error", r.Err.Message)
	}
	if cmd.Type == "get_state" || cmd.Type == "health_check" || cmd.Type == "get_metrics" {
		log.Debug("command", attrs...) // polled: at info they would drown the rest
		return
	}
	if log.Enabled(context.Background(), slog.LevelDebug) && len(cmd.Payload) > 0 {
		attrs = append(attrs, "payload", string(cmd.Payload))
	}
	log.Info("command", attrs...)
}
