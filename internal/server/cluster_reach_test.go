package server

import (
	"testing"

	"github.com/agentd-dev/agentd/internal/session"
)

// A replay from the cluster's stream reaches two event logs back: the
// log's reach and one takeover's jump.
func TestTooFarBack(t *testing.T) {
	def := uint64(session.DefaultEventLogSize)
	for _, tc := range []struct {
		name       string
		logSize    int
		cur, after uint64
		want       bool
	}{
		{"at the last event", 8, 100, 100, false},
		{"beyond the last event (not this bound's)", 8, 100, 200, false},
		{"two logs back", 8, 100, 84, false},
		{"one more", 8, 100, 83, true},
		{"zero", 8, 100, 0, true},
		{"zero, young session", 8, 10, 0, false},
		{"default log", 0, 3 * def, def, false},
		{"default log, older", 0, 3 * def, def - 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{cfg: Config{EventLogSize: tc.logSize}}
			if got := s.tooFarBack(tc.cur, tc.after); got != tc.want {
				t.Errorf("tooFarBack(%d, %d) with a log of %d = %v, want %v", tc.cur, tc.after, tc.logSize, got, tc.want)
			}
		})
	}
}
