package server

import "testing"

func TestShouldRelease(t *testing.T) {
	const mb = 1 << 20
	for _, tt := range []struct {
		quiet                    bool
		held, floor, idle, inUse uint64
		want                     bool
	}{
		{false, 10 * mb, 0, 0, 10 * mb, false},
		{true, 12 * mb, 0, 1 * mb, 11 * mb, false},       // quiet but small
		{true, 60 * mb, 0, 2 * mb, 58 * mb, true},        // quiet after a burst: its garbage
		{true, 60 * mb, 50 * mb, 2 * mb, 58 * mb, false}, // released already, little grew since
		{false, 60 * mb, 0, 2 * mb, 58 * mb, false},      // busy
		{false, 520 * mb, 0, 500 * mb, 20 * mb, true},    // idle pages after a collection
		{false, 464 * mb, 0, 64 * mb, 400 * mb, false},
	} {
		if got := shouldRelease(tt.quiet, tt.held, tt.floor, tt.idle, tt.inUse); got != tt.want {
			t.Errorf("shouldRelease(quiet %v, %d held, %d floor, %d idle, %d in use MiB) = %v",
				tt.quiet, tt.held/mb, tt.floor/mb, tt.idle/mb, tt.inUse/mb, got)
		}
	}
}
