package main

import (
	"strings"
	"testing"
)

// TestBenchBaselineFlags: --baseline-rounds needs --baseline and at
// least one round; the bench refuses before starting anything.
func TestBenchBaselineFlags(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no rounds", []string{"--baseline", "--baseline-rounds", "0"}, "--baseline-rounds 0: want at least 1, with --baseline"},
		{"rounds without --baseline", []string{"--baseline-rounds", "2"}, "--baseline-rounds 2: want at least 1, with --baseline"},
		{"baseline with a cluster", []string{"--baseline", "--cluster-nodes", "3"}, "--baseline: not with --cluster-nodes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, t.TempDir(), nil, "", append([]string{"bench"}, tt.args...)...)
			if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", r.code, r.stderr, tt.want)
			}
		})
	}
}
