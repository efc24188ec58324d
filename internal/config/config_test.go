package config

import (
	"flag"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

func TestDefaultsFlagsAndChecks(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string // error substring, "" for none
		chk  func(*Config) bool
	}{
		{"home defaults", map[string]string{"HOME": "/h"}, nil, "", func(c *Config) bool {
			return c.ConfigDir == "/h/.agentd" && c.DataDir == "/h/.local/share/agentd" && c.StreamIdleTimeout == 5*time.Minute
		}},
		{"env overrides", map[string]string{"HOME": "/h", "AGENTD_CONFIG_DIR": "/c", "XDG_DATA_HOME": "/x", "AGENTD_LOG_LEVEL": "debug", "AGENTD_STREAM_IDLE_TIMEOUT": "90s"}, nil, "", func(c *Config) bool {
			return c.ConfigDir == "/c" && c.DataDir == "/x/agentd" && c.LogLevel == slog.LevelDebug && c.StreamIdleTimeout == 90*time.Second
		}},
		{"flags over env", map[string]string{"HOME": "/h", "AGENTD_CONFIG_DIR": "/c"}, []string{"--config-dir", "/f", "--pi-models", "pi"}, "", func(c *Config) bool {
			return c.ConfigDir == "/f" && c.PiModelsPath == "/h/.pi/agent/models.json"
		}},
		{"no home", map[string]string{}, nil, "no config directory", nil},
		{"bad env level", map[string]string{"HOME": "/h", "AGENTD_LOG_LEVEL": "loud"}, nil, `AGENTD_LOG_LEVEL="loud"`, nil},
		{"bad env timeout", map[string]string{"HOME": "/h", "AGENTD_STREAM_IDLE_TIMEOUT": "soon"}, nil, `AGENTD_STREAM_IDLE_TIMEOUT="soon"`, nil},
		{"bad format", map[string]string{"HOME": "/h"}, []string{"--log-format", "xml"}, `log format "xml"`, nil},
		{"negative timeout", map[string]string{"HOME": "/h"}, []string{"--stream-idle-timeout", "-1s"}, "must not be negative", nil},
		{"approval timeout default", map[string]string{"HOME": "/h"}, nil, "", func(c *Config) bool {
			return c.ApprovalTimeout == DefaultApprovalTimeout
		}},
		{"approval timeout env", map[string]string{"HOME": "/h", "AGENTD_APPROVAL_TIMEOUT": "0"}, nil, "", func(c *Config) bool {
			return c.ApprovalTimeout == 0
		}},
		{"approval timeout flag over env", map[string]string{"HOME": "/h", "AGENTD_APPROVAL_TIMEOUT": "1h"}, []string{"--approval-timeout", "90s"}, "", func(c *Config) bool {
			return c.ApprovalTimeout == 90*time.Second
		}},
		{"deprecated approval timeout name", map[string]string{"HOME": "/h"}, []string{"--ui-timeout", "2m"}, "", func(c *Config) bool {
			return c.ApprovalTimeout == 2*time.Minute
		}},
		{"bad env approval timeout", map[string]string{"HOME": "/h", "AGENTD_APPROVAL_TIMEOUT": "forever"}, nil, `AGENTD_APPROVAL_TIMEOUT="forever"`, nil},
		{"negative approval timeout", map[string]string{"HOME": "/h"}, []string{"--approval-timeout", "-1m"}, "approval timeout -1m0s: must not be negative", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Defaults(env(tt.env))
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			c.Register(fs)
			c.RegisterApprovalTimeout(fs, "ui-timeout")
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := c.Check()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want %q", err, tt.want)
			case tt.chk != nil && !tt.chk(&c):
				t.Fatalf("config %+v", c)
			}
		})
	}
}
