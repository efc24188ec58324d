package loadgen

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRunInterleaved: the baseline runs in rounds alternating with the
// load, on every face, shaped like that face's streams.
func TestRunInterleaved(t *testing.T) {
	needBinary(t)
	for _, tt := range []struct {
		name  string
		o     Options
		conns int
	}{
		{"pi", Options{Sessions: 2}, 2},
		{"session-ws", Options{Sessions: 2, Watchers: 4, PlanSteps: 1, GetStates: -1, OwnLifecycle: true}, 4},
		{"rest", Options{Sessions: 2, REST: true, SSEWatchers: 2}, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			o := tt.o
			o.Binary, o.BaselineBinary, o.Rounds, o.Chunks, o.StreamFormat, o.Settle = agentdBin, agentdBin, 1, 20, "delta", -1
			rep, err := RunInterleaved(ctx, o, 3)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Errors != 0 {
				t.Fatalf("errors %d %q", rep.Errors, rep.ErrorSamples)
			}
			if len(rep.BaselineRounds) != 3 {
				t.Fatalf("%d rounds, want 3", len(rep.BaselineRounds))
			}
			var fs []float64
			for i, r := range rep.BaselineRounds {
				want := "agentd"
				if i%2 == 1 {
					want = "baseline"
				}
				if r.First != want || r.Baseline.Errors != 0 || r.Baseline.Connections != tt.conns || r.Fraction <= 0 ||
					r.Fraction != r.EventsPerSec/r.Baseline.MessagesPerSec {
					t.Errorf("round %d: %+v; want %s first, %d connections, a positive fraction", i, r, want, tt.conns)
				}
				fs = append(fs, r.Fraction)
			}
			if m := median(rep.BaselineRounds, func(r BaselineRound) float64 { return r.Fraction }); rep.BaselineFraction != m {
				t.Errorf("fraction %v, want the median %v of %v", rep.BaselineFraction, m, fs)
			}
			var tb strings.Builder
			if err := WriteTable(&tb, []Report{rep}); err != nil || !strings.Contains(tb.String(), "face ÷ library, interleaved") {
				t.Errorf("table: %v\n%s", err, tb.String())
			}
		})
	}
}

func TestMedian(t *testing.T) {
	id := func(f float64) float64 { return f }
	for _, tt := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tt.in, id); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
