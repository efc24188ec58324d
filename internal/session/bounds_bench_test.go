package session_test

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/tool"
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

// updatingTool streams count partial results shaped like bash's (the
// tail of the output so far, with the same text again in the details'
// truncation, a separate copy as in bash's snapshots), as bash does every
// 100 ms while a verbose command runs.
type updatingTool struct {
	count int
	size  int
}

func (t *updatingTool) Spec() llm.Tool {
	return llm.Tool{Name: "noisy", Description: "streams output", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (t *updatingTool) Execute(ctx context.Context, call tool.Call, update func(tool.Result)) tool.Result {
	for i := 0; i < t.count; i++ {
		// A fresh string each time, as bash's snapshot is.
		text := strings.Repeat(string(rune('a'+i%26)), t.size)
		tr := tool.Truncation{Content: strings.Clone(text), Truncated: true, TruncatedBy: "bytes", TotalBytes: t.size * (i + 1), OutputBytes: t.size}
		update(tool.Result{Content: []llm.Content{llm.Text(text)}, Details: tool.BashDetails{Truncation: &tr, FullOutputPath: "/tmp/out"}})
	}
	return tool.TextResult("done", nil)
}

// BenchmarkToolUpdateLogMemory runs one tool that streams 450 bash-like
// snapshots of 50 KB (45 s of a verbose command at one snapshot per
// 100 ms) and reports the heap the idle session keeps afterwards.
func BenchmarkToolUpdateLogMemory(b *testing.B) {
	for i := 0; i < b.N; i++ {
		p := faux.New(faux.Options{})
		p.Push(faux.Response{ToolCalls: []faux.ToolCall{{ID: "t1", Name: "noisy"}}}, faux.Response{Text: "done"})
		s, err := session.New(session.Config{Cwd: b.TempDir(), Model: faux.Model(), Stream: p.Stream,
			Tools: []tool.Tool{&updatingTool{count: 450, size: tool.MaxBytes}}})
		if err != nil {
			b.Fatal(err)
		}
		before := heapMiB()
		if err := s.Prompt(session.UserMessage("go", nil), session.BehaviorNone); err != nil {
			b.Fatal(err)
		}
		if err := s.Wait(context.Background()); err != nil {
			b.Fatal(err)
		}
		after := heapMiB()
		b.ReportMetric(after-before, "heap-MiB")
		_ = s.Close()
	}
}
