package convapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/server"
	"github.com/agentd-dev/agentd/internal/session"
)

// An event stream on a cluster node that does not run the conversation.
//
// It is served here, fed from the cluster's event stream (see the server
// package's cluster_watch.go), so the client keeps it when the owner
// dies or hands the conversation over: it sees the interrupted run end
// and the next owner's events on the same connection. The owner answers
// what the stream opens with (whether the principal may see the
// conversation, the attachment, the connected snapshot and its seq) to a
// rest.watch command routed to it; every other request naming the
// conversation is still passed on to the owner (ClusterProxy).
//
// The attachment (gptme's "session") is made on the owner, as the other
// requests that name it go there, and kept here too with the stream
// (adopt). A stream served here is not one of its streams on the owner:
// DELETE of the attachment there does not close it (DELETE of it here
// does), and its idle time runs there, so this node keeps it used there
// while the stream is open (keepAttachment, rest.keep). The
// conversation's deletion through any face, on any node, closes it
// (deletedElsewhere).
// When the owner dies, its attachments die with it, as on every path; a
// step naming the attachment then finds it only on this node, when this
// node took the conversation over.

// ServedEverywhere reports whether the face serves r on every node of a
// cluster, whichever node runs the conversation it names: a GET of a
// conversation's event stream. A cluster node's proxy (ClusterProxy)
// passes every other request naming a conversation on to its owner.
func ServedEverywhere(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	rel, ok := relative(r.URL.EscapedPath())
	if !ok {
		return false
	}
	segs := strings.Split(strings.TrimPrefix(rel, "/"), "/")
	return len(segs) == 3 && segs[0] == "conversations" && segs[1] != "" && segs[2] == "events"
}

// watchPayload is rest.watch's: the attachment the stream is for ("" for
// a new one) and the client's cursor.
type watchPayload struct {
	SessionID string  `json:"session_id,omitempty"`
	After     *uint64 `json:"after,omitempty"`
}

// watchAnswer is what a stream opens with, made where the conversation
// runs.
type watchAnswer struct {
	Attachment string         `json:"attachment"`
	Connected  ConnectedEvent `json:"connected"`
	TooOld     bool           `json:"too_old,omitempty"`
}

// runWatch is rest.watch: the attachment named (which must belong to the
// conversation) or a new one, the client subscribed from its cursor
// (SubscribeOrigin: here, or from the stream on the client's node), and
// the connected snapshot at the seq it subscribed from.
func (s *Server) runWatch(_ context.Context, c *call) (any, error) {
	var p watchPayload
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	var at *attachment
	if p.SessionID != "" {
		a, err := s.attachmentIn(p.SessionID, c.cmd.SessionID)
		if err != nil {
			return nil, err
		}
		at = a
	} else {
		at = s.att.create(c.cmd.SessionID)
	}
	sub, err := s.srv.SubscribeOrigin(c.cmd.Origin, c.h, p.After)
	if err != nil {
		return nil, err
	}
	if _, remote := c.cmd.Origin.(*server.Remote); remote {
		s.att.update(at.id, func(at *attachment) { at.elsewhere = true })
	}
	return watchAnswer{Attachment: at.id, Connected: s.snapshot(c.h, at.id, sub), TooOld: sub.TooOld}, nil
}

// adopt records stream c of attachment id of conversation conv, made
// on the node that ran the conversation: the attachment is made here
// when this node has none of that id.
func (a *attachments) adopt(id, conv string, c *server.Client) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.byID[id]
	if !ok {
		a.sweepLocked(now)
		if len(a.byID) >= maxAttachments {
			a.evictLocked(len(a.byID) - maxAttachments + 1)
		}
		at = &attachment{id: id, conv: conv, created: now, streams: map[*server.Client]struct{}{}}
		a.byID[id] = at
	}
	at.streams[c] = struct{}{}
	at.last = now
}

// deletes are the commands of every face that delete a conversation:
// the REST face's DELETE and pi-server's delete_session.
var deletes = map[string]bool{"rest.delete": true, "delete_session": true}

// deletedElsewhere closes this node's streams of a conversation deleted
// through any face on any node (the pipeline's lifecycle events reach
// every node of a cluster): the node that ran a REST delete closes its
// own streams as it answers, but a stream another node serves from the
// cluster's stream, or any stream of a conversation pi-server's
// delete_session removed, would otherwise stay open, hearing nothing
// more.
func (s *Server) deletedElsewhere(ev pipeline.Event) {
	if ev.Type != pipeline.CommandFinished || !deletes[ev.Command] || !ev.Success || ev.SessionID == "" {
		return
	}
	for _, c := range s.att.removeConversation(ev.SessionID) {
		c.Close(server.Close{Kind: server.CloseNormal, Reason: "Conversation deleted"})
	}
}

// attachmentNote is what this face tells itself on the other cluster
// nodes (server.Note): attachment Deleted, of Conversation, was deleted.
type attachmentNote struct {
	Deleted      string `json:"deleted"`
	Conversation string `json:"conversation"`
}

// removeOf deletes attachment id when it is one of conversation conv,
// and returns its streams to close.
func (a *attachments) removeOf(id, conv string) []*server.Client {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.byID[id]
	if !ok || at.conv != conv {
		return nil
	}
	delete(a.byID, id)
	return streamsOf(at)
}

// attachmentDeleted closes this node's streams of an attachment deleted
// (DELETE /sessions/{id}) on another node: a stream served here of an
// attachment the owner made, deleted there, would otherwise go on under
// an attachment no request finds. Only an attachment of the
// conversation the note names goes.
func (s *Server) attachmentDeleted(note json.RawMessage) {
	var n attachmentNote
	if json.Unmarshal(note, &n) != nil || n.Deleted == "" {
		return
	}
	for _, c := range s.att.removeOf(n.Deleted, n.Conversation) {
		c.Close(server.Close{Kind: server.CloseNormal, Reason: "Session deleted"})
	}
}

// keepAttachment keeps attachment id of conversation conv alive where
// the conversation runs while this node serves a stream of it, as a
// stream there does: the owner does not count this node's streams, and
// would drop the attachment once it had been idle for its time, the
// stream still open here and every step naming it then a 404. A
// rest.keep command, routed as rest.watch is, marks it used there
// every third of the idle time. The returned func stops it and waits.
func (s *Server) keepAttachment(ctx context.Context, id, conv string, who server.Principal) (stop func()) {
	if s.opt.SessionIdle <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(s.opt.SessionIdle / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cmd := pipeline.Command{Type: "rest.keep", SessionID: conv, Payload: marshal(watchPayload{SessionID: id}), Origin: who}
			ch := make(chan pipeline.Response, 1)
			s.srv.Submit(cmd, func(r pipeline.Response) { ch <- r })
			select {
			case <-ctx.Done():
				return
			case r := <-ch:
				if !r.Success {
					// Gone with an owner that died (attachments die with
					// it, this stream does not) or deleted there: the
					// stream goes on, as after its owner's death.
					s.srv.Logger().Debug("convapi: an attachment streamed here was not kept", "session", conv, "attachment", id, "err", r.Err)
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// runKeep is rest.keep: attachment id is marked used where the
// conversation runs (keepAttachment).
func (s *Server) runKeep(_ context.Context, c *call) (any, error) {
	var p watchPayload
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	if _, err := s.attachmentIn(p.SessionID, c.cmd.SessionID); err != nil {
		return nil, err
	}
	return StatusResponse{Status: "ok"}, nil
}

// attachmentIn is attachment id of conversation conv, marked used (what
// a routed rest.watch or rest.keep names): not found, or forbidden when
// it is another conversation's.
func (s *Server) attachmentIn(id, conv string) (*attachment, error) {
	at, ok := s.att.get(id)
	if !ok {
		return nil, fault.New(fault.NotFound, "Session not found: "+id)
	}
	if at.conv != conv {
		return nil, fault.New(fault.Forbidden, "Session "+id+" does not belong to conversation "+conv)
	}
	return at, nil
}

// editedElsewhere stands for conversation_edited on a stream fed from
// the cluster's stream: the event carries no log, and the log is on the
// node that runs the conversation, so the client is told to reload it,
// as after a cursor too old, rather than sent an empty one.
func editedElsewhere(ev session.Event) ResyncEvent {
	return ResyncEvent{Type: "resync", Reason: fmt.Sprintf("The conversation was edited at message %d on the node that runs it: reload the conversation (GET) and continue from seq", ev.Index),
		After: ev.Seq - 1, Seq: ev.Seq}
}

// originPrincipal is who a command acts for: the principal a request of
// this node gave, or that of a client of another cluster node.
func originPrincipal(origin any) (server.Principal, bool) {
	switch o := origin.(type) {
	case server.Principal:
		return o, true
	case *server.Remote:
		return o.Who, true
	case interface{ Principal() server.Principal }:
		return o.Principal(), true
	}
	return server.Principal{}, false
}

// eventsElsewhere serves GET .../events for a conversation another node
// runs: rest.watch asks the owner, and the client is fed here.
func (s *Server) eventsElsewhere(w http.ResponseWriter, r *http.Request, p params, cur *eventID, after *uint64, sid string) error {
	link, c, err := s.openStream(w, cur)
	if err != nil {
		return err
	}
	hold := server.NewHold()
	cmd := pipeline.Command{Type: "rest.watch", SessionID: p.conv, Payload: marshal(watchPayload{SessionID: sid, After: after}),
		Origin: &server.WatchOrigin{Who: principalOf(r.Context()), Client: c, Codec: s.codec, Hold: hold}}
	resp, err := s.srv.SubmitWatch(r.Context(), cmd)
	if err == nil && !resp.Success {
		if resp.Err != nil {
			err = resp.Err
		} else {
			err = fault.New(fault.Internal, "Internal error")
		}
	}
	var ans watchAnswer
	if err == nil {
		err = unmarshalInto(resp.Data, &ans)
	}
	if err != nil {
		hold.Release()
		c.Close(server.Close{Kind: server.CloseNormal})
		<-c.Done()
		unstream(w)
		return err
	}
	// The attachment is kept here too, with this stream: requests that
	// name it and reach this node find it once this node runs the
	// conversation (it takes the conversation over when its owner dies,
	// as a node whose clients follow it), and DELETE of it here closes
	// the stream.
	s.att.adopt(ans.Attachment, p.conv, c)
	defer s.att.detach(ans.Attachment, c)
	defer s.keepAttachment(r.Context(), ans.Attachment, p.conv, principalOf(r.Context()))()
	cursor := eventID{seq: ans.Connected.Seq}
	if ans.Connected.Resumed && cur != nil {
		cursor = *cur
	}
	c.Send(appendEventID(nil, cursor, ans.Connected))
	if ans.TooOld {
		c.Send(appendEvent(nil, ans.Connected.Seq, ResyncEvent{Type: "resync", Reason: "The cursor is older than the conversation's event log, or beyond its last event: reload the conversation (GET) and continue from seq", After: cur.seq, Seq: ans.Connected.Seq}))
	}
	c.Send(pingFrame)
	hold.Release()
	s.stream(r, link, c)
	return nil
}
