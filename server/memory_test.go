package server

import "testing"

func TestShouldRelease(t *testing.T) {
	const mb = 1 << 20
	for _, tt := range []struct {
		idle, inUse uint64
		want        bool
	}{
		{0, 10 * mb, false},
		{31 * mb, 1 * mb, false},   // too little to matter
		{500 * mb, 20 * mb, true},  // after a burst
		{64 * mb, 400 * mb, false}, // busy: the idle pages are about to be reused
		{401 * mb, 400 * mb, true},
	} {
		if got := shouldRelease(tt.idle, tt.inUse); got != tt.want {
			t.Errorf("shouldRelease(%d MiB idle, %d MiB in use) = %v", tt.idle/mb, tt.inUse/mb, got)
		}
	}
}
