package session

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/agent"
	"github.com/agentd-dev/agentd/llm"
	"github.com/agentd-dev/agentd/llm/faux"
)

// streamEvents emits one assistant message of deltas 4-byte text deltas
// into s the way the agent loop does: every message_update carries the
// live partial message, and each delta is a fresh string, as a decoder
// that copies what it takes from a wire chunk hands it over.
func streamEvents(s *Session, deltas int) {
	msg := &llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{{Type: llm.ContentText}}, StopReason: llm.StopStop}
	agentEvent := func(a agent.Event) { s.emit(Event{Type: EventType(a.Type), Agent: &a}) }
	agentEvent(agent.Event{Type: agent.EventMessageStart, Message: msg})
	agentEvent(agent.Event{Type: agent.EventMessageUpdate, Message: msg, Update: &llm.Event{Type: llm.EventTextStart}})
	for k := 0; k < deltas; k++ {
		d := strings.Clone("tok ")
		agentEvent(agent.Event{Type: agent.EventMessageUpdate, Message: msg, Update: &llm.Event{Type: llm.EventTextDelta, Delta: d}})
	}
	text := strings.Repeat("tok ", deltas)
	agentEvent(agent.Event{Type: agent.EventMessageUpdate, Message: msg, Update: &llm.Event{Type: llm.EventTextEnd, Content: text}})
	final := msg.Clone()
	final.Content[0].Text = text
	agentEvent(agent.Event{Type: agent.EventMessageEnd, Message: final})
}

// BenchmarkEmitDelta emits streams of 4-byte deltas into many sessions
// and reports what each emitted delta costs: the time of emit (seq, log,
// no listeners) and the live heap the event log keeps for it.
func BenchmarkEmitDelta(b *testing.B) {
	for _, bc := range []struct{ sessions, deltas int }{{10, 200}, {100, 2000}} {
		b.Run(fmt.Sprintf("sessions=%d/deltas=%d", bc.sessions, bc.deltas), func(b *testing.B) {
			p := faux.New(faux.Options{})
			var bytesPerDelta float64
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				ss := make([]*Session, bc.sessions)
				for j := range ss {
					s, err := New(Config{Cwd: b.TempDir(), Model: faux.Model(), Stream: p.Stream})
					if err != nil {
						b.Fatal(err)
					}
					ss[j] = s
				}
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				b.StartTimer()
				for _, s := range ss {
					streamEvents(s, bc.deltas)
				}
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&after)
				bytesPerDelta = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(bc.sessions*bc.deltas)
				for _, s := range ss {
					_ = s.Close()
				}
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(bytesPerDelta, "heap-B/delta")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*bc.sessions*bc.deltas), "ns/delta")
		})
	}
}
