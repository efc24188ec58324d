package config

import (
	"testing"
	"time"
)

// TestServeServerLimits checks each limit flag lands in its server
// field, and that a rate limit of 0 (off) becomes the server's "off".
func TestServeServerLimits(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want func(ServerLimits) bool
	}{
		{"max sessions", []string{"--max-sessions", "7"}, func(l ServerLimits) bool { return l.MaxSessions == 7 }},
		{"max connections", []string{"--max-connections", "9"}, func(l ServerLimits) bool { return l.MaxConnections == 9 }},
		{"max frame bytes", []string{"--max-frame-bytes", "4096"}, func(l ServerLimits) bool { return l.MaxFrameBytes == 4096 }},
		{"rate limit", []string{"--rate-limit", "5"}, func(l ServerLimits) bool { return l.SessionRate == 5 }},
		{"rate limit off", []string{"--rate-limit", "0"}, func(l ServerLimits) bool { return l.SessionRate < 0 }},
		{"global rate limit off", []string{"--global-rate-limit", "0"}, func(l ServerLimits) bool { return l.GlobalRate < 0 }},
		{"control rate limit", []string{"--control-rate-limit", "11"}, func(l ServerLimits) bool { return l.ControlRate == 11 }},
		{"control rate limit off", []string{"--control-rate-limit", "0"}, func(l ServerLimits) bool { return l.ControlRate < 0 }},
		{"max pending", []string{"--max-pending", "3"}, func(l ServerLimits) bool { return l.MaxPending == 3 }},
		{"shutdown timeout", []string{"--shutdown-timeout", "3s"}, func(l ServerLimits) bool { return l.ShutdownTimeout == 3*time.Second }},
		{"command timeout", []string{"--command-timeout", "1m"}, func(l ServerLimits) bool { return l.LongCommandTimeout == time.Minute }},
		{"unset limits are the server's defaults", nil, func(l ServerLimits) bool {
			return l.UIResponseRate == 0 && l.ReadTimeout == 0 && l.MutateTimeout == 0
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc, err := parseServe(nil, tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if got := sc.ServerLimits(); !tt.want(got) {
				t.Errorf("%v: got %+v", tt.args, got)
			}
		})
	}
}
