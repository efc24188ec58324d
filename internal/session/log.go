package session

import (
	"encoding/json"
	"time"
	"unsafe"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/tool"
)

// Defaults of the event log's bounds.
const (
	DefaultEventLogSize  = 4096
	DefaultEventLogBytes = 16 << 20
)

// eventLog keeps the most recent events of a session, so a subscriber
// that reconnects can ask for everything after the last seq it saw. It is
// bounded in events and in bytes: whichever bound is reached first drops
// the oldest events, so no kind of event can make it grow without limit.
// The newest event is always kept, however large.
//
// Most events of a session are message_update deltas, a few bytes each,
// thousands per answer. The log keeps those compactly: the delta's text
// appended to one buffer shared by all of them, and an 8-byte entry that
// says which kind of delta it was, for which content block, how long it
// is and when it came. Every other event is kept whole (its log copy, see
// logCopy). A replay rebuilds the deltas as the events the log held
// before: a message_update with the delta and no partial message.
//
// The seqs of the logged events are consecutive (emit numbers them one by
// one), so an entry's seq is its position.
type eventLog struct {
	entries ring[logEntry]   // one per event, oldest first
	whole   ring[wholeEvent] // the events kept whole, oldest first
	// text holds the text of the logged deltas from textStart on, oldest
	// first; dropped deltas leave their bytes before textStart until the
	// buffer is compacted.
	text      []byte
	textStart int

	max      int
	maxBytes int
	bytes    int
	head     uint64 // seq of the last event added (the first seq - 1 before any)
	// Times of the oldest and the newest entry, as a replay gives them: a
	// delta's time is the previous entry's plus its entry's milliseconds.
	first, last time.Time
}

// logEntry is one logged event: a delta, or a reference to the next event
// kept whole.
type logEntry struct {
	n     uint16 // bytes of the delta's text
	ms    uint16 // milliseconds after the previous entry
	index uint16 // the delta's content index
	kind  logKind
}

type logKind uint8

const (
	logWhole logKind = iota
	logText
	logThinking
	logToolCall
)

// entryBytes is what the log counts for a delta besides its text.
const entryBytes = int(unsafe.Sizeof(logEntry{}))

type wholeEvent struct {
	ev   *Event
	size int
}

func newEventLog(size, maxBytes int, firstSeq uint64) *eventLog {
	if size <= 0 {
		size = DefaultEventLogSize
	}
	if maxBytes <= 0 {
		maxBytes = DefaultEventLogBytes
	}
	// The log grows as events come: an idle session loaded from disk
	// holds no event memory at all.
	return &eventLog{max: size, maxBytes: maxBytes, head: firstSeq}
}

// add logs ev as emitted, live partial message and all: the log keeps
// its own copy of what it needs.
func (l *eventLog) add(ev Event) {
	if l.entries.n > 0 && ev.Seq != l.head+1 {
		// Not the next seq: only a log that starts over stays a run
		// of consecutive seqs. No caller does this.
		*l = eventLog{max: l.max, maxBytes: l.maxBytes}
	}
	l.head = ev.Seq
	e, ok := l.delta(ev)
	size := entryBytes + int(e.n)
	var whole *Event
	if !ok {
		c := logCopy(ev)
		whole, size = &c, eventSize(c)
	}
	for l.entries.n > 0 && (l.entries.n >= l.max || l.bytes+size > l.maxBytes) {
		l.drop()
	}
	if whole != nil {
		l.whole.push(wholeEvent{whole, size}, l.max)
		l.last = ev.Time
	} else {
		l.text = append(l.text, ev.Agent.Update.Delta...)
		l.last = l.last.Add(time.Duration(e.ms) * time.Millisecond)
	}
	if l.entries.n == 0 {
		l.first = l.last
	}
	l.entries.push(e, l.max)
	l.bytes += size
}

// delta returns the entry of ev when ev is a message_update that carries
// a delta and nothing else, as the agent loop emits them, and the entry
// can hold it; its replay is then exactly ev's log copy (with a time
// within half a millisecond of ev's).
func (l *eventLog) delta(ev Event) (logEntry, bool) {
	a := ev.Agent
	if ev.Type != EventType(agent.EventMessageUpdate) || a == nil || a.Update == nil {
		return logEntry{}, false
	}
	u := a.Update
	var kind logKind
	switch u.Type {
	case llm.EventTextDelta:
		kind = logText
	case llm.EventThinkingDelta:
		kind = logThinking
	case llm.EventToolCallDelta:
		kind = logToolCall
	default:
		return logEntry{}, false
	}
	if len(u.Delta) > 0xffff || u.ContentIndex < 0 || u.ContentIndex > 0xffff || u.Content != "" || u.ToolCall != nil || u.Reason != "" {
		return logEntry{}, false
	}
	if a.Type != agent.EventMessageUpdate || a.ToolResults != nil || a.Messages != nil || a.ToolCallID != "" || a.ToolName != "" ||
		a.Args != nil || a.Result != nil || a.Partial != nil || a.IsError || a.Steering != nil || a.FollowUp != nil || a.Err != nil {
		return logEntry{}, false
	}
	if ev != (Event{Seq: ev.Seq, Time: ev.Time, Type: ev.Type, Agent: a}) {
		return logEntry{}, false
	}
	// Rounded from the previous entry's time as a replay gives it, so
	// the error never adds up along a stream: that time is within half a
	// millisecond of the true one, possibly after this event's.
	d := ev.Time.Sub(l.last) + time.Millisecond/2
	if d < 0 || d >= (0xffff+1)*time.Millisecond {
		return logEntry{}, false
	}
	return logEntry{n: uint16(len(u.Delta)), ms: uint16(d / time.Millisecond), index: uint16(u.ContentIndex), kind: kind}, true
}

// drop removes the oldest event.
func (l *eventLog) drop() {
	e := l.entries.pop()
	if e.kind == logWhole {
		l.bytes -= l.whole.pop().size
	} else {
		l.bytes -= entryBytes + int(e.n)
		l.textStart += int(e.n)
		l.compactText()
	}
	if l.entries.n > 0 {
		if next := l.entries.at(0); next.kind == logWhole {
			l.first = l.whole.at(0).ev.Time
		} else {
			l.first = l.first.Add(time.Duration(next.ms) * time.Millisecond)
		}
	}
}

// keepTextBuffer is the capacity of a text buffer the log keeps however
// little of it is in use.
const keepTextBuffer = 16 << 10

// compactText moves the live text to the front of its buffer once the
// dropped text before it outweighs it, so the buffer stays within about
// twice what the log holds and each byte is moved at most once per byte
// dropped. A buffer far larger than that (one huge message long gone) is
// given back.
func (l *eventLog) compactText() {
	live := len(l.text) - l.textStart
	switch {
	case live == 0 && cap(l.text) > keepTextBuffer:
		l.text = nil
	case live == 0:
		l.text = l.text[:0]
	case l.textStart < live || l.textStart < 4<<10:
		return
	case cap(l.text) > keepTextBuffer && cap(l.text) > 8*live:
		l.text = append(make([]byte, 0, 2*live), l.text[l.textStart:]...)
	default:
		l.text = l.text[:copy(l.text, l.text[l.textStart:])]
	}
	l.textStart = 0
}

// since returns the events with Seq > after. ok is false when the log
// cannot answer: events after `after` have already been dropped (the
// cursor is too old), or `after` is beyond the last event (a cursor this
// session never issued). The caller then needs a snapshot instead.
func (l *eventLog) since(after uint64) (out []Event, ok bool) {
	if after > l.head {
		return nil, false
	}
	n := l.entries.n
	oldest := l.head + 1 - uint64(n) // with nothing logged, only the head itself answers
	if after+1 < oldest {
		return nil, false
	}
	skip := int(after + 1 - oldest)
	if skip == n {
		return nil, true
	}
	// Find the time, the text and the whole event where the replay starts.
	var t time.Time
	off, w, deltas := l.textStart, 0, 0
	for i := 0; i < skip; i++ {
		e := l.entries.at(i)
		t = l.time(i, e, t, w)
		if e.kind == logWhole {
			w++
		} else {
			off += int(e.n)
		}
	}
	for i := skip; i < n; i++ {
		if l.entries.at(i).kind != logWhole {
			deltas++
		}
	}
	// The replayed deltas share three allocations: their agent events,
	// their stream events and their text.
	agents := make([]agent.Event, deltas)
	updates := make([]llm.Event, deltas)
	var text string
	if deltas > 0 {
		text = string(l.text[off:])
	}
	out = make([]Event, 0, n-skip)
	pos := 0
	for i := skip; i < n; i++ {
		e := l.entries.at(i)
		t = l.time(i, e, t, w)
		if e.kind == logWhole {
			out = append(out, *l.whole.at(w).ev)
			w++
			continue
		}
		u := &updates[0]
		u.Type, u.ContentIndex, u.Delta = e.kind.eventType(), int(e.index), text[pos:pos+int(e.n)]
		a := &agents[0]
		a.Type, a.Update = agent.EventMessageUpdate, u
		updates, agents, pos = updates[1:], agents[1:], pos+int(e.n)
		out = append(out, Event{Seq: oldest + uint64(i), Time: t, Type: EventType(agent.EventMessageUpdate), Agent: a})
	}
	return out, true
}

// time is the time of the i-th oldest entry e, given the time of the one
// before it and the index of the next whole event.
func (l *eventLog) time(i int, e *logEntry, prev time.Time, w int) time.Time {
	switch {
	case e.kind == logWhole:
		return l.whole.at(w).ev.Time
	case i == 0:
		return l.first
	default:
		return prev.Add(time.Duration(e.ms) * time.Millisecond)
	}
}

func (k logKind) eventType() llm.EventType {
	switch k {
	case logText:
		return llm.EventTextDelta
	case logThinking:
		return llm.EventThinkingDelta
	default:
		return llm.EventToolCallDelta
	}
}

// ring is a queue that grows by doubling, up to a limit, and then wraps.
type ring[T any] struct {
	buf   []T
	start int // index of the oldest element
	n     int // elements in buf
}

// push appends v; the caller keeps n below limit.
func (r *ring[T]) push(v T, limit int) {
	if r.n == len(r.buf) {
		c := min(max(2*len(r.buf), 16), limit)
		buf := make([]T, c)
		for i := 0; i < r.n; i++ {
			buf[i] = *r.at(i)
		}
		r.buf, r.start = buf, 0
	}
	r.n++
	*r.at(r.n - 1) = v
}

// pop removes and returns the oldest element.
func (r *ring[T]) pop() T {
	v := r.buf[r.start]
	var zero T
	r.buf[r.start] = zero // release what the element refers to
	r.start++
	if r.start == len(r.buf) {
		r.start = 0
	}
	r.n--
	return v
}

// at returns the i-th oldest element, i < n.
func (r *ring[T]) at(i int) *T {
	i += r.start
	if i >= len(r.buf) {
		i -= len(r.buf)
	}
	return &r.buf[i]
}

// Approximate fixed costs: an Event with its agent.Event, and a message
// or content block, whatever they carry.
const (
	eventOverhead   = 512
	messageOverhead = 256
)

// eventSize estimates the bytes a logged event keeps alive. Messages it
// shares with the conversation are counted too: once the conversation
// drops them (compaction, a new session), the log is what holds them.
func eventSize(ev Event) int {
	n := eventOverhead + len(ev.ErrorMessage) + len(ev.FinalError) + len(ev.Name) + len(ev.SessionID) + len(ev.SessionFile)
	if ev.Compaction != nil {
		n += len(ev.Compaction.Summary) + len(ev.Compaction.FirstKeptEntryID)
	}
	if c := ev.Config; c != nil {
		for _, ts := range [][]string{c.Tools, c.Grants.Tools} {
			for _, t := range ts {
				n += 16 + len(t)
			}
		}
	}
	a := ev.Agent
	if a == nil {
		return n
	}
	if a.Message != nil {
		n += messageSize(a.Message)
	}
	for _, m := range a.ToolResults {
		n += messageSize(m)
	}
	for _, m := range a.Messages {
		n += messageSize(m)
	}
	if u := a.Update; u != nil {
		n += len(u.Delta) + len(u.Content)
		if u.ToolCall != nil {
			n += len(u.ToolCall.Arguments) + len(u.ToolCall.Name) + len(u.ToolCall.ID)
		}
	}
	n += len(a.ToolCallID) + len(a.ToolName) + len(a.Args) + resultSize(a.Result) + resultSize(a.Partial)
	for _, s := range a.Steering {
		n += 16 + len(s)
	}
	for _, s := range a.FollowUp {
		n += 16 + len(s)
	}
	return n
}

func messageSize(m *llm.Message) int {
	return messageOverhead + agent.MessageSize(m)
}

func resultSize(r *tool.Result) int {
	if r == nil {
		return 0
	}
	n := 0
	for i := range r.Content {
		c := &r.Content[i]
		n += messageOverhead + len(c.Text) + len(c.Data)
	}
	if d, ok := r.Details.(json.RawMessage); ok {
		n += len(d)
	}
	return n
}
