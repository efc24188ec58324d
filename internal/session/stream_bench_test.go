package session_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/openaichat"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/session"
)

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkStreamedDeltas streams a 4-byte text delta at a time into many
// sessions at once, through the Chat Completions wire mock and the real
// decoder, as issue 11 measured it. It reports the live heap the finished
// streams leave behind per delta (the event log's copy of the stream and
// the conversation's message; the mock and the idle HTTP connections are
// gone when it is measured) and the wall and CPU time per delta over all
// sessions (mock, HTTP, decoding, agent loop and session together).
func BenchmarkStreamedDeltas(b *testing.B) {
	for _, bc := range []struct{ sessions, deltas int }{{10, 200}, {100, 2000}} {
		b.Run(fmt.Sprintf("sessions=%d/deltas=%d", bc.sessions, bc.deltas), func(b *testing.B) {
			text := make([]string, bc.deltas)
			for i := range text {
				text[i] = fmt.Sprintf("%03d ", i%1000)
			}
			opts := func(context.Context, *llm.Model) (llm.StreamOptions, error) {
				return llm.StreamOptions{APIKey: "k"}, nil
			}
			var bytesPerDelta float64
			var cpu time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				srv := wiremock.NewUnstarted()
				srv.Handle(func(*wiremock.Request) wiremock.Script { return wiremock.Script{Text: text} })
				srv.Start()
				tr := &http.Transport{}
				p := openaichat.New(&http.Client{Transport: tr})
				model := &llm.Model{ID: "mock-model", API: llm.APIOpenAICompletions, Provider: "mock", BaseURL: srv.OpenAIURL(),
					Input: []string{"text"}, ContextWindow: 1 << 20, MaxTokens: 4096}
				ss := make([]*session.Session, bc.sessions)
				for j := range ss {
					s, err := session.New(session.Config{Cwd: b.TempDir(), Model: model, Stream: p.Stream, Options: opts})
					if err != nil {
						b.Fatal(err)
					}
					ss[j] = s
				}
				goroutines := runtime.NumGoroutine()
				before := liveHeap()
				cpu0 := session.CPUTime()
				b.StartTimer()
				var wg sync.WaitGroup
				for _, s := range ss {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if err := s.Prompt(session.UserMessage("go", nil), session.BehaviorNone); err != nil {
							b.Error(err)
							return
						}
						if err := s.Wait(context.Background()); err != nil {
							b.Error(err)
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				cpu += session.CPUTime() - cpu0
				// What the mock recorded and the connections are not
				// the sessions'.
				srv.Close()
				tr.CloseIdleConnections()
				// Connections end on their own goroutines, which hold
				// their buffers until they have.
				for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > goroutines && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
				after := liveHeap()
				bytesPerDelta += (float64(after) - float64(before)) / float64(bc.sessions*bc.deltas) / float64(b.N)
				for _, s := range ss {
					if got := s.Messages()[1].TextContent(); got != strings.Join(text, "") {
						b.Fatalf("streamed %d bytes, want %d", len(got), 4*bc.deltas)
					}
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
