package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd-dev/agentd/internal/jsonfield"
)

// sseOptions are what every event stream of a REST run shares.
type sseOptions struct {
	// timeout bounds the request until the connected event.
	timeout time.Duration
	// answer is the text of every assistant message the mock streams:
	// the tokens between a generation_started and its
	// generation_complete must join into it.
	answer string
	// readDelay is slept after every event read, until the bench stops
	// the server: a client slower than the model, whose queue grows in
	// the server (which joins its queued tokens).
	readDelay time.Duration
	faults    *tally
}

// Kinds of event a stream counts, by the event's type; every other type
// counts as sseOther.
const (
	sseProgress = iota
	sseStarted
	sseMessage
	sseComplete
	sseRunEnded
	sseTool
	ssePing
	sseConnected
	sseError
	sseOther
	numSSEKinds
)

var sseKindNames = [numSSEKinds]string{"generation_progress", "generation_started", "message_added", "generation_complete",
	"run_ended", "tool", "ping", "connected", "error", "other"}

func sseKindOf(typ string) int {
	switch typ {
	case "generation_progress":
		return sseProgress
	case "generation_started":
		return sseStarted
	case "message_added":
		return sseMessage
	case "generation_complete":
		return sseComplete
	case "run_ended":
		return sseRunEnded
	case "tool_pending", "tool_executing", "tool_output", "tool_complete":
		return sseTool
	case "ping":
		return ssePing
	case "connected":
		return sseConnected
	case "error", "interrupted":
		return sseError
	}
	return sseOther
}

// eventKey names one event of a conversation: a session event can become
// several SSE events, all with its seq, each of its own type.
type eventKey struct {
	seq uint64
	typ string
}

// sseStream is one client of GET /api/v2/conversations/{id}/events: a
// lean reader of the text/event-stream that counts what arrives and
// checks that every event comes once, in order. The counters are read
// while it runs; the rest is the reader's until readerDone.
type sseStream struct {
	conv, name string // the conversation, and who this is (for messages)
	opt        *sseOptions
	body       io.ReadCloser

	counts   [numSSEKinds]atomic.Int64
	bytes    atomic.Int64 // bytes of the stream's body
	tokens   atomic.Int64 // bytes of generation_progress text
	answers  atomic.Int64 // assistant messages whose streamed text was checked
	runEnds  atomic.Int64
	lastSeen atomic.Int64 // unix nanoseconds of the last event
	// ending says the bench is stopping the server or the stream: an
	// end from then on is expected.
	ending atomic.Bool

	// runEnded gets the outcome of every run_ended, for the driver that
	// waits on it; nil for a watcher.
	runEnded chan string

	connected  chan struct{} // closed at the connected event
	readerDone chan struct{}
	ctx        context.Context // the request's
	stop       context.CancelFunc

	// Set before connected is closed, read after.
	attachID string // the connected event's session_id
	startSeq uint64 // the connected event's seq: later events follow it

	mu    sync.Mutex
	keys  []eventKey // every event but progress and ping, as it came
	dead  error      // why the reader stopped
	early bool       // it stopped before the bench expected it

	// reader only
	lastSeq  uint64
	seen     map[eventKey]struct{}
	text     strings.Builder // the streamed text of the assistant message under way
	inAnswer bool
	json     jsonfield.Parser
}

// openSSE requests url as an event stream and waits for its connected
// event. runEnds, if positive, is the room for run_ended outcomes a
// driver will wait on. ctx bounds the request and, while it lasts, the
// reader.
func openSSE(ctx context.Context, hc *http.Client, url, conv, name string, runEnds int, o *sseOptions) (*sseStream, error) {
	rctx, stop := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		stop()
		return nil, fmt.Errorf("events request: %w", err)
	}
	req.Header.Set("Accept", "text/event-stream")
	// The response's headers come at once; the connected event is the
	// first thing in the body. Both are bounded by the timeout.
	t := time.AfterFunc(o.timeout, stop)
	resp, err := hc.Do(req)
	if err != nil {
		t.Stop()
		stop()
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/event-stream") {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		resp.Body.Close()
		t.Stop()
		stop()
		return nil, fmt.Errorf("GET %s: HTTP %d, Content-Type %q: %s", url, resp.StatusCode, ct, bytes.TrimSpace(b))
	}
	s := &sseStream{conv: conv, name: name, opt: o, body: resp.Body, connected: make(chan struct{}), readerDone: make(chan struct{}),
		ctx: rctx, stop: stop, seen: map[eventKey]struct{}{}}
	if runEnds > 0 {
		s.runEnded = make(chan string, runEnds)
	}
	go s.read()
	// No context bounds this wait: the timer does, by cancelling the
	// request, which ends the reader. A short stream can be read to its
	// end before the wait looks; it did connect, and its end is the
	// caller's to judge.
	err = waitAnswer(context.Background(), s.connected, s.readerDone)
	timedOut := !t.Stop()
	switch {
	case err == nil && !timedOut:
		return s, nil
	case err == nil:
		// The timeout fired as the event came: the request is cancelled.
		s.close()
		return nil, fmt.Errorf("no connected event within %s", o.timeout)
	}
	err = s.deadErr()
	s.close()
	if timedOut {
		return nil, fmt.Errorf("no connected event within %s: %w", o.timeout, err)
	}
	return nil, fmt.Errorf("stream ended before its connected event: %w", err)
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (s *sseStream) read() {
	defer close(s.readerDone)
	br := bufio.NewReaderSize(countingReader{s.body, &s.bytes}, 16<<10)
	var (
		id, data []byte
		hasID    bool
		pause    *time.Timer
	)
	if s.opt.readDelay > 0 {
		pause = time.NewTimer(time.Hour)
		defer pause.Stop()
	}
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A frame longer than the buffer: keep reading the line.
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err != nil {
			s.end(err)
			return
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			if data != nil {
				s.event(id, hasID, data)
				if pause != nil && !s.ending.Load() {
					pause.Reset(s.opt.readDelay)
					select {
					case <-pause.C:
					case <-s.ctx.Done():
					}
				}
			}
			id, data, hasID = id[:0], nil, false
		case line[0] == ':':
			// A comment: nothing.
		case bytes.HasPrefix(line, []byte("id:")):
			id, hasID = append(id[:0], bytes.TrimSpace(line[3:])...), true
		case bytes.HasPrefix(line, []byte("data:")):
			d := bytes.TrimPrefix(line[5:], []byte(" "))
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, d...)
		case bytes.HasPrefix(line, []byte("event:")):
			// EventSource.onmessage never sees such a frame.
			s.opt.faults.add("sse event line", fmt.Sprintf("%s of %s: %s", s.name, s.conv, prefix(line, 120)))
		default:
			s.opt.faults.add("sse bad line", fmt.Sprintf("%s of %s: %s", s.name, s.conv, prefix(line, 120)))
		}
	}
}

// seqOfID is the seq of a frame's id: "7" and "7.2" are both of seq 7.
func seqOfID(id []byte) []byte {
	seq, _, _ := bytes.Cut(id, []byte("."))
	return seq
}

// event takes one frame: its id (the seq) and its data.
func (s *sseStream) event(id []byte, hasID bool, data []byte) {
	s.lastSeen.Store(time.Now().UnixNano())
	v, _ := s.json.Parse(data) // nil if it is not JSON: every field is missing
	typ := jsonfield.String(v.Get("type"))
	kind := sseKindOf(typ)
	s.counts[kind].Add(1)
	fault := func(kind, msg string) {
		s.opt.faults.add(kind, fmt.Sprintf("%s of %s: %s", s.name, s.conv, msg))
	}
	if typ == "" {
		fault("sse event without a type", prefix(data, 120))
		return
	}
	var seq uint64
	if hasID {
		// An event written as several frames numbers them "<seq>.1",
		// "<seq>.2": the seq is before the dot.
		n, err := strconv.ParseUint(string(seqOfID(id)), 10, 64)
		if err != nil {
			fault("sse bad id", fmt.Sprintf("id %q", id))
			return
		}
		seq = n
	} else if typ != "ping" {
		// A ping before any event has no id to repeat; every event has
		// its seq.
		fault("sse event without an id", prefix(data, 120))
		return
	}
	if typ == "connected" {
		select {
		case <-s.connected:
			fault("sse connected twice", prefix(data, 120))
		default:
			s.attachID, s.startSeq, s.lastSeq = jsonfield.String(v.Get("session_id")), v.GetUint64("seq"), v.GetUint64("seq")
			close(s.connected)
		}
		return
	}
	select {
	case <-s.connected:
	default:
		fault("sse event before connected", prefix(data, 120))
	}
	switch {
	case seq < s.lastSeq:
		fault("sse event out of order", fmt.Sprintf("%s with seq %d after seq %d", typ, seq, s.lastSeq))
	case kind == sseProgress && seq == s.lastSeq:
		// A progress event's seq is its own (a lagging client's merged
		// one takes the newest of those it joins), so it always moves on.
		fault("sse event twice", fmt.Sprintf("%s with seq %d again", typ, seq))
	}
	s.lastSeq = max(s.lastSeq, seq)
	if kind == ssePing {
		return
	}
	if kind != sseProgress {
		k := eventKey{seq, typ}
		if _, dup := s.seen[k]; dup {
			fault("sse event twice", fmt.Sprintf("%s with seq %d again", typ, seq))
		} else {
			s.seen[k] = struct{}{}
			s.mu.Lock()
			s.keys = append(s.keys, k)
			s.mu.Unlock()
		}
	}
	switch typ {
	case "generation_started":
		s.text.Reset()
		s.inAnswer = true
	case "generation_progress":
		tok := jsonfield.String(v.Get("token"))
		s.tokens.Add(int64(len(tok)))
		s.text.WriteString(tok)
	case "generation_complete":
		// Tokens a lagging client's server merged still join into the
		// whole answer; one lost would not.
		if got := s.text.String(); !s.inAnswer {
			fault("sse generation_complete without generation_started", fmt.Sprintf("seq %d", seq))
		} else if got != s.opt.answer {
			fault("sse streamed text wrong", fmt.Sprintf("seq %d: the tokens joined are %q, want %q", seq, prefix([]byte(got), 80), prefix([]byte(s.opt.answer), 80)))
		} else {
			s.answers.Add(1)
		}
		s.inAnswer = false
	case "run_ended":
		s.runEnds.Add(1)
		out := jsonfield.String(v.Get("outcome"))
		if out != "completed" {
			fault("sse run not completed", fmt.Sprintf("run_ended %q at seq %d", out, seq))
		}
		if s.runEnded != nil {
			select {
			case s.runEnded <- out:
			default:
				fault("sse run_ended not asked for", fmt.Sprintf("seq %d", seq))
			}
		}
	case "error", "interrupted":
		fault("sse "+typ, prefix(data, 300))
	}
}

// end records why the reader stopped; an end before the bench expected
// one is a fault.
func (s *sseStream) end(err error) {
	early := !s.ending.Load()
	s.mu.Lock()
	s.dead, s.early = err, early
	s.mu.Unlock()
	select {
	case <-s.connected:
	default:
		return // openSSE reports it
	}
	if early {
		s.opt.faults.add("sse stream ended early", fmt.Sprintf("%s of %s: %v", s.name, s.conv, err))
	}
}

func (s *sseStream) deadErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dead
}

// eventKeys are the events received so far, progress and pings aside.
func (s *sseStream) eventKeys() []eventKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]eventKey(nil), s.keys...)
}

// endState is how the stream ended: "open", "eof" (the server ended the
// response) or the error; early says it ended before the bench expected.
func (s *sseStream) endState() (how string, early bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.dead == nil:
		return "open", false
	case errors.Is(s.dead, io.EOF):
		return "eof", s.early
	case errors.Is(s.dead, io.ErrUnexpectedEOF):
		return "cut", s.early
	case errors.Is(s.dead, context.Canceled):
		return "closed by the bench", s.early
	default:
		return "error", s.early
	}
}

// close ends the stream from the bench's side and waits for the reader.
func (s *sseStream) close() {
	s.ending.Store(true)
	s.stop()
	<-s.readerDone
	s.body.Close()
}
