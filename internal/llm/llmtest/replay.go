package llmtest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"runtime"
	"testing"

	"github.com/agentd-dev/agentd/internal/llm"
)

// Replay is an http.RoundTripper that answers every request with the
// same recorded event stream, in memory, so that a benchmark or a memory
// test measures the provider's request path and decoder, not a network.
type Replay []byte

// RoundTrip implements http.RoundTripper.
func (r Replay) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	return &http.Response{
		StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": {"text/event-stream"}},
		Body:    io.NopCloser(bytes.NewReader(r)),
		Request: req,
	}, nil
}

// KeptDeltas streams m's answer to c from p, whose wire stream carries
// chunks deltas of events of type typ, each chunk padded with 64 KiB
// besides its few bytes of delta, and keeps every such event's delta,
// as an event log or a client's queue would. It fails t unless there are
// chunks of them and, the stream closed, they keep less than 1 KiB each
// alive: a delta is its own string, never a slice of the wire chunk it
// came in. It returns the deltas for the caller to read.
func KeptDeltas(t *testing.T, p llm.Provider, m *llm.Model, c *llm.Context, typ llm.EventType, chunks int) []string {
	t.Helper()
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	var kept []string
	s := p.Stream(context.Background(), m, c, &llm.StreamOptions{APIKey: "k"})
	for s.Next() {
		if ev := s.Event(); ev.Type == typ {
			kept = append(kept, ev.Delta)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	retained := int64(ms.HeapAlloc) - int64(before)
	if len(kept) != chunks {
		t.Fatalf("%d deltas, want %d", len(kept), chunks)
	}
	if retained > int64(chunks)<<10 {
		t.Fatalf("%d deltas of a few bytes keep %d KiB alive: slices of the 64 KiB chunks", len(kept), retained>>10)
	}
	runtime.KeepAlive(kept)
	runtime.KeepAlive(p) // and the recorded stream it answers with: not freed between the measurements
	return kept
}
