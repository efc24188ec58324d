package loadgen

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// benchMessage is an assistant message as agentd writes it, words long.
func benchMessage(words int) string {
	var text strings.Builder
	for i := range words {
		fmt.Fprintf(&text, "word%d ", i)
	}
	return `{"role":"assistant","content":[{"type":"text","text":"` + text.String() + `"}],"api":"openai-completions","provider":"mock","model":"mock-model",` +
		`"usage":{"input":10,"output":20,"cacheRead":0,"cacheWrite":0,"totalTokens":30,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"stop","timestamp":1}`
}

// BenchmarkFrames is what a bench reader pays to read one frame of each
// kind it checks: a session event in the delta format and in the full
// format (late in a 1,000-word answer, so the partial message it carries
// twice is long), an assistant message_end checked against the answer, an
// SSE event and a session-WebSocket message (a command's response:
// piclient's BenchmarkDeliver).
func BenchmarkFrames(b *testing.B) {
	msg := benchMessage(1000)
	ev := func(seq int, event string) []byte {
		return fmt.Appendf(nil, `{"type":"event","sessionId":"bench-000001","seq":%d,"event":%s}`, seq, event)
	}
	delta := ev(1, `{"type":"message_update","assistantMessageEvent":{"type":"text_delta","contentIndex":0,"delta":"word999 "}}`)
	full := ev(1, `{"type":"message_update","assistantMessageEvent":{"type":"text_delta","contentIndex":0,"delta":"word999 ","partial":`+msg+`},"message":`+msg+`}`)
	end := ev(1, `{"type":"message_end","message":`+msg+`}`)
	sse := []byte(`{"type":"generation_progress","token":"word999 ","seq":1234}`)
	ws := []byte(`{"type":"progress_update","session_id":"s1","seq":77,"timestamp":"2026-01-01T00:00:00.123456789Z","status":"running","tokens":1234}`)
	var probs tally
	answer := strings.TrimSuffix(strings.SplitN(strings.SplitN(msg, `"text":"`, 2)[1], `"`, 2)[0], "")
	cases := []struct {
		name string
		run  func(b *testing.B)
	}{
		{"event/delta", func(b *testing.B) {
			c := &client{sid: "bench-000001", opt: &clientOptions{faults: &probs}, faults: &probs}
			for b.Loop() {
				c.lastSeq = 0
				c.event(delta)
			}
		}},
		{"event/full", func(b *testing.B) {
			c := &client{sid: "bench-000001", opt: &clientOptions{faults: &probs}, faults: &probs}
			for b.Loop() {
				c.lastSeq = 0
				c.event(full)
			}
		}},
		{"event/message_end", func(b *testing.B) {
			c := &client{sid: "bench-000001", opt: &clientOptions{faults: &probs, answer: answer}, faults: &probs}
			for b.Loop() {
				c.lastSeq = 0
				c.event(end)
			}
		}},
		{"sse", func(b *testing.B) {
			s := &sseStream{opt: &sseOptions{faults: &probs}, connected: make(chan struct{}), seen: map[eventKey]struct{}{}}
			close(s.connected)
			id := []byte("1")
			for b.Loop() {
				s.lastSeq = 0
				s.text.Reset()
				s.event(id, true, sse)
			}
		}},
		{"session-ws", func(b *testing.B) {
			w := &watcher{sid: "s1", opt: &watchOptions{faults: &probs}, initialIn: true, subscribed: true}
			for b.Loop() {
				w.message(context.Background(), ws)
			}
		}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			tc.run(b)
		})
	}
	if n, kinds, samples := probs.result(); n != 0 {
		b.Fatalf("%d faults %v: %q", n, kinds, samples)
	}
}
