package loadgen

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// testMock starts a mock (startMock) that stops when the test ends, and
// a client of its own for it, whose idle connections are closed before
// the mock: one dialed but never used would hold up its shutdown.
func testMock(t *testing.T, chunks, planSteps int) (*mock, *http.Client) {
	t.Helper()
	mk, err := startMock(chunks, planSteps)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() {
		hc.CloseIdleConnections()
		if err := mk.close(); err != nil {
			t.Error(err)
		}
	})
	return mk, hc
}

// The mock replays the first answer it gave to every later request: an
// answer whose client went away part way is not that answer, and the
// next request still gets the whole one.
func TestMockDoesNotReplayAnAbortedAnswer(t *testing.T) {
	mk, hc := testMock(t, 2000, 0)
	const body = `{"model":"mock-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	post := func(ctx context.Context) *http.Response {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, mk.openAIURL()+"/chat/completions", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	ctx, cancel := context.WithCancel(context.Background())
	resp := post(ctx)
	if _, err := resp.Body.Read(make([]byte, 1024)); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()

	resp = post(context.Background())
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(strings.TrimSpace(string(got)), "[DONE]") {
		t.Errorf("the answer after an aborted one is cut: %d bytes, ending %q", len(got), got[max(0, len(got)-200):])
	}
}
