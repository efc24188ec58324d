package proclimit

import (
	"testing"
	"time"
)

// TestLimitArgs: what the supervisor's command line carries is what it
// reads back; a bad limit is refused.
func TestLimitArgs(t *testing.T) {
	for _, lim := range []Limits{{}, {Procs: 100}, {Memory: 64 << 20, CPU: 1500 * time.Millisecond}, {Procs: 32, Memory: 1 << 40, CPU: time.Hour}} {
		var got Limits
		for _, a := range lim.Args() {
			if ok, err := got.ParseArg(a); !ok || err != nil {
				t.Fatalf("%q: %v %v", a, ok, err)
			}
		}
		if got != lim {
			t.Errorf("%+v came back as %+v", lim, got)
		}
	}
	for _, a := range []string{"--limit-procs=0", "--limit-procs=x", "--limit-memory=-1", "--limit-cpu-ms=", "--limit-procs=99999999999"} {
		var l Limits
		if ok, err := l.ParseArg(a); !ok || err == nil {
			t.Errorf("%q: ok %v err %v", a, ok, err)
		}
	}
}
