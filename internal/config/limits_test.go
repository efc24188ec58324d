package config

import (
	"flag"
	"io"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/proclimit"
)

func TestToolLimitFlags(t *testing.T) {
	def := proclimit.Default()
	tests := []struct {
		args []string
		want proclimit.Limits
		err  string
	}{
		{nil, def, ""},
		{[]string{"--tool-max-procs", "100", "--tool-max-memory", "1GiB", "--tool-cpu-time", "90s"}, proclimit.Limits{Procs: 100, Memory: 1 << 30, CPU: 90 * time.Second}, ""},
		{[]string{"--tool-max-procs", "-1", "--tool-max-memory", "none", "--tool-cpu-time", "-1s"}, proclimit.Limits{}, ""},
		{[]string{"--tool-max-memory", "5"}, proclimit.Limits{}, "--tool-max-memory 5: must be at least 32MiB (or none)"},
		{[]string{"--tool-cpu-time", "10ms"}, proclimit.Limits{}, "--tool-cpu-time 10ms: must be at least 1s (or negative: no limit)"},
		{[]string{"--tool-max-procs", "3"}, proclimit.Limits{}, "--tool-max-procs 3: must be at least 32 (or negative: no limit)"},
		{[]string{"--tool-max-memory", "lots"}, proclimit.Limits{}, `invalid value "lots" for flag -tool-max-memory: "lots": want a size such as 512MiB or 2GiB (units B, KiB, MiB, GiB, TiB), or none`},
	}
	for _, tc := range tests {
		var l ToolLimits
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		l.Register(fs)
		err := fs.Parse(tc.args)
		if err == nil {
			err = l.Check()
		}
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%v: error %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if got := l.Limits(); got != tc.want {
			t.Errorf("%v: %+v, want %+v", tc.args, got, tc.want)
		}
	}
}
