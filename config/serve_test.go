package config

import (
	"flag"
	"strings"
	"testing"
)

// --pprof-addr serves profiles, which show memory and timing, so it is
// off unless given and refused anywhere but loopback.
func TestServePprofAddr(t *testing.T) {
	tests := []struct {
		args []string
		want string // error substring, "" for none
	}{
		{nil, ""},
		{[]string{"--pprof-addr", "127.0.0.1:6060"}, ""},
		{[]string{"--pprof-addr", "localhost:0"}, ""},
		{[]string{"--pprof-addr", "[::1]:6060"}, ""},
		{[]string{"--pprof-addr", "0.0.0.0:6060"}, `--pprof-addr "0.0.0.0:6060": want a loopback host:port`},
		{[]string{"--pprof-addr", ":6060"}, `--pprof-addr ":6060"`},
		{[]string{"--pprof-addr", "6060"}, `--pprof-addr "6060"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			s := ServeDefaults(func(string) string { return "" })
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			s.Register(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := s.Check()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// TestServeSandboxFallback: where the kernel cannot confine tools, a
// server on loopback starts unconfined (a newcomer's first run works on
// any machine) and one other machines reach refuses, unless told.
func TestServeSandboxFallback(t *testing.T) {
	const token = "0123456789abcdef0123"
	tests := []struct {
		args []string
		want string
	}{
		{nil, SandboxUnconfined},
		{[]string{"--stdio"}, SandboxUnconfined},
		{[]string{"--sandbox-fallback", "refuse"}, SandboxRefuse},
		{[]string{"--host", "0.0.0.0", "--token", token}, SandboxRefuse},
		{[]string{"--host", "0.0.0.0", "--token", token, "--sandbox-fallback", "unconfined"}, SandboxUnconfined},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			s := ServeDefaults(func(string) string { return "" })
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			s.Register(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if err := s.Check(); err != nil {
				t.Fatal(err)
			}
			if got := s.Engine.Sandbox.Fallback; got != tt.want {
				t.Fatalf("fallback %q, want %q", got, tt.want)
			}
		})
	}
}
