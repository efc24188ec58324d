package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "auth.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCommandAuthenticator(t *testing.T) {
	req := AuthRequest{Transport: "websocket", Remote: "127.0.0.1:5", Path: "/?x=1", Headers: map[string][]string{"X-User": {"ann"}}}
	tests := []struct {
		name, body string
		allowed    bool
		reason     string
	}{
		{"allows by the request", `grep -q '"X-User":\["ann"\]' && echo '{"allowed":true,"identity":"ann"}' || echo '{"allowed":false,"reason":"who?"}'`, true, ""},
		{"refuses with a reason", `cat >/dev/null; echo '{"allowed":false,"reason":"stdio denied"}'`, false, "stdio denied"},
		{"refuses without one", `cat >/dev/null; echo '{"allowed":false}'`, false, "Not allowed"},
		{"fails closed on exit 1", `exit 1`, false, "Authentication failed: the auth command did not answer"},
		{"fails closed on garbage", `echo yes`, false, "Authentication failed"},
		{"fails closed on unknown fields", `echo '{"allowed":true,"admin":true}'`, false, "Authentication failed"},
		{"fails closed on silence", `sleep 5`, false, "no answer within"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A command that answers gets a minute, so a busy machine
			// starting the shell slowly is never taken for silence; the
			// silent one waits out a short timeout.
			timeout := time.Minute
			if tt.reason == "no answer within" {
				timeout = 500 * time.Millisecond
			}
			a := CommandAuthenticator{Argv: []string{script(t, tt.body)}, Timeout: timeout}
			res := a.Authenticate(context.Background(), req)
			if res.Allowed != tt.allowed || !strings.Contains(res.Reason, tt.reason) {
				t.Errorf("= %+v, want allowed %v, reason containing %q", res, tt.allowed, tt.reason)
			}
		})
	}
}
