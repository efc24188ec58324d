package convapi

import (
	"bytes"
	"strconv"
	"strings"
)

// eventID is an SSE frame's id. Most session events are one frame, whose
// id is the event's seq ("7"). An event written as several frames (an
// assistant's message_end is message_added then generation_complete)
// numbers them "7.1", "7.2", …: every frame is a cursor of its own, so a
// client cut between two of them resumes with the first one's id and gets
// the rest, once. Read as decimals the ids still only increase on a
// stream ("6" < "7.1" < "7.2" < "8"): an event has at most maxParts
// frames. A bare seq means every frame of that event.
type eventID struct {
	seq  uint64
	part int // 0: the whole event; 1…maxParts: that many of its frames
}

// maxParts bounds the frames one session event becomes (the codec writes
// at most three), so a part is one decimal digit.
const maxParts = 9

// parseEventID reads a cursor: a seq, or a seq and a part.
func parseEventID(s string) (eventID, bool) {
	seq, part, dotted := strings.Cut(s, ".")
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		return eventID{}, false
	}
	if !dotted {
		return eventID{seq: n}, true
	}
	if len(part) != 1 || part[0] < '1' || part[0] > '0'+maxParts || n == 0 {
		return eventID{}, false
	}
	return eventID{seq: n, part: int(part[0] - '0')}, true
}

// after is the seq a subscription starts after: a cursor inside an event
// replays that event, whose frames up to the part are then dropped.
func (id eventID) after() uint64 {
	if id.part > 0 {
		return id.seq - 1
	}
	return id.seq
}

func (id eventID) appendTo(b []byte) []byte {
	b = strconv.AppendUint(b, id.seq, 10)
	if id.part > 0 {
		b = append(b, '.', byte('0'+id.part))
	}
	return b
}

func (id eventID) String() string { return string(id.appendTo(nil)) }

// numberParts gives each frame of an event written as several frames its
// part in the id ("id: 7" becomes "id: 7.1", "id: 7.2"). One frame keeps
// its bare seq.
func numberParts(f []byte, seq uint64) []byte {
	if bytes.Count(f, []byte("\n\n")) < 2 {
		return f
	}
	bare := strconv.AppendUint([]byte("id: "), seq, 10)
	bare = append(bare, '\n')
	out := make([]byte, 0, len(f)+8)
	part := 0
	for len(f) > 0 {
		end := bytes.Index(f, []byte("\n\n"))
		if end < 0 {
			out = append(out, f...)
			break
		}
		ev := f[:end+2]
		f = f[end+2:]
		part++
		if !bytes.HasPrefix(ev, bare) || part > maxParts {
			out = append(out, ev...) // not written by appendEvent: left alone
			continue
		}
		out = append(out, "id: "...)
		out = eventID{seq: seq, part: part}.appendTo(out)
		out = append(out, ev[len(bare)-1:]...)
	}
	return out
}

// dropParts removes from f the frames of event id.seq whose part is at
// most id.part: what a client resuming inside that event has already seen.
// An event of one frame carries its bare seq and no part: a cursor inside
// it ("7.1" for an event 7 that went out as "7", an id never issued, which
// a client or a proxy may still send) says its one frame was seen, so the
// frame goes too. The rule: "N.k" is every frame of N up to the k-th, and
// N had only as many as it had.
func dropParts(f []byte, id eventID) []byte {
	var out []byte
	rest := f
	for len(rest) > 0 {
		end := bytes.Index(rest, []byte("\n\n"))
		if end < 0 {
			out = append(out, rest...)
			break
		}
		ev := rest[:end+2]
		rest = rest[end+2:]
		if got, ok := frameID(ev); ok && got.seq == id.seq && got.part <= id.part {
			continue
		}
		out = append(out, ev...)
	}
	return out
}

// frameID reads the id line that opens one SSE frame.
func frameID(ev []byte) (eventID, bool) {
	if !bytes.HasPrefix(ev, []byte("id: ")) {
		return eventID{}, false
	}
	line := ev[4:]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	return parseEventID(string(line))
}
