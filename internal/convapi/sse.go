package convapi

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/server"
)

// face is this face's name among the layer's clients.
const face = "rest"

// sseWriteTimeout bounds one batch written to a stream: a client that
// stops reading is cut off rather than holding its writer forever.
const sseWriteTimeout = 30 * time.Second

// pingFrame stands for a heartbeat in a client's queue; the link writes
// it with the id of the last frame it wrote, so a heartbeat never moves a
// client's cursor past an event it has not seen. It is compared by
// identity.
var pingFrame = []byte(`data: {"type":"ping"}` + "\n\n")

// sseLink writes a client's frames to its event stream: every frame the
// writer hands over in one write and one flush.
type sseLink struct {
	w  http.ResponseWriter
	rc *http.ResponseController

	lastID []byte // the id of the last frame written, for heartbeats
	// skip is a resume cursor inside an event ("7.1"): the frames of
	// that event up to its part, which the client has seen, are dropped
	// from the replay. Cleared at the first frame of a later event. The
	// first frame written is the snapshot, which carries the cursor
	// itself and is never dropped.
	skip    eventID
	started bool

	once   sync.Once
	closed chan struct{}
}

func newSSELink(w http.ResponseWriter) *sseLink {
	return &sseLink{w: w, rc: http.NewResponseController(w), closed: make(chan struct{})}
}

// sseBufs lends the links their write buffers for the time of a batch:
// kept per link, a buffer (up to 64 KB) stayed with every idle stream.
var sseBufs sync.Pool // of *[]byte

// Write implements server.Link; only the client's writer calls it.
func (l *sseLink) Write(_ context.Context, frames [][]byte) error {
	bp, _ := sseBufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	b := (*bp)[:0]
	for _, f := range frames {
		if len(f) > 0 && &f[0] == &pingFrame[0] {
			if l.lastID != nil {
				b = append(b, "id: "...)
				b = append(b, l.lastID...)
				b = append(b, '\n')
			}
			b = append(b, f...)
			continue
		}
		if l.skip.part > 0 && l.started {
			if id, ok := frameID(f); ok && id.seq >= l.skip.seq {
				if id.seq == l.skip.seq {
					f = dropParts(f, l.skip)
				}
				l.skip = eventID{}
			}
		}
		l.started = true
		b = append(b, f...)
		if id := lastFrameID(f); id != nil {
			l.lastID = append(l.lastID[:0], id...)
		}
	}
	if err := l.rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	_, err := l.w.Write(b)
	if err == nil {
		err = l.rc.Flush()
	}
	if cap(b) <= 64<<10 { // a large batch's buffer is not kept
		*bp = b[:0]
		sseBufs.Put(bp)
	}
	return err
}

// lastFrameID finds the id of the last SSE frame in f ("id: <n>\n").
func lastFrameID(f []byte) []byte {
	i := bytes.LastIndex(f, []byte("id: "))
	if i < 0 || (i > 0 && f[i-1] != '\n') {
		return nil
	}
	rest := f[i+4:]
	j := bytes.IndexByte(rest, '\n')
	if j <= 0 {
		return nil
	}
	return rest[:j]
}

// Close implements server.Link: the stream's handler returns, which ends
// the response.
func (l *sseLink) Close(server.Close) { l.once.Do(func() { close(l.closed) }) }

// cursorOf reads where a client resumes: the Last-Event-ID header an
// EventSource sends when it reconnects, or ?after=. The header wins: an
// EventSource opened on a URL with ?after= keeps that URL on every
// reconnect, and only its header says how far it has read since. A
// cursor is a seq or a frame inside one ("7.1", eventID).
func cursorOf(r *http.Request) (*eventID, error) {
	v := r.Header.Get("Last-Event-ID")
	name := "Last-Event-ID"
	if q := r.URL.Query().Get("after"); q != "" && v == "" {
		v, name = q, "after"
	}
	if v == "" {
		return nil, nil
	}
	id, ok := parseEventID(v)
	if !ok {
		return nil, fault.New(fault.Invalid, name+" must be the id of the last event received: a non-negative integer (its seq), or a seq and a part from 1 to 9 (\"7.1\")")
	}
	return &id, nil
}

// events serves GET .../events: an attachment's event stream.
func (s *Server) events(w http.ResponseWriter, r *http.Request, p params) error {
	cur, err := cursorOf(r)
	if err != nil {
		return err
	}
	var after *uint64
	if cur != nil {
		a := cur.after()
		after = &a
	}
	who := principalOf(r.Context()).Subject
	// One subject holds at most MaxStreamsPerSubject streams on the node
	// serving them (owner or not), counted until the handler returns.
	if !s.streams.Admit(who) {
		return fault.New(fault.Limit, "Too many event streams for this user (at most "+strconv.Itoa(s.streams.Max)+"): close one first")
	}
	defer s.streams.Leave(who)
	sid, hasSID := r.URL.Query()["session_id"]
	if s.srv.RunsElsewhere(r.Context(), p.conv) {
		if !hasSID {
			sid = []string{""}
		}
		return s.eventsElsewhere(w, r, p, cur, after, sid[0]) // sse_cluster.go
	}
	h, err := s.conversation(r.Context(), p.conv)
	if err != nil {
		return err
	}
	var at *attachment
	if hasSID && sid[0] != "" {
		a, ok := s.att.get(sid[0])
		if !ok {
			return fault.New(fault.NotFound, "Session not found: "+sid[0])
		}
		if a.conv != p.conv {
			return fault.New(fault.Forbidden, "Session "+sid[0]+" does not belong to conversation "+p.conv)
		}
		at = a
	} else {
		at = s.att.create(p.conv)
	}

	link, c, err := s.openStream(w, cur)
	if err != nil {
		return err
	}
	if !s.att.attach(at.id, c) {
		c.Close(server.Close{Kind: server.CloseNormal})
		<-c.Done()
		return fault.New(fault.NotFound, "Session not found: "+at.id)
	}
	defer s.att.detach(at.id, c)

	// The snapshot goes out first: the subscription holds its events
	// until it is queued.
	hold := server.NewHold()
	sub := s.srv.Subscribe(c, h, s.codec, after, hold)
	// The snapshot's id is where the client's cursor stands: on a
	// resume, its own cursor, since the events after it follow and an
	// EventSource that drops now must come back asking for them, not
	// for what the snapshot says is the last. Ids on a stream never go
	// back.
	cursor := eventID{seq: sub.Seq}
	if sub.Resumed && cur != nil {
		cursor = *cur
	}
	c.Send(appendEventID(nil, cursor, s.snapshot(h, at.id, sub)))
	if sub.TooOld {
		c.Send(appendEvent(nil, sub.Seq, ResyncEvent{Type: "resync", Reason: "The cursor is older than the conversation's event log, or beyond its last event: reload the conversation (GET) and continue from seq", After: cur.seq, Seq: sub.Seq}))
	}
	c.Send(pingFrame)
	hold.Release()
	s.stream(r, link, c)
	return nil
}

// stream keeps an event stream open, with its heartbeats, until the
// client goes, or the link or the client is closed.
func (s *Server) stream(r *http.Request, link *sseLink, c *server.Client) {
	t := time.NewTicker(s.opt.Ping)
	defer t.Stop()
loop:
	for {
		select {
		case <-t.C:
			c.Send(pingFrame)
		case <-r.Context().Done():
			break loop
		case <-link.closed:
			break loop
		case <-c.Done():
			break loop
		}
	}
	c.Close(server.Close{Kind: server.CloseNormal})
	<-c.Done()
}

// snapshot is the connected event: the attachment, whether a run is in
// progress, the last error and what waits for a person.
func (s *Server) snapshot(h *server.Hosted, sid string, sub server.Subscribed) ConnectedEvent {
	sess := h.Session()
	ev := ConnectedEvent{Type: "connected", SessionID: sid, Generating: sess.Running(), LastError: lastError(sess.Messages()),
		PendingTools: []PendingTool{}, PendingElicitations: []ElicitPendingEvent{}, Seq: sub.Seq, Resumed: sub.Resumed}
	for _, req := range sess.Interactions() {
		if pt, ok := pendingTool(req); ok {
			ev.PendingTools = append(ev.PendingTools, pt)
		} else if req.Kind.IsQuestion() {
			ev.PendingElicitations = append(ev.PendingElicitations, elicitEvent(req))
		}
	}
	// An update after sub.Seq reaches this stream live, with its output;
	// one at or before it only from the log, without: that one is here.
	for _, p := range sess.ToolProgress() {
		if out := resultText(p.Partial); out != "" && p.Seq <= sub.Seq {
			ev.ToolOutputs = append(ev.ToolOutputs, ToolOutputEvent{Type: "tool_output", ToolID: toolID(p.ToolCallID), Output: out})
		}
	}
	slices.SortFunc(ev.ToolOutputs, func(a, b ToolOutputEvent) int { return strings.Compare(a.ToolID, b.ToolID) })
	return ev
}

// openStream answers a request for an event stream with the stream's
// headers and attaches its client, resuming inside an event when cur is
// one ("7.1"); on an error nothing is written, so the caller answers it.
func (s *Server) openStream(w http.ResponseWriter, cur *eventID) (*sseLink, *server.Client, error) {
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("X-Accel-Buffering", "no")
	link := newSSELink(w)
	if cur != nil {
		link.skip = *cur
	}
	c, err := s.srv.Attach(link, server.ClientOptions{Face: face, Transport: "sse"})
	if err != nil {
		unstream(w)
		return nil, nil, err
	}
	return link, c, nil
}

// unstream takes back the stream's headers from a response that was not
// started, so that it answers an error as JSON.
func unstream(w http.ResponseWriter) {
	w.Header().Del("Content-Type")
	w.Header().Del("X-Accel-Buffering")
}
