package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fastjson"

	"github.com/agentd-dev/agentd/internal/jsonfield"
	"github.com/agentd-dev/agentd/internal/piclient"
)

// clientOptions are what every connection of a run shares.
type clientOptions struct {
	// timeout bounds the dial and the wait for server_ready.
	timeout time.Duration
	// readDelay is slept after every frame read: a client that reads
	// slower than the model writes, so that the server's queue for it
	// grows.
	readDelay time.Duration
	// answer is the text of every assistant message the mock streams;
	// each message_end must carry it, however slowly the client reads.
	answer string
	// delta: the server sends text deltas only, so the deltas of a
	// message must add up to its final text. In the full format a server
	// may let a newer message_update supersede older ones for a client
	// that fell behind, so there only the final text is checked.
	delta bool
	// faults collects the protocol problems the readers see.
	faults *tally
}

// client is one WebSocket connection driving one session: a
// piclient.Conn, whose frames the client counts and checks. The
// connection's reader is started by dial and stopped and waited for by
// close.
type client struct {
	conn *piclient.Conn
	sid  string // the session this connection creates and drives ("" for the bench's own); fixed before the reader starts
	opt  *clientOptions

	frames    atomic.Int64 // every frame received
	bytes     atomic.Int64 // their payload bytes
	events    atomic.Int64 // session `event` frames
	merged    atomic.Int64 // frames that arrived with earlier deltas merged into them
	agentEnds atomic.Int64 // agent_end events of the own session
	answers   atomic.Int64 // assistant message_end events checked against the answer
	shutdown  atomic.Bool  // server_shutdown seen
	hurry     atomic.Bool  // read at full speed from now on: the measured phases are over
	faults    *tally       // protocol problems the reader sees

	ctx      context.Context  // the dial's: a pause between frames ends with it
	pause    *time.Timer      // reader only: the read delay
	lastSeq  int64            // reader only
	streamed strings.Builder  // reader only: the text deltas of the assistant message being streamed
	json     jsonfield.Parser // reader only: every event frame read is parsed with it
	head     []byte           // reader only: parseEvent's copy of a frame's head
}

// dial connects to url and waits for server_ready. ctx bounds the dial
// and the wait, and, while it lasts, the connection.
func dial(ctx context.Context, hc *http.Client, url, sid string, o *clientOptions) (*client, error) {
	c := &client{sid: sid, opt: o, faults: o.faults, ctx: ctx}
	if o.readDelay > 0 {
		c.pause = time.NewTimer(time.Hour)
		c.pause.Stop()
	}
	conn, err := piclient.Dial(ctx, url, piclient.Options{HTTPClient: hc, Timeout: o.timeout, Until: ctx, Frame: c.frame,
		NotReady: func(typ []byte) {
			c.faults.add("first frame not server_ready", fmt.Sprintf("session %s: first frame is %q, not server_ready", c.sid, typ))
		}})
	if err != nil {
		return nil, err
	}
	c.conn = conn
	return c, nil
}

// frame counts and checks one frame, and then, for a slow client, waits
// its read delay.
func (c *client) frame(f piclient.Frame) {
	c.frames.Add(1)
	c.bytes.Add(int64(len(f.Data)))
	switch string(f.Type) {
	case "response":
		if !f.Delivered {
			c.faults.add("unmatched response", "response to no pending command: "+prefix(f.Data, 200))
		}
	case "event":
		c.event(f.Data) // agentd's event frames start with their type: never parsed yet
	case "server_shutdown":
		c.shutdown.Store(true)
	case "command_accepted", "command_started", "command_finished", "session_created", "session_deleted", "server_ready":
	case "":
		c.faults.add("frame without a type", "frame without a type: "+prefix(f.Data, 120))
	}
	if c.pause != nil && !c.hurry.Load() {
		c.pause.Reset(c.opt.readDelay)
		select {
		case <-c.pause.C:
		case <-c.ctx.Done():
			c.pause.Stop()
		}
	}
}

// event checks a session event: a connection subscribed to one session
// must see that session's events only, numbered without gaps, and every
// assistant message must end with the mock's answer (in the delta format
// its deltas must add up to it too), however slowly this client reads.
func (c *client) event(data []byte) {
	if c.sid == "" { // the bench's own connection: its sessions are idle
		c.events.Add(1)
		return
	}
	v := c.parseEvent(data)
	ev := v.Get("event")
	ame := ev.Get("assistantMessageEvent")
	sid, evType, ameType := jsonfield.String(v.Get("sessionId")), jsonfield.String(ev.Get("type")), jsonfield.String(ame.Get("type"))
	if sid != c.sid {
		c.faults.add("event of another session", fmt.Sprintf("event of session %q on the connection of %q", sid, c.sid))
	}
	seq := v.GetInt64("seq")
	// A client that fell behind gets the deltas of one content block
	// merged into one frame with the newest seq: a gap closed by a delta
	// is that (the text check below proves nothing was lost); any other
	// gap is a lost event.
	merged := evType == "message_update" && strings.HasSuffix(ameType, "_delta")
	if c.lastSeq != 0 && (seq <= c.lastSeq || (seq != c.lastSeq+1 && !merged)) {
		c.faults.add("event seq gap", fmt.Sprintf("session %s: event seq %d after %d", sid, seq, c.lastSeq))
	}
	// A merged frame delivers every event it stands for.
	if seq != c.lastSeq+1 && merged && c.lastSeq != 0 && seq > c.lastSeq {
		c.merged.Add(1)
		c.events.Add(seq - c.lastSeq)
	} else {
		c.events.Add(1)
	}
	c.lastSeq = seq
	switch evType {
	case "agent_end":
		c.agentEnds.Add(1)
	case "message_start":
		c.streamed.Reset()
	case "message_update":
		if ameType == "text_delta" {
			c.streamed.Write(ame.GetStringBytes("delta")) // the builder copies it
		}
	case "message_end":
		c.checkAnswer(ev.Get("message"))
	}
}

// parseEvent parses a session event frame; nil if it is not JSON (every
// field is then missing). A full-format message_update carries the
// partial message twice after the fields event reads, in agentd's
// layout: {"type":"event","sessionId":…,"seq":…,"event":{"type":…,
// "assistantMessageEvent":{"type":…,"contentIndex":…,"delta":…,
// "partial":…},"message":…}}. Of such a frame only the head before
// "partial" is parsed, closed with }}}: a parse that succeeds cut it at
// that depth (the key cannot occur inside a string, whose quotes are
// escaped), and if every field event reads of it is there, those are
// the frame's own first ones. Any other frame is parsed whole.
func (c *client) parseEvent(data []byte) *fastjson.Value {
	head := data[:min(len(data), maxEventHead)]
	if i := bytes.Index(head, []byte(`,"partial":`)); i > 0 {
		c.head = append(append(c.head[:0], data[:i]...), "}}}"...)
		if v, err := c.json.Parse(c.head); err == nil {
			ame := v.Get("event", "assistantMessageEvent")
			if jsonfield.String(v.Get("event", "type")) == "message_update" && v.Get("sessionId") != nil && v.Get("seq") != nil &&
				ame.Get("type") != nil && ame.Get("delta") != nil {
				return v
			}
		}
	}
	v, _ := c.json.Parse(data)
	return v
}

// maxEventHead is how far parseEvent looks for "partial": a delta merged
// for a client that fell behind may be longer, and is parsed whole.
const maxEventHead = 1 << 10

// checkAnswer compares the message of an assistant message_end with the
// mock's answer.
func (c *client) checkAnswer(m *fastjson.Value) {
	if jsonfield.String(m.Get("role")) != "assistant" {
		return
	}
	c.answers.Add(1)
	var text strings.Builder
	for _, b := range m.GetArray("content") {
		if jsonfield.String(b.Get("type")) == "text" {
			text.Write(b.GetStringBytes("text"))
		}
	}
	if got := text.String(); got != c.opt.answer {
		c.faults.add("wrong final message", fmt.Sprintf("session %s: message_end text is %d bytes %q, want the mock's %d bytes %q",
			c.sid, len(got), prefix([]byte(got), 60), len(c.opt.answer), prefix([]byte(c.opt.answer), 60)))
	}
	if c.opt.delta && c.streamed.String() != c.opt.answer {
		c.faults.add("deltas do not add up", fmt.Sprintf("session %s: the text deltas add up to %d bytes %q, the answer is %d bytes",
			c.sid, c.streamed.Len(), prefix([]byte(c.streamed.String()), 60), len(c.opt.answer)))
	}
	c.streamed.Reset()
}

// call sends cmd with id and waits for its response, with the latency
// from just before the write to the reader receiving the response frame.
func (c *client) call(ctx context.Context, id string, cmd map[string]any) (piclient.Reply, time.Duration, error) {
	return c.conn.Call(ctx, id, cmd)
}

// close says goodbye, stops the reader and waits for it. A slow reader
// reads what is left at full speed so the close frame reaches it in time.
func (c *client) close() {
	c.hurry.Store(true)
	c.conn.Close("bench done")
}

// frameType is a frame's "type" (piclient.FrameType with the client's
// parser).
func (c *client) frameType(data []byte) ([]byte, *fastjson.Value) {
	return piclient.FrameType(&c.json, data)
}

func prefix(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "..."
}
