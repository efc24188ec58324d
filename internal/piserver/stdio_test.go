package piserver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// A stdio server with a token: nothing is sent and every command is
// refused until the client authenticates; then it is a normal connection.
func TestStdioWithTokenAuthenticatesFirst(t *testing.T) {
	fx := newFixture(t, fixtureConfig{})
	fx.srv.opt.StdioToken = "0123456789abcdef0123"
	input := strings.Join([]string{
		`{"type":"list_sessions","id":"early"}`,
		`not json`,
		`{"type":"authenticate","id":"a1","token":"wrong-token-wrong-token"}`,
		`{"type":"authenticate","id":"a2","token":"0123456789abcdef0123"}`,
		`{"type":"list_sessions","id":"late"}`,
	}, "\n") + "\n"
	var out syncBuffer
	if err := fx.srv.ServeStdio(context.Background(), strings.NewReader(input), &out); err != nil {
		t.Fatal(err)
	}
	_ = fx.layer.Shutdown(context.Background()) // drains: the last command answers
	var got []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		got = append(got, m)
	}
	want := []struct{ typ, id, cmd, err string }{
		{"response", "early", "list_sessions", "Missing authorization token: send {\"type\":\"authenticate\",\"token\":\"...\"} first"},
		{"response", "", "unknown", "Missing authorization token: send {\"type\":\"authenticate\",\"token\":\"...\"} first"},
		{"response", "a1", "authenticate", "Invalid token"},
		{"response", "a2", "authenticate", ""},
		{"server_ready", "", "", ""},
		{"startup_recovery_summary", "", "", ""},
	}
	if len(got) < len(want)+1 {
		t.Fatalf("%d frames:\n%s", len(got), out.String())
	}
	for i, w := range want {
		m := got[i]
		if m["type"] != w.typ || (w.id != "" && m["id"] != w.id) || (w.cmd != "" && m["command"] != w.cmd) {
			t.Errorf("frame %d = %v, want %+v", i, m, w)
		}
		if w.typ == "response" && (w.err == "") != (m["success"] == true) || (w.err != "" && m["error"] != w.err) {
			t.Errorf("frame %d = %v, want error %q", i, m, w.err)
		}
	}
	var late map[string]any
	for _, m := range got {
		if m["id"] == "late" {
			late = m
		}
	}
	if late["success"] != true {
		t.Errorf("after authenticating: %v", late)
	}
}
