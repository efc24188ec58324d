package session

import (
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/agent"
	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
)

// streamEvents emits one assistant message of deltas 4-byte text deltas
// into s as the agent loop does: every message_update carries the live
// partial message, and each delta is a fresh string, as a decoder that
// copies what it takes from a wire chunk hands it over. The agent and
// stream events of the deltas are reused, so that the time measured is
// the session's.
func streamEvents(s *Session, deltas int) {
	msg := &llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{{Type: llm.ContentText}}, StopReason: llm.StopStop}
	agentEvent := func(a agent.Event) { s.emit(Event{Type: EventType(a.Type), Agent: &a}) }
	agentEvent(agent.Event{Type: agent.EventMessageStart, Message: msg})
	agentEvent(agent.Event{Type: agent.EventMessageUpdate, Message: msg, Update: &llm.Event{Type: llm.EventTextStart}})
	u := &llm.Event{Type: llm.EventTextDelta}
	a := &agent.Event{Type: agent.EventMessageUpdate, Message: msg, Update: u}
	for k := 0; k < deltas; k++ {
		u.Delta = strings.Clone("tok ")
		s.emit(Event{Type: EventType(a.Type), Agent: a})
	}
	text := strings.Repeat("tok ", deltas)
	agentEvent(agent.Event{Type: agent.EventMessageUpdate, Message: msg, Update: &llm.Event{Type: llm.EventTextEnd, Content: text}})
	final := msg.Clone()
	final.Content[0].Text = text
	agentEvent(agent.Event{Type: agent.EventMessageEnd, Message: final})
}

// cpuTime is the CPU time the process has used, user and system: unlike
// the wall time it does not count what other programs on the machine
// take.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEmitDelta emits streams of 4-byte deltas into many sessions
// and reports what each emitted delta costs: the time of emit (seq, log,
// no listeners) and the live heap the event log keeps for it.
func BenchmarkEmitDelta(b *testing.B) {
	for _, bc := range []struct{ sessions, deltas int }{{10, 200}, {100, 2000}} {
		b.Run(fmt.Sprintf("sessions=%d/deltas=%d", bc.sessions, bc.deltas), func(b *testing.B) {
			p := faux.New(faux.Options{})
			var bytesPerDelta float64
			var cpu time.Duration
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
				cpu0 := cpuTime()
				b.StartTimer()
				for _, s := range ss {
					streamEvents(s, bc.deltas)
				}
				b.StopTimer()
				cpu += cpuTime() - cpu0
				runtime.GC()
				runtime.ReadMemStats(&after)
				bytesPerDelta += (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(bc.sessions*bc.deltas) / float64(b.N)
				for _, s := range ss {
					_ = s.Close()
				}
				b.StartTimer()
			}
			b.StopTimer()
			n := float64(b.N * bc.sessions * bc.deltas)
			b.ReportMetric(bytesPerDelta, "heap-B/delta")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/delta")
			b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/delta")
		})
	}
}
