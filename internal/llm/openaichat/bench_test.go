package openaichat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/llmtest"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// recordStream has the mock render a long answer: 2000 text deltas (one
// in ten with a newline, which JSON escapes) and a tool call whose
// arguments come in 40 pieces, with the usage chunk.
func recordStream(tb testing.TB) []byte {
	sc := wiremock.Script{Usage: &wiremock.Usage{Input: 5000, Output: 2100, CacheRead: 3000}}
	for i := range 2000 {
		d := fmt.Sprintf(" tok%d", i)
		if i%10 == 9 {
			d += ".\n"
		}
		sc.Text = append(sc.Text, d)
	}
	args := []string{`{"path":"/src/main.go","content":"`}
	for i := range 38 {
		args = append(args, fmt.Sprintf(`line %d\n`, i))
	}
	args = append(args, `"}`)
	sc.ToolCalls = []wiremock.ToolCall{{ID: "call_bench", Name: "write", Args: args}}

	srv := llmtest.NewServer(tb)
	srv.Enqueue(sc)
	body, _ := json.Marshal(map[string]any{"model": "gpt-4o-mini", "stream": true, "stream_options": map[string]any{"include_usage": true}})
	resp, err := http.Post(srv.OpenAIURL()+"/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

// BenchmarkDecode streams a recorded answer through the SDK's request
// path, its SSE decoder and this package's chunk decoder, with the HTTP
// round trip replaced by an in-memory one.
func BenchmarkDecode(b *testing.B) {
	raw := recordStream(b)
	p := New(&http.Client{Transport: llmtest.Replay(raw)})
	m := &llm.Model{ID: "gpt-4o-mini", API: llm.APIOpenAICompletions, Provider: "openai", BaseURL: "https://api.openai.com/v1", Cost: miniCost, MaxTokens: 16384}
	c := hello()
	o := &llm.StreamOptions{APIKey: "sk-bench"}
	ctx := context.Background()

	drain := func() int {
		s := p.Stream(ctx, m, c, o)
		n := 0
		for s.Next() {
			n++
		}
		if err := s.Err(); err != nil {
			b.Fatal(err)
		}
		if got := len(s.Result().Content); got != 2 {
			b.Fatalf("content blocks %d", got)
		}
		s.Close()
		return n
	}
	events := drain()

	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for b.Loop() {
		drain()
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	total := float64(events) * float64(b.N)
	b.ReportMetric(total/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/total, "allocs/event")
	b.ReportMetric(float64(events), "events/op")
}
