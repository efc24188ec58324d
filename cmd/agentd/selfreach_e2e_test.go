package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// With --sandbox-network a confined bash may open TCP connections, and
// agentd's own port is one connect away on loopback. A server with no
// token let every local process in, so the tool could create a session
// there and run commands unconfined. Now the network makes a token
// mandatory: none given, agentd makes one, keeps it 0600 in its data dir
// and says where in its log; the tool's request without it is refused
// with 401 and nothing is created, and the token is not in the tool's
// environment.
func TestConfinedToolCannotReachTheServer(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStart(t, e, "--sandbox-network")
	path := filepath.Join(e.data, "server", "token")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no token file: %v; %s", err, s.stderrTail(20))
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v", st.Mode().Perm())
	}
	token := strings.TrimSpace(string(data))
	if log := s.stderr.String(); !strings.Contains(log, path) {
		t.Errorf("the log does not say where the token is: %s", log)
	}
	// A client without it is refused, even on loopback.
	resp, err := http.Get("http://" + s.loopback() + "/api/v2/conversations")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token on loopback: %d", resp.StatusCode)
	}
	A := s.dialRaw(t, svDialOpts{name: "A", header: http.Header{"Authorization": {"Bearer " + token}}})
	A.ready()
	svCreate(A, "sb")
	A.send(svM{"id": "p1", "type": "prompt", "sessionId": "sb", "message": `CMD:exec 3<>/dev/tcp/127.0.0.1/` + s.port() +
		` && printf 'PUT /api/v2/conversations/escaped HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}' >&3 && head -1 <&3; env | grep -c -- '` + token + `'`})
	te := A.waitEvent("sb", "tool_execution_end")
	svWantOK(t, A.response("p1"))
	out := svStr(te.m, "event", "result", "content", "0", "text")
	if !strings.Contains(out, " 401 ") {
		t.Fatalf("the tool's request to agentd's own port was not refused: %q", out)
	}
	if !strings.Contains(out, "\n0\n") {
		t.Errorf("the token is in the tool's environment: %q", out)
	}
	req, _ := http.NewRequest("GET", "http://"+s.loopback()+"/api/v2/conversations/escaped", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the tool's conversation: %d", resp.StatusCode)
	}
}
