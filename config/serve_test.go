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
