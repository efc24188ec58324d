package config

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestMCPTimeouts(t *testing.T) {
	for _, tc := range []struct {
		args        []string
		start, call time.Duration
		err         string
	}{
		{nil, DefaultMCPStartTimeout, DefaultMCPCallTimeout, ""},
		{[]string{"--mcp-start-timeout", "5m", "--mcp-call-timeout", "10s"}, 5 * time.Minute, 10 * time.Second, ""},
		{[]string{"--mcp-start-timeout", "-1s"}, 0, 0, "--mcp-start-timeout -1s: must not be negative"},
		{[]string{"--mcp-call-timeout", "-1s"}, 0, 0, "--mcp-call-timeout -1s: must not be negative"},
	} {
		e := Engine{Sandbox: Sandbox{Mode: "full-access"}}
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		e.Register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := e.Check()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: error %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if s, c := e.MCP.Durations(); s != tc.start || c != tc.call {
			t.Errorf("%v: %v %v, want %v %v", tc.args, s, c, tc.start, tc.call)
		}
	}
}
