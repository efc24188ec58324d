package session_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/transcript"
)

// BenchmarkEngineEvents measures what the engine adds per event: the
// faux provider streams 1,000 text deltas in process, and every event
// goes through the agent loop, the session (seq, log, state) and one
// subscriber. No network, no disk.
func BenchmarkEngineEvents(b *testing.B) {
	p := faux.New(faux.Options{})
	s, err := session.New(session.Config{Cwd: b.TempDir(), Model: faux.Model(), Stream: p.Stream})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	events := 0
	s.Subscribe(func(session.Event) { events++ })
	text := strings.Repeat("word ", 1000)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.Push(faux.Response{Text: text})
		if err := s.Prompt(session.UserMessage("go", nil), session.BehaviorNone); err != nil {
			b.Fatal(err)
		}
		if err := s.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		// Keep the context from growing across iterations.
		b.StopTimer()
		_ = s.NewSession("")
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(events)/float64(b.N), "events/op")
}

// BenchmarkIdleSessionMemory loads sessions of 100 messages from disk and
// reports the heap each one keeps while idle.
func BenchmarkIdleSessionMemory(b *testing.B) {
	dir := b.TempDir()
	f, err := transcript.Create(dir, dir, transcript.WithSync(transcript.SyncNever))
	if err != nil {
		b.Fatal(err)
	}
	body := strings.Repeat("A sentence of ordinary length in a coding conversation. ", 4)
	for i := 0; i < 50; i++ {
		_, _ = f.AppendMessage(&llm.Message{Role: llm.RoleUser, Content: []llm.Content{llm.Text(fmt.Sprintf("question %d: %s", i, body))}, Timestamp: int64(i)})
		_, _ = f.AppendMessage(&llm.Message{Role: llm.RoleAssistant, Content: []llm.Content{llm.Text("answer: " + body)},
			API: "faux", Provider: "faux", Model: "echo", StopReason: llm.StopStop, Usage: llm.Usage{Input: 100, Output: 50}, Timestamp: int64(i)})
	}
	path := f.Path()
	_ = f.Close()
	p := faux.New(faux.Options{})
	const n = 200
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ss := make([]*session.Session, n)
		for j := range ss {
			if ss[j], err = session.New(session.Config{Cwd: dir, Open: path, Model: faux.Model(), Stream: p.Stream}); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-bytes/session")
		for _, s := range ss {
			_ = s.Close()
		}
		if len(ss[0].Messages()) != 100 {
			b.Fatalf("loaded %d messages", len(ss[0].Messages()))
		}
	}
}
