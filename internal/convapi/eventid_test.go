package convapi

import (
	"strconv"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm/faux"
)

// before orders ids as a stream writes them: "6" < "7.1" < "7.2" < "8",
// and a bare seq is after every part of its event.
func (id eventID) before(o eventID) bool {
	if id.seq != o.seq {
		return id.seq < o.seq
	}
	p, q := id.part, o.part
	if p == 0 {
		p = maxParts + 1
	}
	if q == 0 {
		q = maxParts + 1
	}
	return p < q
}

func TestEventIDParse(t *testing.T) {
	tests := []struct {
		in   string
		want eventID
		ok   bool
	}{
		{"0", eventID{}, true},
		{"7", eventID{seq: 7}, true},
		{"7.1", eventID{seq: 7, part: 1}, true},
		{"7.9", eventID{seq: 7, part: 9}, true},
		{"7.0", eventID{}, false},
		{"7.10", eventID{}, false},
		{"0.1", eventID{}, false},
		{"7.", eventID{}, false},
		{".1", eventID{}, false},
		{"-1", eventID{}, false},
		{"7.1.1", eventID{}, false},
		{"x", eventID{}, false},
	}
	for _, tt := range tests {
		got, ok := parseEventID(tt.in)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("parseEventID(%q) = %+v, %v; want %+v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
		if ok && got.String() != tt.in {
			t.Errorf("parseEventID(%q).String() = %q", tt.in, got)
		}
	}
}

func TestNumberAndDropParts(t *testing.T) {
	one := appendEvent(nil, 7, map[string]string{"type": "a"})
	three := appendEvent(appendEvent(appendEvent(nil, 7, map[string]string{"type": "a"}), 7, map[string]string{"type": "b"}), 7, map[string]string{"type": "c"})
	if got := string(numberParts(one, 7)); got != string(one) {
		t.Errorf("one frame renumbered: %q", got)
	}
	numbered := numberParts(three, 7)
	want := "id: 7.1\ndata: {\"type\":\"a\"}\n\nid: 7.2\ndata: {\"type\":\"b\"}\n\nid: 7.3\ndata: {\"type\":\"c\"}\n\n"
	if string(numbered) != want {
		t.Fatalf("numberParts = %q, want %q", numbered, want)
	}
	drops := []struct {
		cursor eventID
		want   string
	}{
		{eventID{seq: 7, part: 1}, "id: 7.2\ndata: {\"type\":\"b\"}\n\nid: 7.3\ndata: {\"type\":\"c\"}\n\n"},
		{eventID{seq: 7, part: 2}, "id: 7.3\ndata: {\"type\":\"c\"}\n\n"},
		{eventID{seq: 7, part: 3}, ""},
		{eventID{seq: 6, part: 2}, want},
	}
	for _, d := range drops {
		if got := string(dropParts(numbered, d.cursor)); got != d.want {
			t.Errorf("dropParts(%s) = %q, want %q", d.cursor, got, d.want)
		}
	}
	// An event that went out as one frame ("7"), resumed from an id the
	// server never issued for it ("7.1", "7.9"): its one frame was seen.
	for _, d := range []struct {
		cursor eventID
		want   string
	}{
		{eventID{seq: 7, part: 1}, ""},
		{eventID{seq: 7, part: 9}, ""},
		{eventID{seq: 6, part: 1}, string(one)},
		{eventID{seq: 8, part: 1}, string(one)},
	} {
		if got := string(dropParts(one, d.cursor)); got != d.want {
			t.Errorf("dropParts(one frame of 7, %s) = %q, want %q", d.cursor, got, d.want)
		}
	}
}

func FuzzEventID(f *testing.F) {
	for _, s := range []string{"0", "7", "7.1", "7.9", "18446744073709551615.3", "7.", "7.01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, ok := parseEventID(s)
		if !ok {
			return
		}
		if id.part < 0 || id.part > maxParts || (id.part > 0 && id.seq == 0) {
			t.Fatalf("parseEventID(%q) = %+v", s, id)
		}
		if id.after() > id.seq {
			t.Fatalf("%q resumes after %d", s, id.after())
		}
		back, ok := parseEventID(id.String())
		if !ok || back != id {
			t.Fatalf("%q round-trips to %q", s, id)
		}
	})
}

// An assistant's message_end is two frames (message_added,
// generation_complete), each its own id: a client cut between them
// resumes with the first one's id and gets the second, and nothing of
// the event twice, by header or by ?after=.
func TestResumeInsideAnEvent(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	sid := fx.create("part", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "go"}}})
	w := fx.open("/api/v2/conversations/part/events?session_id=" + sid)
	w.next("connected")
	fx.faux.Push(faux.Response{Text: "the answer"})
	fx.ok("POST", "/api/v2/conversations/part/step", map[string]any{"session_id": sid})
	added := w.next("message_added")
	done := w.next("generation_complete")
	w.next("run_ended")
	a, _ := parseEventID(added.id)
	d, _ := parseEventID(done.id)
	if a.part != 1 || d.part != 2 || a.seq != d.seq {
		t.Fatalf("message_added id %q, generation_complete id %q: want <seq>.1 and <seq>.2", added.id, done.id)
	}
	all := ids(w.snapshot())
	// oneFrame is the id of the last event before message_added that
	// went out as one frame: a bare seq.
	oneFrame := ""
	for _, e := range w.snapshot() {
		if e.id == added.id {
			break
		}
		if e.typ() != "ping" && e.typ() != "connected" && e.id != "" && !strings.Contains(e.id, ".") {
			oneFrame = e.id
		}
	}
	if oneFrame == "" {
		t.Fatalf("no one-frame event before message_added:\n%s", w.dump())
	}
	tests := []struct {
		name, cursor string
		how          string
	}{
		{"between message_added and generation_complete", added.id, "Last-Event-ID"},
		{"between them, by after", added.id, "after"},
		{"after both", done.id, "Last-Event-ID"},
		{"the bare seq: the whole event", d.String()[:strings.IndexByte(d.String(), '.')], "Last-Event-ID"},
		// An id the server never issued: a part of an event that went
		// out as one frame. Its one frame counts as seen.
		{"a part of a one-frame event", oneFrame + ".1", "Last-Event-ID"},
		{"a part of a one-frame event, by after", oneFrame + ".1", "after"},
		{"the last part of a one-frame event", oneFrame + ".9", "Last-Event-ID"},
		{"past the last part of a two-frame event", strconv.FormatUint(d.seq, 10) + ".3", "Last-Event-ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b *stream
			if tt.how == "after" {
				b = fx.open("/api/v2/conversations/part/events?session_id=" + sid + "&after=" + tt.cursor)
			} else {
				b = fx.open("/api/v2/conversations/part/events?session_id="+sid, "Last-Event-ID", tt.cursor)
			}
			conn := b.next("connected")
			b.next("run_ended")
			if conn.id != tt.cursor || conn.m["resumed"] != true {
				t.Errorf("connected id %q resumed %v, want the cursor %q, resumed", conn.id, conn.m["resumed"], tt.cursor)
			}
			cur, _ := parseEventID(tt.cursor)
			if cur.part > 0 && (cur.seq != a.seq || cur.part > 2) {
				// "N.k" past an event's last frame is all of N.
				cur.part = 0
			}
			var want []string
			for i, e := range w.snapshot() {
				_ = i
				if e.typ() == "ping" || e.typ() == "connected" {
					continue
				}
				if id, _ := parseEventID(e.id); cur.before(id) {
					want = append(want, e.id+":"+e.typ())
				}
			}
			if got := ids(b.snapshot()); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("resumed at %s:\n  got  %v\n  want %v (of %v)", tt.cursor, got, want, all)
			}
		})
	}
}
