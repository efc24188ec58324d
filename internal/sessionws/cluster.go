package sessionws

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/interaction"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/server"
)

// A session another cluster node runs, watched from this one.
//
// The client is served here, fed from the cluster's event stream (the
// server package's cluster_watch.go), rather than passed on to the owner
// (ClusterProxy), so it keeps its connection when the owner dies or hands
// the session over: it sees the interrupted run end and the next owner's
// events. What only the owner knows it answers to commands of this face,
// which the pipeline routes to it (and runs here once this node hosts the
// session): sessionws.state, the status, history and open questions at a
// seq, with which this node's watch of the connection starts (a
// trackedView, fed each event after that seq); sessionws.watch, which
// subscribes the client from a cursor; sessionws.input, provide_input's
// answer to a question. Each looks the session up for the client's
// principal (SessionFor), as the face does for a session hosted here, so
// the client may do on this node exactly what it may on the owner.

// ServedEverywhere reports whether the face serves r on every node of a
// cluster, whichever node runs the session it names: a connection to a
// session's WebSocket. A cluster node's proxy (ClusterProxy) passes the
// requests naming a session on to its owner otherwise.
func ServedEverywhere(r *http.Request) bool {
	id := sessionIDOf(r.URL.Path)
	return r.Method == http.MethodGet && id != "" && !strings.Contains(id, "/")
}

// seed is sessionws.state's answer: the session as of event Status.Seq.
type seed struct {
	Status  server.Status         `json:"status"`
	History []server.Transition   `json:"history"`
	Pending []interaction.Request `json:"pending"`
	Created time.Time             `json:"created"`
}

type watchPayload struct {
	After *uint64 `json:"after,omitempty"`
}

type inputPayload struct {
	QuestionID string         `json:"question_id,omitempty"`
	InputData  map[string]any `json:"input_data,omitempty"`
}

// inputAnswer is sessionws.input's: the question answered, or the
// protocol error the client is sent.
type inputAnswer struct {
	QuestionID string    `json:"question_id,omitempty"`
	Error      *errorMsg `json:"error,omitempty"`
}

// registry is the face's commands, answered on the session's node.
func (f *Face) registry() pipeline.Registry {
	return pipeline.Registry{
		"sessionws.state": {Class: pipeline.ClassControl, Lane: pipeline.LaneSession, ReadOnly: true, Run: f.runState},
		"sessionws.watch": {Class: pipeline.ClassControl, Lane: pipeline.LaneSession, Run: f.runWatch},
		"sessionws.input": {Class: pipeline.ClassControl, Lane: pipeline.LaneSession, Run: f.runInput},
	}
}

// principalOf is who a command of this face acts for: the client of
// this node, or that of another node's client (server.Remote).
func principalOf(origin any) server.Principal {
	switch o := origin.(type) {
	case server.Principal:
		return o
	case *server.Remote:
		return o.Who
	case interface{ Principal() server.Principal }:
		return o.Principal()
	}
	return server.Principal{}
}

func (f *Face) sessionOf(ctx context.Context, cmd pipeline.Command) (*server.Hosted, error) {
	h, err := f.srv.SessionFor(ctx, cmd.SessionID, principalOf(cmd.Origin))
	if err != nil {
		return nil, fault.New(fault.NotFound, "Session "+cmd.SessionID+" does not exist")
	}
	return h, nil
}

func (f *Face) runState(ctx context.Context, cmd pipeline.Command) (json.RawMessage, error) {
	h, err := f.sessionOf(ctx, cmd)
	if err != nil {
		return nil, err
	}
	st := h.Status()
	return json.Marshal(seed{Status: st, History: h.History(), Pending: h.Session().Interactions(), Created: h.Created()})
}

func (f *Face) runWatch(ctx context.Context, cmd pipeline.Command) (json.RawMessage, error) {
	var p watchPayload
	if err := json.Unmarshal(cmd.Payload, &p); err != nil {
		return nil, fault.Wrap(fault.Invalid, err, "sessionws.watch: invalid payload")
	}
	h, err := f.sessionOf(ctx, cmd)
	if err != nil {
		return nil, err
	}
	sub, err := f.srv.SubscribeOrigin(cmd.Origin, h, p.After)
	if err != nil {
		return nil, err
	}
	return json.Marshal(sub)
}

func (f *Face) runInput(ctx context.Context, cmd pipeline.Command) (json.RawMessage, error) {
	var p inputPayload
	if err := json.Unmarshal(cmd.Payload, &p); err != nil {
		return nil, fault.Wrap(fault.Invalid, err, "sessionws.input: invalid payload")
	}
	h, err := f.sessionOf(ctx, cmd)
	if err != nil {
		return nil, err
	}
	qid, e := f.answer(h, p.QuestionID, p.InputData, f.opt.Now())
	return json.Marshal(inputAnswer{QuestionID: qid, Error: e})
}

// ask submits one of the face's commands for the connection's session
// and reads its answer into out.
func (c *conn) ask(ctx context.Context, typ string, payload any, origin any, out any) error {
	return c.f.ask(ctx, c.id, typ, payload, origin, out)
}

// visibleElsewhere asks the node that runs session id whether who may
// watch it, as SessionFor does for a session hosted here.
func (f *Face) visibleElsewhere(ctx context.Context, id string, who server.Principal) error {
	var s seed
	return f.ask(ctx, id, "sessionws.state", struct{}{}, who, &s)
}

// ask submits one of the face's commands for session id and reads its
// answer into out.
func (f *Face) ask(ctx context.Context, id, typ string, payload any, origin any, out any) error {
	raw, err := json.Marshal(payload)
	if err != nil {
		return fault.Wrap(fault.Internal, err, "the command could not be encoded")
	}
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	var resp pipeline.Response
	for {
		resp, err = f.srv.SubmitWatch(ctx, pipeline.Command{Type: typ, SessionID: id, Payload: raw, Origin: origin})
		if err != nil {
			return err
		}
		if resp.Success {
			break
		}
		if resp.Err == nil {
			return fault.New(fault.Internal, "Internal error")
		}
		if !retried(typ, resp.Err) {
			return resp.Err
		}
		// The session's node died and no node has taken the session over
		// yet (its lease outlives it by up to a TTL): ask again, as a
		// client's reconnect would, until one has.
		f.srv.Logger().Debug("sessionws: asking the session's node again", "session", id, "command", typ, "err", resp.Err)
		t := time.NewTimer(askAgain)
		select {
		case <-ctx.Done():
			t.Stop()
			return resp.Err
		case <-t.C:
		}
	}
	if err := json.Unmarshal(resp.Data, out); err != nil {
		return fault.Wrap(fault.Internal, err, "the session's node sent an answer that could not be read")
	}
	return nil
}

// retried reports whether a command that failed with e is asked again:
// one that reads (state) or subscribes (watch, whose subscription is made
// here once answered), failed because the session's node was gone or
// stopped; an answer to a question is not sent twice.
func retried(typ string, e *fault.Error) bool {
	if typ == "sessionws.input" {
		return false
	}
	switch e.Code {
	case fault.Unavailable, fault.Interrupted, fault.Timeout:
		return true
	}
	return false
}

// askAgain is how long a command waits before it is asked again.
const askAgain = 250 * time.Millisecond

// askTimeout bounds a command asked of the session's node: one whose
// owner died waits for the takeover, within two lease TTLs.
const askTimeout = 60 * time.Second

// awayWatch is what a watch of a session another node runs has beyond
// one of a hosted session: its one connection, and the view it keeps.
type awayWatch struct {
	c    *conn
	view *trackedView
}

// subscribeAway is subscribe for a session another node runs: the
// owner's reading first (the view starts from it), then the subscription
// from the cursor, or from that reading.
func (c *conn) subscribeAway(after *uint64) {
	ctx := c.f.srv.Context()
	var s seed
	if err := c.ask(ctx, "sessionws.state", struct{}{}, c.who, &s); err != nil {
		c.refuseAway(err)
		return
	}
	c.mu.Lock()
	old := c.watch
	c.mu.Unlock()
	if old != nil {
		c.leave(nil) // subscribing again: the new reading starts a new watch
	}
	w := c.f.awayWatchFor(c, &s)
	c.mu.Lock()
	c.watch = w
	c.mu.Unlock()
	from := after
	if from == nil {
		from = &s.Status.Seq
	}
	hold := server.NewHold()
	var res server.Subscribed
	err := c.ask(ctx, "sessionws.watch", watchPayload{After: from}, &server.WatchOrigin{Who: c.who, Client: c.client, Codec: w, Hold: hold}, &res)
	if err != nil {
		hold.Release()
		c.leave(nil) // not subscribed: the watch would send progress to nobody
		c.refuseAway(err)
		return
	}
	now := c.f.opt.Now()
	st := w.v.Status()
	msg := &subscribedMsg{Type: "subscribed", SessionID: c.id, CurrentState: st.State, ProgressPercentage: st.Step.Percent,
		SubscribedAt: stamp(now), Seq: res.Seq, Resumed: res.Resumed, CursorTooOld: res.TooOld}
	if after == nil {
		// Subscribed from the reading the state is as of.
		msg.Seq, msg.Resumed = s.Status.Seq, false
	}
	c.client.Send(encode(msg))
	if res.TooOld {
		snap := c.snapshot(now)
		snap.Seq = res.Seq
		c.client.Send(encode(snap))
	}
	if after == nil {
		for _, r := range w.v.Interactions() {
			c.client.Send(encode(w.inputRequired(r, msg.Seq, now)))
		}
		c.client.Send(encode(w.progress(msg.Seq, now)))
	}
	hold.Release()
}

// refuseAway tells the client why the session's node would not serve it.
func (c *conn) refuseAway(err error) {
	if fault.CodeOf(err) == fault.NotFound {
		c.fail(closeNotFound, protocolError("session_not_found", "Session "+c.id+" does not exist", nil, c.f.opt.Now()))
		return
	}
	c.sendError(protocolError("internal_error", messageOf(err), nil, c.f.opt.Now()))
}

// awayWatchFor starts the watch of connection c of a session another
// node runs, from the owner's reading s.
func (f *Face) awayWatchFor(c *conn, s *seed) *watch {
	v := newTrackedView(s)
	w := &watch{f: f, v: v, id: c.id, away: &awayWatch{c: c, view: v}, stop: make(chan struct{}), kick: make(chan struct{}, 1),
		resolved: map[string]interaction.ResolvedBy{}, conns: map[*conn]struct{}{c: {}}, refs: 1}
	w.lastSeq = s.Status.Seq
	w.lastRev.Store(v.StatusRev())
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closing {
		f.aways[w] = struct{}{}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			w.loop()
		}()
	}
	return w
}

// provideInputAway is provide_input for a session another node runs:
// answered there.
func (c *conn) provideInputAway(body map[string]any, now time.Time) {
	data, _ := body["input_data"].(map[string]any)
	qid, _ := body["question_id"].(string)
	var ans inputAnswer
	if err := c.ask(c.f.srv.Context(), "sessionws.input", inputPayload{QuestionID: qid, InputData: data}, c.who, &ans); err != nil {
		if fault.CodeOf(err) == fault.NotFound {
			c.sendError(protocolError("session_not_found", "Session "+c.id+" does not exist", nil, now))
			return
		}
		c.sendError(protocolError("internal_error", "The answer could not be delivered: "+messageOf(err), map[string]any{"question_id": qid}, now))
		return
	}
	if ans.Error != nil {
		c.sendError(ans.Error)
		return
	}
	c.afterEvents(func(seq uint64) []byte {
		return encode(&inputReceivedMsg{Type: "input_received", SessionID: c.id, QuestionID: ans.QuestionID, Timestamp: stamp(now), Seq: seq})
	})
}

// queryStateAway is query_state for a session another node runs: the
// connection's view once subscribed, the owner's reading before.
func (c *conn) queryStateAway(now time.Time) {
	c.mu.Lock()
	w := c.watch
	c.mu.Unlock()
	if w == nil {
		var s seed
		if err := c.ask(c.f.srv.Context(), "sessionws.state", struct{}{}, c.who, &s); err != nil {
			c.refuseAway(err)
			return
		}
		c.mu.Lock()
		c.seeded = newTrackedView(&s)
		c.mu.Unlock()
	}
	snap := c.snapshot(now)
	c.afterEvents(func(seq uint64) []byte {
		snap.Seq = max(snap.Seq, seq)
		return encode(snap)
	})
}

// messageOf is what the client may read of err.
func messageOf(err error) string {
	if fe := fault.As(err); fe != nil && fe.Code != fault.Internal {
		return fe.Message
	}
	return "Internal error"
}

// stopAway stops the watch of a session another node runs.
func (f *Face) stopAway(w *watch) {
	f.mu.Lock()
	delete(f.aways, w)
	f.mu.Unlock()
	w.stopOnce.Do(func() { close(w.stop) })
}

// deletedElsewhere closes the connections of a deleted session this
// node serves from the cluster's stream, as a hosted session's watch
// does when it is gone (4004): a session deleted through any face on any
// node (the pipeline's lifecycle events reach every node of a cluster).
func (f *Face) deletedElsewhere(ev pipeline.Event) {
	if ev.Type != pipeline.CommandFinished || !ev.Success || ev.SessionID == "" ||
		(ev.Command != "delete_session" && ev.Command != "rest.delete") {
		return
	}
	f.mu.Lock()
	var conns []*conn
	for w := range f.aways {
		if w.id == ev.SessionID {
			conns = append(conns, w.away.c)
		}
	}
	f.mu.Unlock()
	for _, c := range conns {
		c.fail(closeNotFound, protocolError("session_not_found", "Session "+ev.SessionID+" was deleted", nil, f.opt.Now()))
	}
}
