package config

import (
	"flag"
	"io"
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
			_, err := parseServe(nil, tt.args)
			wantError(t, err, tt.want)
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
			s, err := parseServe(nil, tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Engine.Sandbox.Fallback; got != tt.want {
				t.Fatalf("fallback %q, want %q", got, tt.want)
			}
		})
	}
}

// The collector's settings come from --gc-percent and --memory-limit, or
// $GOGC when no flag is given; bad values are refused naming the flag or
// the variable.
func TestServeGC(t *testing.T) {
	tests := []struct {
		name    string
		gogc    string
		args    []string
		percent int
		limit   ByteSize
		want    string // error substring, "" for none
	}{
		{name: "defaults", percent: DefaultGCPercent},
		{name: "GOGC", gogc: "150", percent: 150},
		{name: "GOGC off", gogc: "off", percent: -1},
		{name: "flag wins", gogc: "150", args: []string{"--gc-percent", "400"}, percent: 400},
		{name: "flag off", args: []string{"--gc-percent", "OFF"}, percent: -1},
		{name: "limit MiB", args: []string{"--memory-limit", "512MiB"}, percent: DefaultGCPercent, limit: 512 << 20},
		{name: "limit bytes", args: []string{"--memory-limit", "1000000"}, percent: DefaultGCPercent, limit: 1000000},
		{name: "limit GiB", args: []string{"--memory-limit", "2 GiB"}, percent: DefaultGCPercent, limit: 2 << 30},
		{name: "bad GOGC", gogc: "lots", want: `GOGC="lots": want a percentage`},
		{name: "negative GOGC", gogc: "-5", want: `GOGC="-5"`},
		{name: "bad flag", args: []string{"--gc-percent", "2x"}, want: `invalid value "2x" for flag -gc-percent`},
		{name: "bad unit", args: []string{"--memory-limit", "5GB"}, want: `"5GB": want a size such as 512MiB`},
		{name: "negative limit", args: []string{"--memory-limit", "-1MiB"}, want: `"-1MiB"`},
		{name: "overflow", args: []string{"--memory-limit", "9999999999TiB"}, want: `"9999999999TiB"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseServe(map[string]string{"GOGC": tt.gogc}, tt.args)
			if wantError(t, err, tt.want) {
				return
			}
			if s.GCPercent != tt.percent || s.MemoryLimit != tt.limit {
				t.Fatalf("gc %d limit %d, want %d %d", s.GCPercent, s.MemoryLimit, tt.percent, tt.limit)
			}
		})
	}
}

// parseServe is the serve settings args and env give, with the error
// parsing or checking them gave.
func parseServe(env map[string]string, args []string) (Serve, error) {
	s := ServeDefaults(func(k string) string { return env[k] })
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s.Register(fs)
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	return s, s.Check()
}

// wantError fails t unless err holds want, or is nil when want is "". It
// reports whether an error was wanted: then the settings are not worth
// checking further.
func wantError(t *testing.T, err error, want string) bool {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("error %v, want %q", err, want)
	}
	return want != ""
}

// A token that is only whitespace is refused on every bind, from the flag
// or the environment, as a short one is: it is never taken as no token,
// which on loopback would start the server with no authentication.
func TestServeBlankToken(t *testing.T) {
	const token = "0123456789abcdef0123"
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"flag space loopback", nil, []string{"--token", " "}, "only whitespace"},
		{"flag tab newline loopback", nil, []string{"--token", "\t\n"}, "only whitespace"},
		{"flag space any host", nil, []string{"--host", "0.0.0.0", "--token", "  "}, "only whitespace"},
		{"flag space stdio", nil, []string{"--stdio", "--token", " "}, "only whitespace"},
		{"env space", map[string]string{"AGENTD_TOKEN": "   "}, nil, "only whitespace"},
		{"short", nil, []string{"--token", " abc "}, "too short"},
		{"unset loopback", nil, nil, ""},
		{"real token padded", nil, []string{"--token", " " + token + " "}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseServe(tt.env, tt.args)
			if wantError(t, err, tt.want) {
				return
			}
			if want := strings.TrimSpace(strings.Join(tt.args, "")); want != "" && s.Token != token {
				t.Fatalf("token %q, want %q", s.Token, token)
			}
		})
	}
}
