package loadgen

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// percentile is the nearest-rank p-th percentile of ds (0 if empty). It
// sorts ds.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := (p*len(ds)+99)/100 - 1
	return ds[max(0, min(i, len(ds)-1))]
}

// tableRow is one measure of WriteTable: its name and its value in a
// report.
type tableRow struct {
	name string
	val  func(r Report) string
}

// WriteTable writes reports side by side: one row per measure, one column
// per run.
func WriteTable(w io.Writer, reps []Report) error {
	rows := []tableRow{
		{"sessions (N)", func(r Report) string { return strconv.Itoa(r.Sessions) }},
		{"rounds x tokens", func(r Report) string { return fmt.Sprintf("%d x %d", r.Rounds, r.Chunks) }},
		{"format, read delay, lifecycle", func(r Report) string {
			lc := "all"
			if r.OwnLifecycle {
				lc = "own"
			}
			return fmt.Sprintf("%s, %s, %s", r.StreamFormat, fmtDelay(r.ReadDelay), lc)
		}},
		{"setup (connect+create)", func(r Report) string { return fmtDur(r.Setup) }},
		{"commands answered/planned", func(r Report) string { return fmt.Sprintf("%d/%d", r.Commands, r.Planned) }},
		{"commands not run, late answers", func(r Report) string { return fmt.Sprintf("%d, %d", r.NotRun, r.LateResponses) }},
		{"duration", func(r Report) string { return fmtDur(r.Duration) }},
		{"commands/s", func(r Report) string { return fmt.Sprintf("%.0f", r.CommandsPerSec) }},
		{"events/s (all frames)", func(r Report) string { return fmt.Sprintf("%.0f", r.EventsPerSec) }},
		{"events/s (session events)", func(r Report) string { return fmt.Sprintf("%.0f", r.SessionEventsPerSec) }},
		{"frames (session events)", func(r Report) string { return fmt.Sprintf("%d (%d)", r.Frames, r.SessionEvents) }},
		{"bytes received", func(r Report) string { return fmtBytes(r.Bytes) }},
		{"answers checked", func(r Report) string { return strconv.FormatInt(r.AnswersChecked, 10) }},
		{"load CPU: server/bench/others", func(r Report) string { return r.LoadCPU.String() }},
		{"prompt latency p50/p99", func(r Report) string { return fmtDur(r.PromptP50) + " / " + fmtDur(r.PromptP99) }},
		{"mock time p50/p99", func(r Report) string { return fmtDur(r.MockP50) + " / " + fmtDur(r.MockP99) }},
		{"added latency p50/p99", func(r Report) string { return fmtDur(r.AddedP50) + " / " + fmtDur(r.AddedP99) }},
		{"get_state latency p50/p99", func(r Report) string { return fmtDur(r.GetStateP50) + " / " + fmtDur(r.GetStateP99) }},
		{"RSS baseline", func(r Report) string { return fmtBytes(r.RSSBaseline) }},
		{"RSS with N idle sessions", func(r Report) string { return fmtBytes(r.RSSSessions) }},
		{"RSS after the first session", func(r Report) string { return fmtBytes(r.RSSFirstSession) }},
		{"RSS per idle session, one conn", func(r Report) string {
			if r.IdleSessions == 0 {
				return "-"
			}
			return fmt.Sprintf("%s (x%d)", fmtBytes(r.RSSPerIdleSession), r.IdleSessions)
		}},
		{"RSS per session with its conn", func(r Report) string { return fmtBytes(r.RSSPerSession) }},
		{"RSS peak", func(r Report) string { return fmtBytes(r.RSSPeak) }},
		{"RSS right after load", func(r Report) string { return fmtBytes(r.RSSAfter) }},
		{"RSS after idle wait", func(r Report) string {
			if r.IdleWait <= 0 {
				return "-"
			}
			return fmtBytes(r.RSSIdle) + " (" + fmtDur(r.IdleWait) + ")"
		}},
		{"RssAnon baseline / after idle", func(r Report) string {
			if r.IdleWait <= 0 {
				return fmtBytes(r.RSSAnonBaseline) + " / -"
			}
			return fmtBytes(r.RSSAnonBaseline) + " / " + fmtBytes(r.RSSAnonIdle)
		}},
		{"live heap after idle (RSS/heap)", func(r Report) string {
			if r.HeapLiveIdle <= 0 {
				return "-"
			}
			return fmt.Sprintf("%s (%.2f)", fmtBytes(r.HeapLiveIdle), float64(r.RSSIdle)/float64(r.HeapLiveIdle))
		}},
		{"coder/websocket msgs/s", func(r Report) string {
			if r.Baseline == nil {
				return "-"
			}
			if r.Baseline.Errors > 0 {
				return fmt.Sprintf("%.0f (%d errors)", r.Baseline.MessagesPerSec, r.Baseline.Errors)
			}
			return fmt.Sprintf("%.0f", r.Baseline.MessagesPerSec)
		}},
		{"  (conns x msgs x bytes)", func(r Report) string {
			if r.Baseline == nil {
				return "-"
			}
			b := r.Baseline
			return fmt.Sprintf("%d x %d x %d", b.Connections, b.MessagesPerConn, b.Size)
		}},
		{"  CPU: server/bench/others", func(r Report) string {
			if r.Baseline == nil {
				return "-"
			}
			return r.Baseline.CPU.String()
		}},
		{"events/s ÷ library (all/session)", func(r Report) string {
			if r.Baseline == nil {
				return "-"
			}
			return fmt.Sprintf("%.3f / %.3f", r.BaselineFraction, r.SessionEventsFraction)
		}},
		{"face ÷ library, interleaved", func(r Report) string {
			if len(r.BaselineRounds) == 0 {
				return "-"
			}
			var b strings.Builder
			fmt.Fprintf(&b, "%.3f (", r.BaselineFraction)
			for i, br := range r.BaselineRounds {
				if i > 0 {
					b.WriteByte(' ')
				}
				fmt.Fprintf(&b, "%.3f", br.Fraction)
			}
			b.WriteString(")")
			return b.String()
		}},
	}
	if slices.ContainsFunc(reps, func(r Report) bool { return r.SessionWS != nil }) {
		rows = append(rows, watchRows...)
	}
	if slices.ContainsFunc(reps, func(r Report) bool { return r.REST != nil }) {
		rows = append(rows, restRows...)
	}
	if slices.ContainsFunc(reps, func(r Report) bool { return r.Cluster != nil }) {
		rows = append(append(rows, clusterRows...), lagRows()...)
	}
	if !slices.ContainsFunc(reps, func(r Report) bool { return r.REST == nil }) {
		rows = slices.DeleteFunc(rows, func(row tableRow) bool { return piOnlyRows[row.name] })
	}
	rows = append(rows, []tableRow{
		{"model requests", func(r Report) string { return strconv.Itoa(r.ModelRequests) }},
		{"shutdown (exit code, notices)", func(r Report) string {
			return fmt.Sprintf("%s (%d, %d)", fmtDur(r.Shutdown), r.ServerExit, r.ShutdownNotices)
		}},
		{"clients cut off (send budget)", func(r Report) string {
			if r.SendBudgetCuts < 0 {
				return "?"
			}
			return strconv.FormatInt(r.SendBudgetCuts, 10)
		}},
		{"server warnings", func(r Report) string { return strconv.Itoa(r.ServerWarnings) }},
		{"errors", func(r Report) string { return strconv.Itoa(r.Errors) }},
	}...)
	width := 0
	for _, row := range rows {
		width = max(width, len(row.name))
	}
	cols := make([][]string, len(reps))
	colw := make([]int, len(reps))
	for j, r := range reps {
		for _, row := range rows {
			v := row.val(r)
			cols[j] = append(cols[j], v)
			colw[j] = max(colw[j], len(v))
		}
	}
	var b strings.Builder
	for i, row := range rows {
		fmt.Fprintf(&b, "%-*s", width, row.name)
		for j := range reps {
			fmt.Fprintf(&b, "  %*s", colw[j], cols[j][i])
		}
		b.WriteByte('\n')
	}
	for _, r := range reps {
		for _, k := range slices.Sorted(maps.Keys(r.ErrorKinds)) {
			fmt.Fprintf(&b, "N=%d errors: %d %s\n", r.Sessions, r.ErrorKinds[k], k)
		}
		for _, s := range r.ErrorSamples {
			fmt.Fprintf(&b, "N=%d error: %s\n", r.Sessions, s)
		}
		for _, s := range r.ServerWarningSamples {
			fmt.Fprintf(&b, "N=%d server: %s\n", r.Sessions, s)
		}
		if bl := r.Baseline; bl != nil {
			for _, s := range bl.ErrorSamples {
				fmt.Fprintf(&b, "N=%d baseline error: %s\n", r.Sessions, s)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// piOnlyRows are the rows that say nothing of a run of the REST face,
// left out of a table of such runs only.
var piOnlyRows = map[string]bool{
	"format, read delay, lifecycle": true, "events/s (session events)": true, "frames (session events)": true,
	"get_state latency p50/p99": true, "coder/websocket msgs/s": true, "  (conns x msgs x bytes)": true,
	"  CPU: server/bench/others": true, "events/s ÷ library (all/session)": true,
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}

func fmtDelay(d time.Duration) string {
	if d == 0 {
		return "none"
	}
	return d.String()
}

func fmtBytes(n int64) string {
	switch {
	case n < 0:
		return "-" + fmtBytes(-n)
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
}
