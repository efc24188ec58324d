package server

import (
	"encoding/json"
	"net/http"
	"strings"
)

// IsUpgrade reports whether r asks for a WebSocket: an Upgrade header
// naming websocket, or a Connection header with the upgrade token.
func IsUpgrade(r *http.Request) bool {
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return true
	}
	for _, v := range r.Header.Values("Connection") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return true
			}
		}
	}
	return false
}

// UpgradesOnly passes WebSocket handshakes to next and answers any other
// request with a JSON 404 naming its path, the shape every HTTP face
// answers a missing resource with. The handler behind "/" is a WebSocket
// endpoint: without this, a client probing /.well-known/... or any
// unknown path got the WebSocket library's plain-text "handshake error",
// which no HTTP client reads as "not here".
func UpgradesOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if IsUpgrade(r) {
			next.ServeHTTP(w, r)
			return
		}
		msg := "Not found: " + r.URL.Path
		if r.URL.Path == "/" {
			msg = "Not found: / is the pi-server WebSocket; connect with a WebSocket client"
		}
		b, _ := json.Marshal(map[string]string{"error": msg})
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write(append(b, '\n'))
	})
}
