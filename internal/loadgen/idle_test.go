package loadgen

import (
	"bufio"
	"strings"
	"testing"
)

func TestMetricValue(t *testing.T) {
	for _, tt := range []struct {
		name, text string
		want       int64
		ok         bool
	}{
		{"found", "# HELP go_gc_heap_live_bytes x\n# TYPE go_gc_heap_live_bytes gauge\ngo_gc_heap_live_bytes 1.234567e+06\n", 1234567, true},
		{"integer", "go_goroutines 7\ngo_gc_heap_live_bytes 4096\n", 4096, true},
		{"a longer name is another metric", "go_gc_heap_live_bytes_total 5\n", 0, false},
		{"missing", "go_goroutines 7\n", 0, false},
		{"not a number", "go_gc_heap_live_bytes lots\n", 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := metricValue(bufio.NewScanner(strings.NewReader(tt.text)), "go_gc_heap_live_bytes")
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("metricValue = %d, %v; want %d, ok %t", got, err, tt.want, tt.ok)
			}
		})
	}
}
