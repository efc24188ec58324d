package session

// eventLog keeps the most recent events of a session in a ring, so a
// subscriber that reconnects can ask for everything after the last seq it
// saw.
type eventLog struct {
	buf   []Event // grows to max, then wraps
	max   int
	start int    // index of the oldest event once wrapping
	n     int    // events in buf
	head  uint64 // seq of the last event added (the first seq - 1 before any)
}

func newEventLog(size int, firstSeq uint64) *eventLog {
	if size <= 0 {
		size = 4096
	}
	// The ring grows as events come: an idle session loaded from disk
	// holds no event memory at all.
	return &eventLog{max: size, head: firstSeq}
}

func (l *eventLog) add(ev Event) {
	l.head = ev.Seq
	if len(l.buf) < l.max {
		l.buf = append(l.buf, ev)
		l.n++
		return
	}
	l.buf[l.start] = ev
	l.start = (l.start + 1) % len(l.buf)
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
		oldest = l.buf[l.start].Seq
	}
	if after+1 < oldest {
		return nil, false
	}
	for i := 0; i < l.n; i++ {
		ev := l.buf[(l.start+i)%len(l.buf)]
		if ev.Seq > after {
			out = append(out, ev)
		}
	}
	return out, true
}
