package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A request that is not a WebSocket handshake, on any path the WebSocket
// endpoint catches, is a JSON 404 naming the path; a handshake passes.
func TestUpgradesOnly(t *testing.T) {
	reached := 0
	ts := httptest.NewServer(UpgradesOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached++
		w.WriteHeader(http.StatusSwitchingProtocols)
	})))
	defer ts.Close()
	for _, tc := range []struct {
		method, path string
		hdr          map[string]string
		status       int
		err          string
	}{
		{"GET", "/.well-known/agent.json", nil, 404, "Not found: /.well-known/agent.json"},
		{"GET", "/api/v2/a2a", nil, 404, "Not found: /api/v2/a2a"},
		{"POST", "/", nil, 404, "Not found: / is the pi-server WebSocket; connect with a WebSocket client"},
		{"GET", "/", map[string]string{"Upgrade": "websocket", "Connection": "Upgrade"}, 101, ""},
		{"GET", "/x", map[string]string{"Connection": "keep-alive, Upgrade"}, 101, ""},
	} {
		req, _ := http.NewRequest(tc.method, ts.URL+tc.path, nil)
		for k, v := range tc.hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: status %d, want %d (%s)", tc.method, tc.path, resp.StatusCode, tc.status, body)
			continue
		}
		if tc.err == "" {
			continue
		}
		var m map[string]string
		if err := json.Unmarshal(body, &m); err != nil || m["error"] != tc.err || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: %s %q, want JSON error %q", tc.method, tc.path, resp.Header.Get("Content-Type"), body, tc.err)
		}
	}
	if reached != 2 {
		t.Errorf("the handshakes reached the endpoint %d times, want 2", reached)
	}
}
