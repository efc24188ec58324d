package sessionws

import (
	"testing"
	"time"
)

// TestAdmitMessage checks the message rate on the face's clock: the
// end-to-end test (TestSessionWSRateLimit) cannot say exactly how many
// of a burst the server stamped within one second of the machine's
// clock on a loaded machine, so the limit's exact count is proved here.
func TestAdmitMessage(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	tests := []struct {
		name string
		at   []time.Duration // when each message comes, after t0
		want []bool          // whether each is admitted
	}{
		{"ten at once, the eleventh refused", []time.Duration{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, []bool{true, true, true, true, true, true, true, true, true, true, false}},
		{"the eleventh a second after the first",
			[]time.Duration{0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000},
			[]bool{true, true, true, true, true, true, true, true, true, true, true}},
		{"the eleventh just within the second",
			[]time.Duration{0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 999},
			[]bool{true, true, true, true, true, true, true, true, true, true, false}},
		{"a refused message is not counted",
			[]time.Duration{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 500, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000},
			[]bool{true, true, true, true, true, true, true, true, true, true, false, true, true, true, true, true, true, true, true, true, true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := t0
			c := &conn{f: &Face{opt: Options{MessageRate: 10, Now: func() time.Time { return now }}}}
			for i, d := range tt.at {
				now = t0.Add(d * time.Millisecond)
				if got := c.admitMessage(); got != tt.want[i] {
					t.Errorf("message %d at +%dms: admitted %v, want %v", i, d, got, tt.want[i])
				}
			}
		})
	}
}
