package session_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/llm/faux"
	"github.com/agentd-dev/agentd/session"
)

// heapMiB is the live heap after a collection.
func heapMiB() float64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / (1 << 20)
}

// BenchmarkFollowUpMemory queues 95 follow-ups of 199 KB into a session
// while a run is in progress (the model is slow to answer) and reports
// the heap they keep: the queue plus everything the event log holds.
// With the default limits the queue takes 64 of them; without limits all
// 95, which shows what the log's copies cost.
func BenchmarkFollowUpMemory(b *testing.B) {
	for _, bc := range []struct {
		name   string
		limits func(*session.Config)
	}{
		{"default-limits", func(*session.Config) {}},
		{"no-limits", func(c *session.Config) { c.MaxQueued, c.MaxQueuedBytes = -1, -1 }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			const n, size = 95, 199 << 10
			for i := 0; i < b.N; i++ {
				p := faux.New(faux.Options{})
				p.Push(faux.Response{Text: "late", Delay: time.Hour})
				cfg := session.Config{Cwd: b.TempDir(), Model: faux.Model(), Stream: p.Stream}
				bc.limits(&cfg)
				s, err := session.New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Prompt(session.UserMessage("go", nil), session.BehaviorNone); err != nil {
					b.Fatal(err)
				}
				before := heapMiB()
				accepted := 0
				for j := 0; j < n; j++ {
					text := strings.Repeat(string(rune('a'+j%26)), size)
					if s.FollowUp(session.UserMessage(text, nil)) == nil {
						accepted++
					}
				}
				after := heapMiB()
				b.ReportMetric(after-before, "heap-MiB")
				b.ReportMetric(float64(accepted), "accepted")
				s.Abort()
				_ = s.Close()
			}
		})
	}
}
