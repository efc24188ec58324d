package session_test

import (
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/session"
)

func TestBashTimeoutSetting(t *testing.T) {
	for _, tc := range []struct {
		set  time.Duration
		want float64
	}{
		{0, session.DefaultBashTimeout.Seconds()},
		{-1, 0}, // no limit
		{90 * time.Second, 90},
		{1500 * time.Millisecond, 1.5},
	} {
		if got := session.BashTimeoutSeconds(tc.set); got != tc.want {
			t.Errorf("BashTimeout %v: %v seconds, want %v", tc.set, got, tc.want)
		}
	}
	if session.DefaultBashTimeout != 10*time.Minute {
		t.Errorf("default %v", session.DefaultBashTimeout)
	}
}
