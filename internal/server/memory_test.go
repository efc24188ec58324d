package server

import "testing"

func TestReleaser(t *testing.T) {
	const mb = 1 << 20
	for _, tt := range []struct {
		name  string
		steps []uint64 // allocated per check
		want  []bool   // release at that check
	}{
		{"idle never", []uint64{0, 10 << 10, 0, 0}, []bool{false, false, false, false}},
		{"burst then quiet", []uint64{50 * mb, 40 * mb, 0, 10 << 10, 0, 0}, []bool{false, false, false, true, false, false}},
		{"busy all along", []uint64{50 * mb, 40 * mb, 30 * mb, 20 * mb}, []bool{false, false, false, false}},
		{"quiet broken by more load", []uint64{50 * mb, 0, 1 * mb, 0, 0}, []bool{false, false, false, false, true}},
		{"small trickle adds up to a burst", []uint64{8 * mb, 8 * mb, 0, 0}, []bool{false, false, false, true}},
		{"too little to be a burst", []uint64{2 * mb, 0, 0, 0}, []bool{false, false, false, false}},
		{"once per burst", []uint64{20 * mb, 0, 0, 0, 0, 20 * mb, 0, 0}, []bool{false, false, true, false, false, false, false, true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := releaser{last: 1000}
			total := uint64(1000)
			for i, d := range tt.steps {
				total += d
				if got := r.tick(total); got != tt.want[i] {
					t.Errorf("check %d (%d bytes allocated): release %t, want %t", i, d, got, tt.want[i])
				}
			}
		})
	}
}

// TestReleaserStart: the start-up is a burst, released once the new
// server has been quiet for quietTicks checks.
func TestReleaserStart(t *testing.T) {
	r := newReleaser(1000)
	if r.tick(1000) || !r.tick(1000+100<<10) || r.tick(1000+200<<10) {
		t.Error("a new server is not released once, at its second quiet check")
	}
}
