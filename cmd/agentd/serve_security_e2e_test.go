package main

// Who may connect to agentd serve: only requests whose Host names the
// server (a page that rebinds its own name to 127.0.0.1 is refused before
// any face sees it), and, off loopback, only clients with a token long
// enough not to be guessed.

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// svRawRequest sends one raw HTTP request to the server with the given
// Host (and Origin) and returns the status code. Raw, because Go's
// clients pick the Host themselves.
func svRawRequest(t *testing.T, s *svServer, path, host, origin string, upgrade bool) int {
	t.Helper()
	conn, err := net.DialTimeout("tcp", s.loopback(), svWait)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(svWait))
	var b strings.Builder
	b.WriteString("GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n")
	if origin != "" {
		b.WriteString("Origin: " + origin + "\r\n")
	}
	if upgrade {
		b.WriteString("Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n")
	}
	b.WriteString("\r\n")
	if _, err := conn.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the response to Host %q: %v", host, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestServeHostCheck(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e, "--allowed-host", "agent.example.test")
	port := s.port()
	cases := []struct {
		name, host, origin string
		upgrade            bool
		want               int
	}{
		// What a browser sends after a page rebinds its own name to
		// 127.0.0.1: its name as Host and Origin.
		{"rebinding WebSocket handshake", "evil.com:" + port, "http://evil.com:" + port, true, http.StatusForbidden},
		{"rebinding without Origin", "evil.com:" + port, "", true, http.StatusForbidden},
		{"rebinding HTTP endpoint", "evil.com:" + port, "http://evil.com:" + port, false, http.StatusForbidden},
		{"rebinding to a name ending in localhost's letters", "notlocalhost:" + port, "", true, http.StatusForbidden},
		{"loopback name", "localhost:" + port, "", true, http.StatusSwitchingProtocols},
		{"loopback IPv4", "127.0.0.1:" + port, "", true, http.StatusSwitchingProtocols},
		{"loopback IPv6", "[::1]:" + port, "", true, http.StatusSwitchingProtocols},
		{"a .localhost name", "app.localhost:" + port, "", false, http.StatusOK},
		{"an allowed host", "agent.example.test:" + port, "", true, http.StatusSwitchingProtocols},
		{"an allowed host, any case", "Agent.Example.Test", "", false, http.StatusOK},
	}
	for _, tc := range cases {
		path := "/"
		if !tc.upgrade {
			path = "/healthz"
		}
		if got := svRawRequest(t, s, path, tc.host, tc.origin, tc.upgrade); got != tc.want {
			t.Errorf("%s (Host %q): HTTP %d, want %d", tc.name, tc.host, got, tc.want)
		}
	}
	// The refused handshake created nothing: the server lists no session
	// and still serves a proper client.
	c := s.dial("proper")
	svEq(t, "sessions", len(svArr(c.must("list_sessions", nil).m, "data", "sessions")), 0)
}

func TestServeTokenStrength(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	for _, tok := range []string{" ", "   ", "short", "fifteen-chars!!"} {
		code, stderr := svRunExit(t, e, nil, "--host", "0.0.0.0", "--token", tok)
		if code != 2 || !strings.Contains(stderr, "agentd token") {
			t.Errorf("--token %q off loopback: exit %d (want 2), stderr:\n%s", tok, code, stderr)
		}
	}
	// A whitespace-only token from the environment is no token either.
	code, stderr := svRunExit(t, e, []string{"AGENTD_TOKEN=  "}, "--host", "0.0.0.0")
	if code != 2 || !strings.Contains(stderr, "--token") {
		t.Errorf("AGENTD_TOKEN of spaces off loopback: exit %d, stderr:\n%s", code, stderr)
	}

	// agentd token prints one that works.
	r := run(t, e.home, nil, "", "token")
	tok := strings.TrimSpace(r.stdout)
	if r.code != 0 || len(tok) < 32 || strings.ContainsAny(tok, " /+=") {
		t.Fatalf("agentd token: exit %d, %q", r.code, r.stdout)
	}
	if again := strings.TrimSpace(run(t, e.home, nil, "", "token").stdout); again == tok {
		t.Errorf("agentd token printed the same token twice")
	}
	s := svStart(t, e, "--host", "0.0.0.0", "--token", tok)
	c := s.dialRaw(t, svDialOpts{header: map[string][]string{"Authorization": {"Bearer " + tok}}})
	c.ready()
	svWantOK(t, c.call(svM{"id": "l", "type": "list_sessions"}))
}

// agentd serve --stdio with a token (stdio exposed through ssh or socat):
// the client authenticates before anything else; until then every command
// is refused with the reason and nothing is broadcast to it.
func TestServeStdioToken(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	tok := "stdio-token-0123456789"
	_, c := svStartStdio(t, e, "--token", tok)
	r := c.call(svM{"id": "l0", "type": "list_sessions"})
	svWantErrPrefix(t, r, "Missing authorization token")
	svEq(t, "refused command", r.m["command"], "list_sessions")
	if fs := c.snapshot(); len(fs) != 1 {
		t.Errorf("an unauthenticated stdio client got %d frames: %v", len(fs), fs)
	}
	svWantErr(t, c.call(svM{"id": "a0", "type": "authenticate", "token": "not-the-token"}), "Invalid token")
	svWantOK(t, c.call(svM{"id": "a1", "type": "authenticate", "token": tok}))
	c.waitType("server_ready")
	svWantOK(t, c.call(svM{"id": "l1", "type": "list_sessions"}))
}

// --auth-command: an operator's program decides about each connection. A
// refused WebSocket is closed with 1008 and the program's reason before
// anything is sent; a refused stdio client gets the reason for every
// command.
func TestServeAuthCommand(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	prog := filepath.Join(e.root, "auth.sh")
	body := "#!/bin/sh\nread -r req\ncase \"$req\" in\n" +
		`*'"transport":"stdio"'*) echo '{"allowed":false,"reason":"stdio denied"}' ;;` + "\n" +
		`*'"X-User":["ann"]'*) echo '{"allowed":true,"identity":"ann"}' ;;` + "\n" +
		`*) echo '{"allowed":false,"reason":"unknown user"}' ;;` + "\nesac\n"
	if err := os.WriteFile(prog, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	s := svStart(t, e, "--auth-command", prog)
	c := s.dialRaw(t, svDialOpts{})
	code, reason := c.waitClosed()
	svEq(t, "close", fmt.Sprint(code, " ", reason), fmt.Sprint(websocket.StatusPolicyViolation, " unknown user"))
	if fs := c.snapshot(); len(fs) > 0 {
		t.Errorf("a refused connection got frames: %v", fs)
	}
	ok := s.dialRaw(t, svDialOpts{header: map[string][]string{"X-User": {"ann"}}})
	ok.ready()
	svWantOK(t, ok.call(svM{"id": "l", "type": "list_sessions"}))

	_, sc := svStartStdio(t, e2eNewEnv(t, e2eOpts{}), "--auth-command", prog)
	r := sc.call(svM{"id": "stdio-auth-1", "type": "list_sessions"})
	svWantErr(t, r, "stdio denied")
	svEq(t, "command", r.m["command"], "list_sessions")
}
