package loadgen

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// agentdBin is the agentd binary TestMain builds (buildErr if it could
// not): the server under test runs as a child process, as in production.
var (
	agentdBin string
	buildErr  error
)

// needBinary fails tb when TestMain could not build agentd; tests that do
// not run the server still run.
func needBinary(tb testing.TB) {
	tb.Helper()
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "loadgen-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentdBin = filepath.Join(dir, "agentd")
	out, err := exec.Command("go", "build", "-o", agentdBin, "github.com/agentd-dev/agentd/cmd/agentd").CombinedOutput()
	if err != nil {
		buildErr = fmt.Errorf("build agentd: %w\n%s", err, out)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestRunSmall(t *testing.T) {
	needBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log strings.Builder
	rep, err := Run(ctx, Options{Binary: agentdBin, Sessions: 2, Rounds: 1, Chunks: 5, ServerLog: &log})
	if err != nil {
		t.Fatalf("Run: %v\nserver stderr:\n%s", err, log.String())
	}
	t.Logf("report: %+v", rep)
	if rep.Errors != 0 {
		t.Fatalf("%d errors %v: %q\nserver stderr:\n%s", rep.Errors, rep.ErrorKinds, rep.ErrorSamples, log.String())
	}
	// 2 sessions x 1 round x (1 prompt + 1 get_state).
	if rep.Commands != 4 || rep.Prompts != 2 {
		t.Errorf("commands %d, prompts %d; want 4, 2", rep.Commands, rep.Prompts)
	}
	if rep.ModelRequests != 2 {
		t.Errorf("model requests %d, want 2", rep.ModelRequests)
	}
	for name, d := range map[string]time.Duration{"prompt p50": rep.PromptP50, "prompt p99": rep.PromptP99,
		"added p50": rep.AddedP50, "mock p50": rep.MockP50, "get_state p50": rep.GetStateP50, "duration": rep.Duration} {
		if d <= 0 {
			t.Errorf("%s = %v, want > 0", name, d)
		}
	}
	if rep.AddedP50 >= rep.PromptP50 {
		t.Errorf("added latency %v not below prompt latency %v", rep.AddedP50, rep.PromptP50)
	}
	// Each prompt streams at least its 5 deltas as session events.
	if rep.SessionEvents < 2*5 || rep.Frames < rep.SessionEvents {
		t.Errorf("frames %d, session events %d", rep.Frames, rep.SessionEvents)
	}
	if rep.RSSBaseline <= 0 || rep.RSSPeak < rep.RSSBaseline {
		t.Errorf("RSS baseline %d, peak %d", rep.RSSBaseline, rep.RSSPeak)
	}
	if rep.ServerExit != 0 || rep.ShutdownNotices != 2 {
		t.Errorf("server exit %d, shutdown notices %d; want 0, 2", rep.ServerExit, rep.ShutdownNotices)
	}
	var b strings.Builder
	if err := WriteTable(&b, []Report{rep}); err != nil || !strings.Contains(b.String(), "added latency p50/p99") {
		t.Errorf("table: %v\n%s", err, b.String())
	}
}

// BenchmarkServe runs the whole load for a few N; each iteration is a
// fresh server. Run with -benchtime=1x for one run per N.
func BenchmarkServe(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			needBinary(b)
			var rep Report
			for b.Loop() {
				var err error
				rep, err = Run(b.Context(), Options{Binary: agentdBin, Sessions: n})
				if err != nil {
					b.Fatal(err)
				}
				if rep.Errors != 0 {
					b.Fatalf("%d errors %v: %q", rep.Errors, rep.ErrorKinds, rep.ErrorSamples)
				}
			}
			b.ReportMetric(rep.CommandsPerSec, "cmds/s")
			b.ReportMetric(rep.EventsPerSec, "events/s")
			b.ReportMetric(float64(rep.PromptP50.Microseconds()), "prompt-p50-µs")
			b.ReportMetric(float64(rep.PromptP99.Microseconds()), "prompt-p99-µs")
			b.ReportMetric(float64(rep.AddedP50.Microseconds()), "added-p50-µs")
			b.ReportMetric(float64(rep.AddedP99.Microseconds()), "added-p99-µs")
			b.ReportMetric(float64(rep.GetStateP50.Microseconds()), "get_state-p50-µs")
			b.ReportMetric(float64(rep.GetStateP99.Microseconds()), "get_state-p99-µs")
			b.ReportMetric(float64(rep.RSSPerSession), "bytes/session")
		})
	}
}

// TestMockTimesEachPrompt checks the mock streams the scripted chunks and
// charges its time to the newest prompt tag in the request.
func TestMockTimesEachPrompt(t *testing.T) {
	mk, err := startMock(3)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := mk.close(); err != nil {
			t.Error(err)
		}
	}()
	body := `{"model":"mock-model","stream":true,"stream_options":{"include_usage":true},"messages":[` +
		`{"role":"user","content":"old ` + tagOpen + `s/0` + tagClose + `"},` +
		`{"role":"assistant","content":"word0 word1 word2 "},` +
		`{"role":"user","content":"new ` + tagOpen + `s/1` + tagClose + `"}]}`
	resp, err := http.Post(mk.openAIURL()+"/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"content":"word0 "`, `"content":"word2 "`, `"prompt_tokens":42`, "[DONE]"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("stream lacks %s:\n%s", want, got)
		}
	}
	if d, ok := mk.time("s/1"); !ok || d <= 0 {
		t.Errorf("time of s/1 = %v, %v; want > 0", d, ok)
	}
	if _, ok := mk.time("s/0"); ok {
		t.Error("time charged to an older prompt")
	}
	if n := mk.requestCount(); n != 1 {
		t.Errorf("requests %d, want 1", n)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(101-i))
	}
	if p50, p99, p100 := percentile(ds, 50), percentile(ds, 99), percentile(ds, 100); p50 != 50 || p99 != 99 || p100 != 100 {
		t.Errorf("p50 %d p99 %d p100 %d", p50, p99, p100)
	}
	if got := percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("one sample: %d", got)
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("no samples: %d", got)
	}
}
