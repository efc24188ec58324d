package server

import "testing"

// Where a session's seq continues on the node that claims it.
func TestNextSeq(t *testing.T) {
	for _, tc := range []struct {
		name                string
		reserved, published uint64
		logSize             int
		want                uint64
	}{
		{"a handover: the exact last seq", 86, 86, 0, 86},
		{"a crash: past the stream by the log's size", 65_537, 86, 0, 86 + 4096},
		{"a crash, a smaller log", 65_537, 86, 100, 186},
		{"a crash with a reservation below that", 120, 86, 0, 120},
		{"nothing in the stream: a session from before the cluster", 10_000, 0, 0, 10_000},
		{"a new session", 0, 0, 0, 0},
		{"a stream past the record", 10, 50, 0, 50},
	} {
		if got := nextSeq(tc.reserved, tc.published, tc.logSize); got != tc.want {
			t.Errorf("%s: nextSeq(%d, %d, %d) = %d, want %d", tc.name, tc.reserved, tc.published, tc.logSize, got, tc.want)
		}
	}
}
