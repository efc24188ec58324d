package convapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/server"
)

// Every request that changes a conversation is a pipeline command named
// "rest.<what>": decoded and checked by its HTTP handler before
// admission (so bad input never reaches the pipeline), counted against
// the layer's rate limits, submitted in the conversation's lane (or past
// it, for the control commands: confirm, elicit, interrupt, delete),
// journaled, and replayed when a request repeats its Idempotency-Key.
// The handler's answer is the HTTP response body.

// command is one pipeline command of the face.
type command struct {
	class pipeline.Class
	// session: a command of an existing conversation (lane
	// session:<id>); otherwise it names the conversation it makes or
	// deletes.
	session  bool
	mutating bool
	// bypass runs it past the conversation's lane, as pi-server's control
	// commands.
	bypass  bool
	timeout time.Duration
	run     func(ctx context.Context, c *call) (any, error)
	// keep is what of a successful answer is kept for replays (see
	// pipeline.Handler.Keep); nil keeps it whole.
	keep func(data json.RawMessage) json.RawMessage
}

// call is one command being run.
type call struct {
	cmd pipeline.Command
	h   *server.Hosted // the conversation, for session commands
}

func (c *call) decode(v any) error {
	if len(c.cmd.Payload) == 0 {
		return nil
	}
	if err := json.Unmarshal(c.cmd.Payload, v); err != nil {
		// The face made this payload: a journal from another version.
		return fault.Errorf(fault.Invalid, "The command's payload does not decode: %v", err)
	}
	return nil
}

func always(pipeline.Command) bool { return true }

// commands are the face's pipeline commands by name.
func (s *Server) commands() map[string]command {
	mutate := func(run func(context.Context, *call) (any, error)) command {
		return command{class: pipeline.ClassMutate, session: true, mutating: true, run: run}
	}
	return map[string]command{
		// Creating names the conversation: it runs in its lane, so a step
		// sent right behind it waits for it.
		"rest.create": {class: pipeline.ClassMutate, timeout: -1, run: s.runCreate},
		// A transcript makes its conversation when it does not exist, so
		// it runs as create does (in the conversation's lane all the same).
		"rest.transcript":     {class: pipeline.ClassMutate, mutating: true, run: s.runTranscript},
		"rest.delete":         {class: pipeline.ClassMutate, bypass: true, run: s.runDelete},
		"rest.append":         mutate(s.runAppend),
		"rest.step":           mutate(s.runStep),
		"rest.edit":           mutate(s.runEdit),
		"rest.delete_message": mutate(s.runDeleteMessage),
		"rest.config":         {class: pipeline.ClassMutate, session: true, mutating: true, run: s.runConfig, keep: keptConfigAnswer},
		"rest.fork":           {class: pipeline.ClassMutate, session: true, run: s.runFork},
		"rest.rerun":          mutate(s.runRerun),
		"rest.revert":         mutate(s.runRevert),
		"rest.undo_revert":    mutate(s.runUndoRevert),
		// Answers and interrupts never wait behind the run they act on.
		"rest.confirm":   {class: pipeline.ClassControl, session: true, run: s.runConfirm},
		"rest.elicit":    {class: pipeline.ClassControl, session: true, run: s.runElicit},
		"rest.interrupt": {class: pipeline.ClassControl, session: true, mutating: true, run: s.runInterrupt},
		// What an event stream opens with, asked by a cluster node that
		// does not run the conversation (sse_cluster.go).
		"rest.watch": {class: pipeline.ClassControl, session: true, run: s.runWatch},
		// Keeps a stream's attachment where the conversation runs while
		// another node serves the stream (sse_cluster.go).
		"rest.keep": {class: pipeline.ClassControl, session: true, run: s.runKeep},
	}
}

// registry turns the commands into pipeline handlers.
func (s *Server) registry() pipeline.Registry {
	reg := pipeline.Registry{}
	for name, cmd := range s.commands() {
		cmd := cmd
		lane := pipeline.LaneServer
		if cmd.session {
			lane = pipeline.LaneSession
		}
		h := pipeline.Handler{Class: cmd.class, Lane: lane, Mutating: cmd.mutating, Timeout: cmd.timeout,
			Run: func(ctx context.Context, pc pipeline.Command) (json.RawMessage, error) {
				if who, ok := originPrincipal(pc.Origin); ok {
					ctx = withPrincipal(ctx, who)
				}
				c := &call{cmd: pc}
				if cmd.session {
					h, err := s.conversation(ctx, pc.SessionID)
					if err != nil {
						return nil, err
					}
					c.h = h
				}
				v, err := cmd.run(ctx, c)
				if err != nil {
					return nil, asFault(err)
				}
				if raw, ok := v.(json.RawMessage); ok {
					return raw, nil
				}
				return marshal(v), nil
			}}
		if cmd.bypass {
			h.Bypass = always
		}
		h.Keep = keepable(cmd.keep)
		reg[name] = h
	}
	return reg
}

// keepable is what the pipeline keeps of an outcome to answer replays,
// in memory and in the command journal: keep's part of a success, an
// error's kept message in place of one that quotes what must not be
// kept.
func keepable(keep func(json.RawMessage) json.RawMessage) func(pipeline.Response) pipeline.Response {
	return func(r pipeline.Response) pipeline.Response {
		if r.Err != nil {
			var k keptMessage
			if errors.As(r.Err.Cause, &k) {
				r.Err = fault.New(r.Err.Code, string(k))
			}
		}
		if r.Success && keep != nil && len(r.Data) > 0 {
			r.Data = keep(r.Data)
		}
		return r
	}
}

// asFault turns a handler's error into what the pipeline keeps: its
// fault as it is, or an internal error whose detail stays in the log.
func asFault(err error) error {
	if fe := fault.As(err); fe != nil {
		return fe
	}
	return fault.Wrap(fault.Internal, err, "Internal error")
}

// submitted is a command's outcome as the HTTP handler sees it.
type submitted struct {
	data     json.RawMessage
	replayed bool
}

// submit puts a command through the pipeline and waits for its outcome.
// A client that goes away does not stop the command: it runs to its end
// in its lane, as it would for any face.
func (s *Server) submit(r *http.Request, name, conv string, payload any, rate server.RateClass) (submitted, error) {
	key := r.Header.Get("Idempotency-Key")
	if len(key) > 256 || (key == "" && len(r.Header.Values("Idempotency-Key")) > 0) {
		return submitted{}, fault.New(fault.Invalid, "Idempotency-Key must be a non-empty string of at most 256 characters")
	}
	if e := s.srv.Admit(conv, rate); e != nil {
		return submitted{}, e.Error
	}
	// The principal rides along as the command's origin (not journaled):
	// the command runs with the same view of the conversations as the
	// request that sent it.
	cmd := pipeline.Command{Type: name, SessionID: conv, IdempotencyKey: principalOf(r.Context()).Own(key), Payload: marshal(payload),
		Origin: principalOf(r.Context())}
	settled := func() {}
	if name == "rest.create" {
		settled = s.srv.Expect(conv)
	}
	started := time.Now()
	ch := make(chan pipeline.Response, 1)
	s.srv.Submit(cmd, func(resp pipeline.Response) {
		settled()
		ch <- resp
	})
	var resp pipeline.Response
	select {
	case resp = <-ch:
	case <-r.Context().Done():
		return submitted{}, fault.New(fault.Failed, "The client went away; the command runs on")
	}
	took := time.Since(started)
	if m := s.srv.Metrics(); m != nil {
		m.ObserveCommand(name, resp.Success, took)
	}
	s.logCommand(r, name, conv, resp, took)
	if !resp.Success {
		if resp.Err == nil {
			return submitted{}, fault.New(fault.Internal, "Internal error")
		}
		return submitted{}, resp.Err
	}
	return submitted{data: resp.Data, replayed: resp.Replayed}, nil
}

// logCommand records a command at info: what, on which conversation, how
// it ended and how long it took. Payloads only at debug.
func (s *Server) logCommand(r *http.Request, name, conv string, resp pipeline.Response, took time.Duration) {
	log := s.srv.Logger()
	attrs := []any{"command", name, "session", conv, "ms", took.Milliseconds(), "success", resp.Success, "remote", r.RemoteAddr}
	if resp.Replayed {
		attrs = append(attrs, "replayed", true)
	}
	if resp.Err != nil {
		attrs = append(attrs, "error", resp.Err.Message)
	}
	lvl := slog.LevelInfo
	log.Log(r.Context(), lvl, "command", attrs...)
}
