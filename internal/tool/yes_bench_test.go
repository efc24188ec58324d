package tool

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkBashYes runs `yes` for 3 seconds through RunBash, as a bash
// tool call that prints without end, and reports the output it produced,
// the disk its full-output files take and this process's peak RSS (all
// of the test binary, so run it alone: -run '^$' -bench BashYes).
func BenchmarkBashYes(b *testing.B) {
	tmp := b.TempDir()
	env := Env{Cwd: b.TempDir(), TempDir: tmp, Environ: []string{"PATH=" + os.Getenv("PATH")}}
	for b.Loop() {
		r := RunBash(context.Background(), env, "yes", 3, nil)
		if !r.TimedOut {
			b.Fatalf("%+v", r)
		}
		b.ReportMetric(float64(r.Truncation.TotalBytes)/(1<<20), "output-MiB")
	}
	var disk int64
	_ = filepath.Walk(tmp, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			disk += fi.Size()
		}
		return nil
	})
	b.ReportMetric(float64(disk)/(1<<20)/float64(b.N), "disk-MiB/op")
	b.ReportMetric(float64(peakRSS())/1024, "peak-RSS-MiB")
}

// peakRSS is VmHWM from /proc/self/status, in KiB (0 where unknown).
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
