package loadgen

import (
	"testing"
	"time"
)

// An event's lag at a watcher is its arrival less the earliest arrival
// of that event at any watcher of the session; what one watcher of a face
// got and another of the same face did not is missing for the latter.
func TestLagReport(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := func(face string, cross bool, sid string, seen map[uint64]time.Time) *lagWatcher {
		return &lagWatcher{face: face, cross: cross, sid: sid, seen: seen, stop: func() {}, done: closedChan()}
	}
	lw := &lagWatchers{ws: []*lagWatcher{
		w("pi", false, "s1", map[uint64]time.Time{1: at(0), 2: at(10), 3: at(20)}),
		w("pi", true, "s1", map[uint64]time.Time{1: at(5), 2: at(40), 3: at(120)}),
		w("sse", false, "s1", map[uint64]time.Time{1: at(1), 3: at(21)}),
		w("sse", true, "s1", map[uint64]time.Time{1: at(2)}),
		w("session-ws", false, "s2", map[uint64]time.Time{7: at(0)}),
		w("session-ws", true, "s2", map[uint64]time.Time{7: at(3)}),
	}}
	r := lw.report(2)
	tests := []struct {
		name string
		got  LagFigures
		want LagFigures
	}{
		{"pi single", r.Single["pi"], LagFigures{Events: 3}},
		{"pi cross", r.Cross["pi"], LagFigures{Events: 3, P50: 30 * time.Millisecond, P99: 100 * time.Millisecond, Max: 100 * time.Millisecond}},
		{"sse single", r.Single["sse"], LagFigures{Events: 2, P50: time.Millisecond, P99: time.Millisecond, Max: time.Millisecond}},
		{"sse cross", r.Cross["sse"], LagFigures{Events: 1, P50: 2 * time.Millisecond, P99: 2 * time.Millisecond, Max: 2 * time.Millisecond, Missing: 1}},
		{"session-ws cross", r.Cross["session-ws"], LagFigures{Events: 1, P50: 3 * time.Millisecond, P99: 3 * time.Millisecond, Max: 3 * time.Millisecond}},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
