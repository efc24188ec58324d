package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd-dev/agentd/internal/llm/wiremock"
	"github.com/agentd-dev/agentd/internal/piclient"
	"github.com/coder/websocket"
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
	rep, err := Run(ctx, Options{Binary: agentdBin, Sessions: 2, Rounds: 1, Chunks: 5, IdleSessions: 20, Settle: 100 * time.Millisecond, ServerLog: &log})
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
	// 20 sessions hold more than the settling's tolerance.
	if rep.IdleSessions != 20 || rep.RSSPerIdleSession <= 0 || rep.RSSFirstSession <= 0 {
		t.Errorf("idle sessions %d, RSS per idle session %d, after the first %d", rep.IdleSessions, rep.RSSPerIdleSession, rep.RSSFirstSession)
	}
	if rep.ServerExit != 0 || rep.ShutdownNotices != 2 {
		t.Errorf("server exit %d, shutdown notices %d; want 0, 2", rep.ServerExit, rep.ShutdownNotices)
	}
	if rep.SendBudgetCuts != 0 {
		t.Errorf("send budget cuts %d, want 0", rep.SendBudgetCuts)
	}
	// A load of a few milliseconds may not move an idle machine's ticks
	// in /proc/stat (tickless idle): the reading must exist, not be big.
	if rep.LoadCPU.Capacity < 0 || rep.LoadCPU.Server < 0 {
		t.Errorf("load CPU %+v", rep.LoadCPU)
	}
	if rep.Planned != 4 || rep.NotRun != 0 || rep.AnswersChecked != 2 || rep.StreamFormat != "full" {
		t.Errorf("planned %d, not run %d, answers checked %d, format %q; want 4, 0, 2, full", rep.Planned, rep.NotRun, rep.AnswersChecked, rep.StreamFormat)
	}
	if rep.Bytes <= rep.Frames || rep.SessionEventsPerSec <= 0 || rep.EventsPerSec < rep.SessionEventsPerSec {
		t.Errorf("bytes %d for %d frames, events/s %.0f, session events/s %.0f", rep.Bytes, rep.Frames, rep.EventsPerSec, rep.SessionEventsPerSec)
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

// BenchmarkStreams measures streaming at scale, one fresh server per
// iteration (run with -benchtime=1x): N concurrent answers of 2,000
// tokens in pi's full format (peak RSS, RSS right after and a minute
// later, with clients reading at full speed and 1 ms per frame) and in
// the delta format (events/s as a fraction of coder/websocket's own rate
// in the same run).
func BenchmarkStreams(b *testing.B) {
	if _, err := RaiseOpenFileLimit(); err != nil {
		b.Log(err)
	}
	cases := []struct {
		name string
		o    Options
	}{
		{"full/sessions=100", Options{Sessions: 100, StreamFormat: "full", IdleWait: time.Minute}},
		{"full/sessions=100/read-delay=1ms", Options{Sessions: 100, StreamFormat: "full", ReadDelay: time.Millisecond, IdleWait: time.Minute}},
		{"delta/sessions=1000", Options{Sessions: 1000, StreamFormat: "delta", Baseline: true}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			needBinary(b)
			o := tc.o
			o.Binary, o.BaselineBinary, o.Rounds, o.Chunks, o.GetStates = agentdBin, agentdBin, 1, 2000, -1
			var rep Report
			for b.Loop() {
				var err error
				if rep, err = Run(b.Context(), o); err != nil {
					b.Fatal(err)
				}
				if rep.Errors != 0 {
					b.Fatalf("%d errors %v: %q", rep.Errors, rep.ErrorKinds, rep.ErrorSamples)
				}
			}
			b.ReportMetric(float64(rep.RSSPeak)/(1<<20), "peak-RSS-MiB")
			b.ReportMetric(float64(rep.RSSAfter)/(1<<20), "after-RSS-MiB")
			if o.IdleWait > 0 {
				b.ReportMetric(float64(rep.RSSIdle)/(1<<20), "idle-RSS-MiB")
			}
			b.ReportMetric(rep.EventsPerSec, "events/s")
			b.ReportMetric(rep.SessionEventsPerSec, "session-events/s")
			if rep.Baseline != nil {
				b.ReportMetric(rep.Baseline.MessagesPerSec, "library-msgs/s")
				b.ReportMetric(rep.BaselineFraction, "fraction-of-library")
			}
		})
	}
}

// BenchmarkREST measures the REST face's event streams, one fresh server
// per iteration (run with -benchtime=1x): N conversations, each streamed
// to its driver and M watchers, as issue 12 asks (events/s, bytes per
// token, memory per attached client).
func BenchmarkREST(b *testing.B) {
	if _, err := RaiseOpenFileLimit(); err != nil {
		b.Log(err)
	}
	for _, nm := range [][2]int{{10, 1}, {100, 10}} {
		b.Run(fmt.Sprintf("conversations=%d/watchers=%d", nm[0], nm[1]), func(b *testing.B) {
			needBinary(b)
			var rep Report
			for b.Loop() {
				var err error
				if rep, err = Run(b.Context(), Options{Binary: agentdBin, REST: true, Sessions: nm[0], SSEWatchers: nm[1]}); err != nil {
					b.Fatal(err)
				}
				if rep.Errors != 0 {
					b.Fatalf("%d errors %v: %q", rep.Errors, rep.ErrorKinds, rep.ErrorSamples)
				}
			}
			rr := rep.REST
			b.ReportMetric(rr.EventsPerSec, "events/s")
			b.ReportMetric(rr.EventsPerSecPerWatcher, "events/s/client")
			b.ReportMetric(rr.BytesPerToken, "bytes/token")
			b.ReportMetric(rr.WireBytesPerToken, "wire-bytes/token")
			b.ReportMetric(float64(rr.RSSPerWatcher)/1000, "kB/client")
			b.ReportMetric(float64(rep.AddedP50.Microseconds()), "added-p50-µs")
		})
	}
}

// BenchmarkIdleSessions measures the memory of an idle session at 40:
// 40 sessions on one connection, then 40 with a connection each, the RSS
// difference per session once the RSS held still.
func BenchmarkIdleSessions(b *testing.B) {
	needBinary(b)
	var rep Report
	for b.Loop() {
		var err error
		if rep, err = Run(b.Context(), Options{Binary: agentdBin, Sessions: 40, IdleSessions: 40, Rounds: 1, GetStates: -1}); err != nil {
			b.Fatal(err)
		}
		if rep.Errors != 0 {
			b.Fatalf("%d errors %v: %q", rep.Errors, rep.ErrorKinds, rep.ErrorSamples)
		}
	}
	b.ReportMetric(float64(rep.RSSPerIdleSession)/1000, "kB/idle-session")
	b.ReportMetric(float64(rep.RSSPerSession)/1000, "kB/session+conn")
}

// TestMockTimesEachPrompt checks the mock streams the scripted chunks and
// charges its time to the newest prompt tag in the request.
func TestMockTimesEachPrompt(t *testing.T) {
	mk, hc := testMock(t, 3, 0)
	body := `{"model":"mock-model","stream":true,"stream_options":{"include_usage":true},"messages":[` +
		`{"role":"user","content":"old ` + tagOpen + `s/0` + tagClose + `"},` +
		`{"role":"assistant","content":"word0 word1 word2 "},` +
		`{"role":"user","content":"new ` + tagOpen + `s/1` + tagClose + `"}]}`
	resp, err := hc.Post(mk.openAIURL()+"/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"content":"w00 "`, `"content":"w02 "`, `"prompt_tokens":42`, "[DONE]"} {
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

// The mock records its first answer and replays it to every request that
// comes after or meanwhile: the same bytes, each chunk read on its own
// (flushed), as llmtest wrote them; with a plan, answers differ, and
// every request is llmtest's.
func TestMockReplaysItsAnswer(t *testing.T) {
	for _, steps := range []int{0, 2} {
		t.Run(fmt.Sprintf("plan steps %d", steps), func(t *testing.T) {
			mk, hc := testMock(t, 5, steps)
			const body = `{"model":"mock-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
			answer := func() []string {
				resp, err := hc.Post(mk.openAIURL()+"/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return nil
				}
				defer resp.Body.Close()
				var chunks []string
				buf := make([]byte, 64<<10)
				for {
					n, err := resp.Body.Read(buf)
					if n > 0 {
						chunks = append(chunks, string(buf[:n]))
					}
					if err != nil {
						return chunks
					}
				}
			}
			answers := make([][]string, 6)
			answers[0] = answer()
			var wg sync.WaitGroup
			for i := 1; i < len(answers); i++ {
				wg.Go(func() { answers[i] = answer() })
			}
			wg.Wait()
			if want := strings.Join(answers[0], ""); !strings.Contains(want, `"content":"w04 "`) || !strings.Contains(want, "[DONE]") {
				t.Fatalf("first answer:\n%s", want)
			}
			if got := mk.requestCount(); got != len(answers) {
				t.Errorf("requests %d, want %d", got, len(answers))
			}
			for i, a := range answers[1:] {
				if strings.Join(a, "") != strings.Join(answers[0], "") {
					t.Errorf("answer %d differs from the first:\n%s\nfirst:\n%s", i+1, strings.Join(a, ""), strings.Join(answers[0], ""))
				}
			}
			if replayed := mk.replay != nil; replayed != (steps == 0) {
				t.Fatalf("replayed %v with %d plan steps", replayed, steps)
			}
			// Each of the 5 text chunks is flushed on its own.
			if mk.replay != nil && len(mk.replay.parts) < 5 {
				t.Errorf("the answer is replayed in %d flushes: %q", len(mk.replay.parts), mk.replay.parts)
			}
		})
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

// TestRunStreams runs both stream formats with clients that read at full
// speed and clients that read slower than the model writes: every client
// must end each answer with the mock's text (in the delta format its
// deltas must add up to it), and the idle wait must read the RSS again.
func TestRunStreams(t *testing.T) {
	needBinary(t)
	cases := []struct {
		name   string
		format string
		delay  time.Duration
	}{
		{"full, fast readers", "full", 0},
		{"full, slow readers", "full", time.Millisecond},
		{"delta, slow readers", "delta", time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var log strings.Builder
			rep, err := Run(ctx, Options{Binary: agentdBin, Sessions: 2, Rounds: 1, Chunks: 200, GetStates: -1,
				StreamFormat: tc.format, ReadDelay: tc.delay, IdleWait: 50 * time.Millisecond, Settle: -1, ServerLog: &log})
			if err != nil {
				t.Fatalf("Run: %v\nserver stderr:\n%s", err, log.String())
			}
			if rep.Errors != 0 {
				t.Fatalf("%d errors %v: %q\nserver stderr:\n%s", rep.Errors, rep.ErrorKinds, rep.ErrorSamples, log.String())
			}
			if rep.StreamFormat != tc.format || rep.ReadDelay != tc.delay {
				t.Errorf("report says format %q, read delay %s", rep.StreamFormat, rep.ReadDelay)
			}
			if rep.AnswersChecked != 2 || rep.Commands != 2 {
				t.Errorf("answers checked %d, commands %d; want 2, 2", rep.AnswersChecked, rep.Commands)
			}
			if n := len(rep.RSSIdleSamples); n == 0 || rep.RSSIdle != rep.RSSIdleSamples[n-1].RSS || rep.RSSIdleSamples[n-1].After < 50*time.Millisecond {
				t.Errorf("RSS after idle %d, samples %+v", rep.RSSIdle, rep.RSSIdleSamples)
			}
		})
	}
}

// TestRunLoadTimeout: a load phase that cannot finish in its time ends
// then, with the waiting command counted as a load timeout and the rest
// of its session's commands as not run.
func TestRunLoadTimeout(t *testing.T) {
	needBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log strings.Builder
	// 3,000 deltas read 5 ms apart take 15 s; the load phase has 300 ms.
	rep, err := Run(ctx, Options{Binary: agentdBin, Sessions: 1, Rounds: 2, Chunks: 3000, StreamFormat: "delta",
		ReadDelay: 5 * time.Millisecond, LoadTimeout: 300 * time.Millisecond, Settle: -1, ServerLog: &log})
	if err != nil {
		t.Fatalf("Run: %v\nserver stderr:\n%s", err, log.String())
	}
	if rep.Errors != 1 || rep.ErrorKinds["load timeout"] != 1 {
		t.Fatalf("errors %d %v: %q; want one load timeout", rep.Errors, rep.ErrorKinds, rep.ErrorSamples)
	}
	if !strings.Contains(rep.ErrorSamples[0], "load phase's 300ms ran out") {
		t.Errorf("sample does not explain: %q", rep.ErrorSamples[0])
	}
	// Planned: 2 rounds of a prompt and a get_state; the first prompt
	// timed out, the other three were never sent.
	if rep.Planned != 4 || rep.Commands != 0 || rep.NotRun != 3 {
		t.Errorf("planned %d, answered %d, not run %d; want 4, 0, 3", rep.Planned, rep.Commands, rep.NotRun)
	}
}

func TestBaseline(t *testing.T) {
	needBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Baseline(ctx, BaselineOptions{Binary: agentdBin, Connections: 3, Messages: 50, Size: 100})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors != 0 {
		t.Fatalf("%d errors: %q", rep.Errors, rep.ErrorSamples)
	}
	if rep.Messages != 150 || rep.MessagesPerSec <= 0 || rep.Duration <= 0 {
		t.Errorf("report %+v: want 150 messages at a positive rate", rep)
	}
}

// TestRunBaseline: --baseline measures the library with the run's shape.
func TestRunBaseline(t *testing.T) {
	needBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{Binary: agentdBin, Sessions: 2, Rounds: 1, Chunks: 20, StreamFormat: "delta",
		Baseline: true, BaselineBinary: agentdBin, Settle: -1})
	if err != nil {
		t.Fatal(err)
	}
	b := rep.Baseline
	if rep.Errors != 0 || b == nil || b.Errors != 0 {
		t.Fatalf("errors %d %q, baseline %+v", rep.Errors, rep.ErrorSamples, b)
	}
	if b.Connections != 2 || int64(b.MessagesPerConn) != rep.Frames/2 || int64(b.Size) != rep.Bytes/rep.Frames {
		t.Errorf("baseline %d x %d x %d bytes; the run received %d frames of %d bytes over 2 connections",
			b.Connections, b.MessagesPerConn, b.Size, rep.Frames, rep.Bytes)
	}
	if want := rep.EventsPerSec / b.MessagesPerSec; rep.BaselineFraction != want || rep.BaselineFraction <= 0 {
		t.Errorf("fraction %v, want %v", rep.BaselineFraction, want)
	}
	var tb strings.Builder
	if err := WriteTable(&tb, []Report{rep}); err != nil || !strings.Contains(tb.String(), fmt.Sprintf("%.3f / %.3f", rep.BaselineFraction, rep.SessionEventsFraction)) {
		t.Errorf("table: %v\n%s", err, tb.String())
	}
}

// TestClientChecksAnswers feeds a client the event frames of one
// assistant message and checks what it counts as wrong.
func TestClientChecksAnswers(t *testing.T) {
	ev := func(seq int, inner string) []byte {
		return []byte(fmt.Sprintf(`{"type":"event","sessionId":"s","seq":%d,"event":%s}`, seq, inner))
	}
	delta := func(d string) string {
		return `{"type":"message_update","assistantMessageEvent":{"type":"text_delta","contentIndex":0,"delta":"` + d + `"}}`
	}
	end := func(text string) string {
		return `{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"` + text + `"}]}}`
	}
	start := `{"type":"message_start","message":{"role":"assistant","content":[]}}`
	cases := []struct {
		name   string
		delta  bool
		events []string
		want   map[string]int
	}{
		{"deltas add up", true, []string{start, delta("ab"), delta("c"), end("abc")}, nil},
		{"merged deltas add up", true, []string{start, delta("abc"), end("abc")}, nil},
		{"a delta lost", true, []string{start, delta("ab"), end("abc")}, map[string]int{"deltas do not add up": 1}},
		{"full format may skip updates", false, []string{start, delta("ab"), end("abc")}, nil},
		{"wrong final text", false, []string{start, delta("abc"), end("abd")}, map[string]int{"wrong final message": 1}},
		{"a user message is not checked", true, []string{`{"type":"message_end","message":{"role":"user","content":[{"type":"text","text":"hi"}]}}`}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var faults tally
			c := &client{sid: "s", opt: &clientOptions{answer: "abc", delta: tc.delta}, faults: &faults}
			for i, e := range tc.events {
				c.event(ev(i+1, e))
			}
			n, kinds, samples := faults.result()
			if n != len(tc.want) || (n > 0 && !maps.Equal(kinds, tc.want)) {
				t.Errorf("faults %v %q, want %v", kinds, samples, tc.want)
			}
		})
	}
}

func TestFailureKind(t *testing.T) {
	closed := websocket.CloseError{Code: websocket.StatusPolicyViolation, Reason: "Client too slow"}
	cases := []struct {
		name      string
		err       error
		phaseOver bool
		want      string
	}{
		{"closed by the server", &piclient.CallError{Kind: piclient.ErrLost, Err: fmt.Errorf("prompt p0: connection closed before the response: %w", closed)}, false,
			"connection closed by the server (1008 StatusPolicyViolation)"},
		{"cut", &piclient.CallError{Kind: piclient.ErrLost, Err: errors.New("EOF")}, false, "connection lost"},
		{"command timeout", &piclient.CallError{Kind: piclient.ErrWait, Err: context.DeadlineExceeded}, false, "command timeout"},
		{"load timeout", &piclient.CallError{Kind: piclient.ErrWait, Err: context.DeadlineExceeded}, true, "load timeout"},
		{"send", &piclient.CallError{Kind: piclient.ErrSend, Err: errors.New("broken pipe")}, false, "send failed"},
		{"other", errors.New("encode"), false, "transport"},
	}
	for _, tc := range cases {
		if got := failureKind(tc.err, tc.phaseOver); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestIdleReadings checks the settling and idle-wait readings of the
// RSS in a bubble's time.
func TestIdleReadings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if _, err := settledMemory(t.Context(), os.Getpid(), time.Second); err != nil {
			t.Fatal(err)
		}
		// This process does not grow by 128 KiB in no time; it may keep
		// moving (other tests of the package run beside it), and then the
		// wait gives up at ten times the settle time, on the poll after.
		if took := time.Since(start); took < time.Second || took > 10*time.Second+100*time.Millisecond {
			t.Errorf("settled after %s, want 1 s to 10.1 s", took)
		}
		samples, err := watchIdle(t.Context(), os.Getpid(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(samples) != 10 || samples[9].After != time.Minute || samples[0].After != 6*time.Second || samples[0].RSS <= 0 {
			t.Errorf("samples %+v: want 10, every 6 s up to 1 min", samples)
		}
	})
}

// TestRunSlowReadersKeepUp: slow readers of long answers, against 1 MiB
// per client and for everyone, are not cut off: once behind, their
// deltas merge, so what waits for them stays bounded by the current
// message. Every answer is still checked whole, and the report's
// send-budget row says nobody was cut.
func TestRunSlowReadersKeepUp(t *testing.T) {
	needBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log strings.Builder
	rep, err := Run(ctx, Options{Binary: agentdBin, Sessions: 4, Rounds: 1, Chunks: 1000, GetStates: -1,
		ReadDelay: 2 * time.Millisecond, Settle: -1, ServerLog: &log,
		ServerArgs: []string{"--max-queued-bytes", "1048576", "--max-queued-bytes-total", "1048576"}})
	if err != nil {
		t.Fatalf("Run: %v\nserver stderr:\n%s", err, log.String())
	}
	if rep.Errors != 0 || rep.SendBudgetCuts != 0 {
		t.Fatalf("errors %d %v, send budget cuts %d; want none", rep.Errors, rep.ErrorKinds, rep.SendBudgetCuts)
	}
	var tb strings.Builder
	if err := WriteTable(&tb, []Report{rep}); err != nil || !regexp.MustCompile(`(?m)^clients cut off \(send budget\) +0$`).MatchString(tb.String()) {
		t.Errorf("table: %v\n%s", err, tb.String())
	}
}

// TestReadCPU reads this process as both server and bench after some
// work.
func TestReadCPU(t *testing.T) {
	m0, err := readCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var m1 cpuMark
	for x := 0; ; x++ {
		if m1, err = readCPU(os.Getpid()); err != nil {
			t.Fatal(err)
		}
		// /proc counts in ticks, the process's and the machine's each
		// rounded on its own, and an idle CPU's ticks reach /proc/stat
		// late (tickless idle): work until this process's count moved by
		// a few and the machine's has caught up with it.
		if d := m1.server - m0.server; d >= 3*ticks(1) && m1.total-m0.total >= d {
			break
		}
	}
	u := m1.since(m0)
	if u.Server <= 0 || u.Bench <= 0 || u.Capacity < u.Server || u.Others < 0 {
		t.Errorf("%+v", u)
	}
	if s := u.String(); !strings.Contains(s, " of ") {
		t.Errorf("String: %q", s)
	}
}

// TestRunSessionWS watches two busy sessions with six watchers on the
// per-session WebSocket, at ten times the default progress rate and with
// pings every 300 ms: each watcher gets a completed for each run of its
// session, progress_updates keep to the interval, pings are answered,
// the server's shutdown closes every watcher with 1001, and nothing
// fails.
func TestRunSessionWS(t *testing.T) {
	needBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log strings.Builder
	rep, err := Run(ctx, Options{Binary: agentdBin, Sessions: 2, Watchers: 6, Rounds: 4, Chunks: 100, PlanSteps: 3, GetStates: -1,
		OwnLifecycle: true, IdleWait: 700 * time.Millisecond, Settle: -1, ServerLog: &log,
		ServerArgs: []string{"--ws-progress-interval", "100ms", "--ws-heartbeat=300ms"}})
	if err != nil {
		t.Fatalf("Run: %v\nserver stderr:\n%s", err, log.String())
	}
	sw := rep.SessionWS
	t.Logf("report: %+v\nsession-ws: %+v", rep, sw)
	if rep.Errors != 0 {
		t.Fatalf("%d errors %v: %q\nserver stderr:\n%s", rep.Errors, rep.ErrorKinds, rep.ErrorSamples, log.String())
	}
	if sw == nil {
		t.Fatal("no session-ws report")
	}
	// 2 sessions x 4 rounds x (3 plan steps + 2) turns.
	if rep.Prompts != 8 || rep.ModelRequests != 40 || rep.AnswersChecked != 40 {
		t.Errorf("prompts %d, model requests %d, answers checked %d; want 8, 40, 40", rep.Prompts, rep.ModelRequests, rep.AnswersChecked)
	}
	if sw.Watchers != 6 || sw.Failed != 0 || sw.ProgressInterval != 100*time.Millisecond || sw.PlanSteps != 3 {
		t.Errorf("watchers %d, failed %d, interval %s, plan steps %d", sw.Watchers, sw.Failed, sw.ProgressInterval, sw.PlanSteps)
	}
	// Each watcher watches one of the 2 sessions, which ran 4 times each.
	if sw.CompletedExpected != 24 || sw.CompletedMissing != 0 || sw.CompletedDuplicate != 0 {
		t.Errorf("completed expected %d, missing %d, twice %d; want 24, 0, 0", sw.CompletedExpected, sw.CompletedMissing, sw.CompletedDuplicate)
	}
	// The runs take several intervals: progress moves during them.
	if sw.ProgressOverRate != 0 || sw.ProgressPerSessionMax < 2 || sw.ProgressPerSessionMax > sw.ProgressAllowed {
		t.Errorf("progress over rate %d, per session at most %d of %d allowed", sw.ProgressOverRate, sw.ProgressPerSessionMax, sw.ProgressAllowed)
	}
	if sw.Messages["progress_update"] == 0 || sw.Messages["status_change"] == 0 || sw.MessagesPerSec <= 0 || sw.Bytes <= 0 {
		t.Errorf("messages %v, %.0f/s, %d bytes", sw.Messages, sw.MessagesPerSec, sw.Bytes)
	}
	// 700 ms idle at the end is two pings at least.
	if sw.Pings < 12 || sw.EarlyCloses != 0 || sw.CloseCodes["1001"] != 6 {
		t.Errorf("pings %d, early closes %d, close codes %v; want 12 or more, 0, 1001 x6", sw.Pings, sw.EarlyCloses, sw.CloseCodes)
	}
	if sw.RSSWatchers <= 0 {
		t.Errorf("RSS with watchers %d", sw.RSSWatchers)
	}
	var tb strings.Builder
	if err := WriteTable(&tb, []Report{rep}); err != nil || !strings.Contains(tb.String(), "completed: expected, missing, twice") {
		t.Errorf("table: %v\n%s", err, tb.String())
	}
	t.Logf("table:\n%s", tb.String())
}

// TestPlanScript walks the mock through two prompts' runs: a todo call
// per step and one to finish, then the text alone, and a new prompt
// starts the plan again.
func TestPlanScript(t *testing.T) {
	text := textScript(2)
	msgs := []any{map[string]any{"role": "user", "content": "first"}}
	var statuses []string
	for turn := 0; ; turn++ {
		if turn > 10 {
			t.Fatal("the run never ends")
		}
		s := planScript(text, 3, &wiremock.Request{JSON: map[string]any{"messages": msgs}})
		if !slices.Equal(s.Text, text.Text) {
			t.Fatalf("turn %d: text %q, want %q", turn, s.Text, text.Text)
		}
		if len(s.ToolCalls) == 0 {
			break
		}
		tc := s.ToolCalls[0]
		var args struct {
			Todos []struct{ Content, Status string }
		}
		if err := json.Unmarshal([]byte(strings.Join(tc.Args, "")), &args); err != nil || tc.Name != "todo" || len(args.Todos) != 3 {
			t.Fatalf("turn %d: call %+v: %v", turn, tc, err)
		}
		var st []string
		for _, it := range args.Todos {
			st = append(st, it.Status[:1])
		}
		statuses = append(statuses, strings.Join(st, ""))
		msgs = append(msgs, map[string]any{"role": "assistant"}, map[string]any{"role": "tool", "tool_call_id": tc.ID})
	}
	// p: pending, i: in_progress, c: completed.
	if want := []string{"ipp", "cip", "cci", "ccc"}; !slices.Equal(statuses, want) {
		t.Errorf("plan went %q, want %q", statuses, want)
	}
	msgs = append(msgs, map[string]any{"role": "assistant"}, map[string]any{"role": "user", "content": "second"})
	if s := planScript(text, 3, &wiremock.Request{JSON: map[string]any{"messages": msgs}}); len(s.ToolCalls) != 1 {
		t.Errorf("a new prompt: %d tool calls, want the plan's first", len(s.ToolCalls))
	}
}

func TestProgressIntervalOf(t *testing.T) {
	cases := []struct {
		args []string
		want time.Duration
		err  bool
	}{
		{nil, time.Second, false},
		{[]string{"--ws-progress-interval", "100ms"}, 100 * time.Millisecond, false},
		{[]string{"-ws-progress-interval=250ms", "--log-level", "debug"}, 250 * time.Millisecond, false},
		{[]string{"--ws-progress-interval=2s", "--ws-progress-interval", "50ms"}, 50 * time.Millisecond, false},
		{[]string{"--ws-heartbeat", "5s"}, time.Second, false},
		{[]string{"--ws-progress-interval"}, 0, true},
		{[]string{"--ws-progress-interval", "fast"}, 0, true},
	}
	for _, tc := range cases {
		got, err := progressIntervalOf(tc.args)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("%q: %s, %v; want %s, error %v", tc.args, got, err, tc.want, tc.err)
		}
	}
}

// TestWatchProgressChecks feeds watchers progress_updates and checks
// the two bounds: per session in the load phase (one at once, then one
// per interval) and per watcher over its timestamps' span.
func TestWatchProgressChecks(t *testing.T) {
	at := func(ms ...int) []string {
		var ts []string
		for _, m := range ms {
			ts = append(ts, time.UnixMilli(int64(1_700_000_000_000+m)).UTC().Format("2006-01-02T15:04:05.000Z"))
		}
		return ts
	}
	cases := []struct {
		name   string
		stamps []string // live progress_updates, 100 ms apart at the least
		inLoad int64    // of which in the load phase of 1 s
		over   int
		gap    time.Duration
	}{
		{"one per interval", at(0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000), 11, 0, 100 * time.Millisecond},
		{"jitter within the slack", at(0, 130, 200, 300, 360, 460), 6, 0, 60 * time.Millisecond},
		{"one too many in the load phase", at(0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100), 12, 1, 100 * time.Millisecond},
		{"one too many by the stamps", at(0, 100, 110, 200, 300), 5, 1, 10 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var faults tally
			wo := &watchOptions{interval: 100 * time.Millisecond, faults: &faults}
			w := &watcher{sid: "s", opt: wo, ready: make(chan struct{}), subscribed: true, closeCode: -1}
			w.progressUpdate(at(-5000)[0]) // the subscribe's own
			for _, ts := range tc.stamps {
				w.progressUpdate(ts)
			}
			r := &WatchReport{ProgressInterval: wo.interval}
			ws := []*watcher{w}
			r.watchTotals(ws, watchMark{progress: []int64{1}}, watchMark{progress: []int64{1 + tc.inLoad}}, time.Second, func(string) int64 { return 0 }, &faults)
			r.watchEnd(ws, &faults)
			n, kinds, samples := faults.result()
			if r.ProgressOverRate != tc.over || n != tc.over || r.ProgressMinGap != tc.gap {
				t.Errorf("over rate %d, faults %v %q, least gap %s; want %d, %s", r.ProgressOverRate, kinds, samples, r.ProgressMinGap, tc.over, tc.gap)
			}
			if r.ProgressAllowed != 11 {
				t.Errorf("allowed %d in 1 s at one per 100 ms, want 11", r.ProgressAllowed)
			}
		})
	}
}

// TestRunREST drives two conversations over the REST API, each streamed
// to its driver and three watchers, with a plan step (a tool call the
// step's auto_confirm runs) in every run: every stream gets every run's
// run_ended and every event once and in order, the tokens join into the
// mock's answers, the shutdown ends every stream cleanly, and nothing
// fails.
func TestRunREST(t *testing.T) {
	needBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log strings.Builder
	rep, err := Run(ctx, Options{Binary: agentdBin, REST: true, Sessions: 2, SSEWatchers: 3, Rounds: 3, Chunks: 50, PlanSteps: 1,
		IdleWait: 300 * time.Millisecond, Settle: -1, ServerLog: &log})
	if err != nil {
		t.Fatalf("Run: %v\nserver stderr:\n%s", err, log.String())
	}
	rr := rep.REST
	t.Logf("report: %+v\nrest: %+v", rep, rr)
	if rep.Errors != 0 {
		t.Fatalf("%d errors %v: %q\nserver stderr:\n%s", rep.Errors, rep.ErrorKinds, rep.ErrorSamples, log.String())
	}
	if rr == nil {
		t.Fatal("no rest report")
	}
	// 2 conversations x 3 rounds x (1 plan step + 2) turns of 50 tokens.
	if rep.Prompts != 6 || rep.Commands != 6 || rep.ModelRequests != 18 || rr.Tokens != 900 || rep.AnswersChecked != 18 {
		t.Errorf("prompts %d, commands %d, model requests %d, tokens %d, driver answers checked %d; want 6, 6, 18, 900, 18",
			rep.Prompts, rep.Commands, rep.ModelRequests, rr.Tokens, rep.AnswersChecked)
	}
	// Every stream (a driver and 3 watchers per conversation) sees
	// every turn's answer and every run end.
	if rr.Watchers != 6 || rr.Failed != 0 || rr.AnswersChecked != 72 || rr.RunsExpected != 24 || rr.RunEndsMissing != 0 {
		t.Errorf("watchers %d, failed %d, answers checked %d, runs expected %d, run_ended missing %d; want 6, 0, 72, 24, 0",
			rr.Watchers, rr.Failed, rr.AnswersChecked, rr.RunsExpected, rr.RunEndsMissing)
	}
	if rr.Missing != 0 || rr.Duplicated != 0 || rr.OutOfOrder != 0 {
		t.Errorf("missing %d, twice %d, out of order %d", rr.Missing, rr.Duplicated, rr.OutOfOrder)
	}
	// Each watcher's conversation streamed 450 tokens; merged progress
	// events (a lagging client) are fewer, never more.
	if rr.Events["generation_complete"] != 54 || rr.Events["run_ended"] != 18 || rr.Events["tool"] == 0 ||
		rr.ProgressPerToken <= 0 || rr.ProgressPerToken > 1 || rr.BytesPerToken <= 0 || rr.EventsPerSecPerWatcher <= 0 ||
		rr.WireBytes <= rr.Bytes || rr.WireBytesPerToken <= rr.BytesPerToken {
		t.Errorf("events %v, progress per token %.3f, bytes per token %.1f (wire %.1f), per watcher %.1f/s",
			rr.Events, rr.ProgressPerToken, rr.BytesPerToken, rr.WireBytesPerToken, rr.EventsPerSecPerWatcher)
	}
	if rr.EarlyEnds != 0 || rr.Ends["eof"] != 8 || rr.RSSWatchers <= 0 || rep.ServerExit != 0 {
		t.Errorf("early ends %d, ends %v, RSS with watchers %d, exit %d; want 0, eof x8, >0, 0", rr.EarlyEnds, rr.Ends, rr.RSSWatchers, rep.ServerExit)
	}
	var tb strings.Builder
	if err := WriteTable(&tb, []Report{rep}); err != nil || !strings.Contains(tb.String(), "bytes per token per client") || strings.Contains(tb.String(), "get_state") {
		t.Errorf("table: %v\n%s", err, tb.String())
	}
	t.Logf("table:\n%s", tb.String())
}

// TestRunRESTSlowWatchers: watchers that pause after every event still
// get every event and the whole text of every answer (the server may
// join their queued tokens), and the shutdown ends their streams cleanly.
func TestRunRESTSlowWatchers(t *testing.T) {
	needBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log strings.Builder
	rep, err := Run(ctx, Options{Binary: agentdBin, REST: true, Sessions: 1, SSEWatchers: 2, Rounds: 2, Chunks: 200,
		ReadDelay: time.Millisecond, Settle: -1, ServerLog: &log})
	if err != nil {
		t.Fatalf("Run: %v\nserver stderr:\n%s", err, log.String())
	}
	if rep.Errors != 0 {
		t.Fatalf("%d errors %v: %q\nserver stderr:\n%s", rep.Errors, rep.ErrorKinds, rep.ErrorSamples, log.String())
	}
	rr := rep.REST
	if rr.ReadDelay != time.Millisecond || rr.AnswersChecked != 6 || rr.RunEndsMissing != 0 || rr.Ends["eof"] != 3 || rr.ProgressPerToken > 1 {
		t.Errorf("read delay %s, answers checked %d, run_ended missing %d, ends %v, progress per token %.3f; want 1ms, 6, 0, eof x3, at most 1",
			rr.ReadDelay, rr.AnswersChecked, rr.RunEndsMissing, rr.Ends, rr.ProgressPerToken)
	}
}

// TestSSEStreamChecks feeds the SSE reader scripted streams over real
// HTTP: each fault of the wire is counted under its kind, and a clean
// stream, with a merged progress event, has none.
func TestSSEStreamChecks(t *testing.T) {
	const connected = "id: 4\ndata: {\"type\":\"connected\",\"session_id\":\"a1\",\"seq\":4}\n\n"
	turn := func(seq int, tokens ...string) string {
		s := fmt.Sprintf("id: %d\ndata: {\"type\":\"generation_started\"}\n\n", seq)
		for i, tok := range tokens {
			s += fmt.Sprintf("id: %d\ndata: {\"type\":\"generation_progress\",\"token\":%q}\n\n", seq+1+i, tok)
		}
		end := seq + 1 + len(tokens)
		return s + fmt.Sprintf("id: %d\ndata: {\"type\":\"message_added\",\"message\":{\"role\":\"assistant\"}}\n\n", end) +
			fmt.Sprintf("id: %d\ndata: {\"type\":\"generation_complete\",\"message\":{\"role\":\"assistant\"}}\n\n", end) +
			fmt.Sprintf("id: %d\ndata: {\"type\":\"run_ended\",\"outcome\":\"completed\"}\n\n", end+1)
	}
	tests := []struct {
		name string
		body string
		want map[string]int // fault kinds
	}{
		{"clean", connected + "id: 4\ndata: {\"type\":\"ping\"}\n\n" + turn(5, "ab", "cd"), nil},
		{"merged tokens", connected + turn(5, "abcd"), nil},
		{"a token lost", connected + turn(5, "ab"), map[string]int{"sse streamed text wrong": 1}},
		{"an event twice", connected + turn(5, "ab", "cd") + "id: 9\ndata: {\"type\":\"run_ended\",\"outcome\":\"completed\"}\n\n",
			map[string]int{"sse event twice": 1}},
		{"a progress event twice", connected + "id: 5\ndata: {\"type\":\"generation_started\"}\n\n" +
			"id: 6\ndata: {\"type\":\"generation_progress\",\"token\":\"x\"}\n\n" + "id: 6\ndata: {\"type\":\"generation_progress\",\"token\":\"x\"}\n\n",
			map[string]int{"sse event twice": 1}},
		{"out of order", connected + "id: 7\ndata: {\"type\":\"generation_started\"}\n\n" + "id: 6\ndata: {\"type\":\"message_added\"}\n\n",
			map[string]int{"sse event out of order": 1}},
		{"an event line", connected + "event: message\nid: 5\ndata: {\"type\":\"generation_started\"}\n\n", map[string]int{"sse event line": 1}},
		{"no id", connected + "data: {\"type\":\"generation_started\"}\n\n", map[string]int{"sse event without an id": 1}},
		{"run failed", connected + "id: 5\ndata: {\"type\":\"run_ended\",\"outcome\":\"failed\"}\n\n", map[string]int{"sse run not completed": 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			var probs tally
			s, err := openSSE(context.Background(), srv.Client(), srv.URL, "c1", "watcher 0", 0, &sseOptions{timeout: 10 * time.Second, answer: "abcd", faults: &probs})
			if err != nil {
				t.Fatal(err)
			}
			<-s.readerDone
			s.close()
			if how, early := s.endState(); how != "eof" || !early {
				t.Errorf("end %q, early %t; want eof, early", how, early)
			}
			_, kinds, samples := probs.result()
			delete(kinds, "sse stream ended early")
			if len(kinds) == 0 {
				kinds = nil
			}
			if !maps.Equal(kinds, tc.want) {
				t.Errorf("faults %v, want %v: %q", kinds, tc.want, samples)
			}
			if s.attachID != "a1" || s.startSeq != 4 {
				t.Errorf("attachment %q, start seq %d", s.attachID, s.startSeq)
			}
		})
	}
}

// TestRESTMissingEvents: an event one stream of a conversation got after
// another attached, and the other did not, is missing from that one; an
// event from before a stream attached is not.
func TestRESTMissingEvents(t *testing.T) {
	mk := func(name string, start uint64, keys ...eventKey) *sseStream {
		s := &sseStream{conv: "c1", name: name, startSeq: start, keys: keys}
		s.runEnds.Store(1)
		return s
	}
	run := eventKey{9, "run_ended"}
	msg := eventKey{8, "message_added"}
	early := eventKey{3, "message_added"}
	c := &restConv{id: "c1", driver: mk("driver", 2, early, msg, run),
		watchers: []*sseStream{mk("watcher 0", 4, msg, run), mk("watcher 1", 4, run), nil}}
	var probs tally
	var r RESTReport
	r.loadTotals(streamsMark{}, streamsMark{}, 2, map[string]int{"c1/0": 1}, []*restConv{c}, 10, &probs)
	n, kinds, samples := probs.result()
	if r.Missing != 1 || n != 1 || kinds["sse event missing"] != 1 || !strings.Contains(samples[0], "watcher 1 of c1") {
		t.Errorf("missing %d, faults %v %q; want 1, watcher 1's message_added", r.Missing, kinds, samples)
	}
	if r.RunsExpected != 3 || r.RunEndsMissing != 0 || r.Tokens != 10 {
		t.Errorf("runs expected %d, missing %d, tokens %d", r.RunsExpected, r.RunEndsMissing, r.Tokens)
	}
}
