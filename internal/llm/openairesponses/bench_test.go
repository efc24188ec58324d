package openairesponses

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/llm"
	"github.com/agentd-dev/agentd/internal/llm/llmtest"
	"github.com/agentd-dev/agentd/internal/llm/wiremock"
)

// recordedStream renders a long answer with the mock once: 2000 text
// deltas, then a tool call whose arguments come in 50 chunks.
func recordedStream(b *testing.B) []byte {
	b.Helper()
	text := make([]string, 2000)
	for i := range text {
		text[i] = "token "
	}
	args := make([]string, 0, 52)
	args = append(args, `{"command":"`)
	for i := 0; i < 50; i++ {
		args = append(args, "echo hi; ")
	}
	args = append(args, `"}`)
	srv := llmtest.NewServer(b)
	srv.Enqueue(wiremock.Script{
		ResponseID: "resp_bench",
		Text:       text,
		ToolCalls:  []wiremock.ToolCall{{ID: "call_bench", Name: "bash", Args: args}},
		Usage:      &wiremock.Usage{Input: 1200, CacheRead: 800, Output: 2100},
	})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req := `{"model":"gpt-4.1-mini","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"store":false,"stream":true}`
	res, err := (&http.Client{Transport: tr}).Post(srv.OpenAIURL()+"/responses", "application/json", strings.NewReader(req))
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// BenchmarkDecode measures the whole path of one response: the request is
// built and sent, the decoder maps the recorded stream, and the
// builder assembles the message. events/s counts llm stream events.
func BenchmarkDecode(b *testing.B) {
	body := recordedStream(b)
	p := New(&http.Client{Transport: llmtest.Replay(body)})
	m := &llm.Model{ID: "gpt-4.1-mini", API: llm.APIOpenAIResponses, Provider: "openai", BaseURL: "http://llm.invalid/v1",
		Cost: llm.ModelCost{Input: 0.4, Output: 1.6, CacheRead: 0.1}}
	c := hello()
	o := &llm.StreamOptions{APIKey: "sk-bench"}
	ctx := context.Background()

	var events int
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	for b.Loop() {
		s := p.Stream(ctx, m, c, o)
		for s.Next() {
			events++
		}
		if err := s.Err(); err != nil {
			b.Fatal(err)
		}
		if msg := s.Result(); msg.StopReason != llm.StopToolUse || len(msg.Content) != 2 {
			b.Fatalf("unexpected message: %s", msg.StopReason)
		}
		s.Close()
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(events), "allocs/event")
}
