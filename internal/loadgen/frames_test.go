package loadgen

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/valyala/fastjson"

	"github.com/agentd-dev/agentd/internal/jsonfield"
)

// frameType is a frame's type as a client's reader tells it.
func frameType(data []byte) []byte {
	var c client
	typ, _ := c.frameType(data)
	return typ
}

// TestEventOddFrames checks how the reader takes session events that are
// odd. agentd writes a seq as an integer, a sessionId as a string and a
// message's content as an array: a field of another type is a fault of
// the server's, counted as the field missing (a seq as a string, a
// fraction or beyond int64 is a gap, a number as a sessionId another
// session, a content that is one block no text). Escapes and lone
// surrogates decode alike in deltas and the final text; a frame that is
// not JSON has no session and no seq.
func TestEventOddFrames(t *testing.T) {
	tests := []struct {
		name   string
		sid    string
		frames []string
		want   map[string]int
	}{
		{"seq as a string", "s", []string{
			`{"type":"event","sessionId":"s","seq":1,"event":{"type":"agent_start"}}`,
			`{"type":"event","sessionId":"s","seq":"2","event":{"type":"agent_start"}}`,
		}, map[string]int{"event seq gap": 1}},
		{"seq beyond int64", "s", []string{
			`{"type":"event","sessionId":"s","seq":1,"event":{"type":"agent_start"}}`,
			`{"type":"event","sessionId":"s","seq":123456789012345678901234567890,"event":{"type":"agent_start"}}`,
		}, map[string]int{"event seq gap": 1}},
		{"seq a fraction", "s", []string{
			`{"type":"event","sessionId":"s","seq":1,"event":{"type":"agent_start"}}`,
			`{"type":"event","sessionId":"s","seq":2.9,"event":{"type":"agent_start"}}`,
		}, map[string]int{"event seq gap": 1}},
		{"sessionId a number", "5", []string{
			`{"type":"event","sessionId":5,"seq":1,"event":{"type":"agent_start"}}`,
		}, map[string]int{"event of another session": 1}},
		{"sessionId missing", "s", []string{
			`{"type":"event","seq":1,"event":{"type":"agent_start"}}`,
		}, map[string]int{"event of another session": 1}},
		{"escapes", "s", []string{
			`{"type":"event","sessionId":"s","seq":1,"event":{"type":"message_start","message":{"role":"assistant","content":[]}}}`,
			`{"type":"event","sessionId":"s","seq":2,"event":{"type":"message_update","assistantMessageEvent":{"type":"text_delta","contentIndex":0,"delta":"a\"b\\c\u00e9 \ud83d\ude00 \ud800"}}}`,
			`{"type":"event","sessionId":"s","seq":3,"event":{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"a\"b\\c\u00e9 \ud83d\ude00 \ufffd"}]}}}`,
		}, nil},
		{"content one block", "s", []string{
			`{"type":"event","sessionId":"s","seq":1,"event":{"type":"message_start","message":{"role":"assistant","content":[]}}}`,
			`{"type":"event","sessionId":"s","seq":2,"event":{"type":"message_update","assistantMessageEvent":{"type":"text_delta","contentIndex":0,"delta":"a\"b\\c\u00e9 \ud83d\ude00 \ud800"}}}`,
			`{"type":"event","sessionId":"s","seq":3,"event":{"type":"message_end","message":{"role":"assistant","content":{"type":"text","text":"a\"b\\c\u00e9 \ud83d\ude00 \ufffd"}}}}`,
		}, map[string]int{"wrong final message": 1}},
		{"not JSON", "s", []string{
			`{"type":"event","sessionId":"s","seq":1,"event":{"type":"agent_start"}}`,
			`{"type":"event","sessionId":"s","seq":2,`,
		}, map[string]int{"event of another session": 1, "event seq gap": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var faults tally
			c := &client{sid: tt.sid, opt: &clientOptions{answer: "a\"b\\cé 😀 \ufffd", delta: true}, faults: &faults}
			for _, f := range tt.frames {
				c.event([]byte(f))
			}
			n, kinds, samples := faults.result()
			if len(kinds) == 0 {
				kinds = nil
			}
			if !maps.Equal(kinds, tt.want) {
				t.Errorf("%d faults %v %q, want %v", n, kinds, samples, tt.want)
			}
		})
	}
}

// TestParseEventHead checks that a full-format message_update parsed only
// up to its "partial" reads as the whole frame does, and that frames of
// another shape, where the head would not, are parsed whole.
func TestParseEventHead(t *testing.T) {
	msg := benchMessage(50)
	long := strings.Repeat("x", maxEventHead)
	frames := []string{
		// agentd's layout: the head is enough.
		`{"type":"event","sessionId":"s","seq":7,"event":{"type":"message_update","assistantMessageEvent":{"type":"text_delta","contentIndex":0,"delta":"a\"b\\c,\"partial\":\u00e9 \ud800","partial":` + msg + `},"message":` + msg + `}}`,
		// The delta's text holds the key's bytes escaped: not a cut.
		`{"type":"event","sessionId":"s","seq":7,"event":{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"x\",\"partial\":1","partial":` + msg + `}}}`,
		// No delta before "partial": parsed whole.
		`{"type":"event","sessionId":"s","seq":7,"event":{"type":"message_update","assistantMessageEvent":{"type":"text_end","contentIndex":0,"partial":` + msg + `,"delta":"late"}}}`,
		// The session after the event: parsed whole.
		`{"type":"event","seq":7,"event":{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"d","partial":` + msg + `}},"sessionId":"late"}`,
		// "partial" at another depth.
		`{"type":"event","sessionId":"s","seq":7,"event":{"type":"message_update","partial":1,"assistantMessageEvent":{"type":"text_delta","delta":"d"}}}`,
		`{"type":"event","sessionId":"s","seq":7,"event":{"type":"message_update","x":{"y":{"z":1,"partial":2}},"assistantMessageEvent":{"type":"text_delta","delta":"d"}}}`,
		// Another event type with the same shape is parsed whole.
		`{"type":"event","sessionId":"s","seq":7,"event":{"type":"message_end","assistantMessageEvent":{"type":"text_delta","delta":"d","partial":1},"message":` + msg + `}}`,
		// A merged delta longer than the head looked at.
		`{"type":"event","sessionId":"s","seq":7,"event":{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"` + long + `","partial":` + msg + `}}}`,
		// Duplicate keys: the first counts, as in the whole frame.
		`{"type":"event","sessionId":"s","sessionId":"t","seq":7,"seq":8,"event":{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"1","delta":"2","partial":{}}}}`,
	}
	read := func(v *fastjson.Value) string {
		ame := v.Get("event", "assistantMessageEvent")
		return fmt.Sprintf("%q %d %q %q %q", jsonfield.String(v.Get("sessionId")), v.GetInt64("seq"), jsonfield.String(v.Get("event", "type")),
			jsonfield.String(ame.Get("type")), jsonfield.String(ame.Get("delta")))
	}
	var c client
	var whole jsonfield.Parser
	for i, f := range frames {
		got := read(c.parseEvent([]byte(f)))
		v, _ := whole.Parse([]byte(f))
		if want := read(v); got != want {
			t.Errorf("frame %d: read %s, the whole frame reads %s", i, got, want)
		}
	}
	// The first frame is the one the head is for.
	c.head = nil
	c.parseEvent([]byte(frames[0]))
	if len(c.head) == 0 || len(c.head) > 300 {
		t.Errorf("agentd's frame parsed from a head of %d bytes", len(c.head))
	}
	// What follows the head is not looked at (as gjson did not): a frame
	// cut after it reads as its head.
	cut := `{"type":"event","sessionId":"s","seq":7,"event":{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"d","partial":{`
	if got, want := read(c.parseEvent([]byte(cut))), `"s" 7 "message_update" "text_delta" "d"`; got != want {
		t.Errorf("a frame cut after its head reads %s, want %s", got, want)
	}
}
