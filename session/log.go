package session

import (
	"encoding/json"

	"github.com/agentd-dev/agentd/agent"
	"github.com/agentd-dev/agentd/llm"
	"github.com/agentd-dev/agentd/tool"
)

// Defaults of the event log's bounds.
const (
	DefaultEventLogSize  = 4096
	DefaultEventLogBytes = 16 << 20
)

// eventLog keeps the most recent events of a session in a ring, so a
// subscriber that reconnects can ask for everything after the last seq it
// saw. It is bounded in events and in bytes: whichever bound is reached
// first drops the oldest events, so no kind of event can make it grow
// without limit. The newest event is always kept, however large.
type eventLog struct {
	buf      []logged // grows up to max, then wraps
	start    int      // index of the oldest event
	n        int      // events in buf
	max      int
	maxBytes int
	bytes    int
	head     uint64 // seq of the last event added (the first seq - 1 before any)
}

type logged struct {
	ev   Event
	size int
}

func newEventLog(size, maxBytes int, firstSeq uint64) *eventLog {
	if size <= 0 {
		size = DefaultEventLogSize
	}
	if maxBytes <= 0 {
		maxBytes = DefaultEventLogBytes
	}
	// The ring grows as events come: an idle session loaded from disk
	// holds no event memory at all.
	return &eventLog{max: size, maxBytes: maxBytes, head: firstSeq}
}

func (l *eventLog) add(ev Event) {
	l.head = ev.Seq
	size := eventSize(ev)
	for l.n > 0 && (l.n >= l.max || l.bytes+size > l.maxBytes) {
		l.bytes -= l.buf[l.start].size
		l.buf[l.start] = logged{} // release what the event refers to
		l.start = (l.start + 1) % len(l.buf)
		l.n--
	}
	if l.n == len(l.buf) {
		l.grow()
	}
	l.buf[(l.start+l.n)%len(l.buf)] = logged{ev, size}
	l.n++
	l.bytes += size
}

// grow enlarges the full ring (by doubling, up to max), oldest first.
func (l *eventLog) grow() {
	c := min(max(2*len(l.buf), 16), l.max)
	buf := make([]logged, c)
	for i := 0; i < l.n; i++ {
		buf[i] = l.buf[(l.start+i)%len(l.buf)]
	}
	l.buf, l.start = buf, 0
}

// since returns the events with Seq > after. ok is false when the log
// cannot answer: events after `after` have already been dropped (the
// cursor is too old), or `after` is beyond the last event (a cursor this
// session never issued). The caller then needs a snapshot instead.
func (l *eventLog) since(after uint64) (out []Event, ok bool) {
	if after > l.head {
		return nil, false
	}
	oldest := l.head + 1 // with nothing logged, only the head itself answers
	if l.n > 0 {
		oldest = l.buf[l.start].ev.Seq
	}
	if after+1 < oldest {
		return nil, false
	}
	for i := 0; i < l.n; i++ {
		ev := l.buf[(l.start+i)%len(l.buf)].ev
		if ev.Seq > after {
			out = append(out, ev)
		}
	}
	return out, true
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
