package server

import (
	"crypto/rand"
	"encoding/base64"
	"net"
	"net/http"
	"strings"
)

// NewToken returns a random token for clients to present (256 bits,
// URL-safe).
func NewToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// HostPolicy says which Host headers name this server. A web page can
// make a browser send requests to a loopback server under a name the page
// controls (DNS rebinding); such a request carries that name as its Host,
// so refusing unknown names closes the hole for every face at once.
type HostPolicy struct {
	// Listen is the address the server listens on (host or host:port).
	Listen string
	// Allowed are more host names clients use to reach the server (a
	// DNS name in front of it, a reverse proxy's name).
	Allowed []string
}

// Allows reports whether a request's Host names this server: a loopback
// name (localhost and *.localhost, which browsers never resolve
// elsewhere), an IP literal (a rebinding page cannot make a browser send
// one for its own origin), the listen address, or an allowed name. The
// port is not compared: the request reached this listener.
func (p HostPolicy) Allows(host string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.ToLower(strings.Trim(name, "[]")), ".")
	if name == "" {
		return false
	}
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return true
	}
	if net.ParseIP(name) != nil {
		return true
	}
	listen := p.Listen
	if h, _, err := net.SplitHostPort(listen); err == nil {
		listen = h
	}
	if strings.EqualFold(strings.Trim(listen, "[]"), name) {
		return true
	}
	for _, a := range p.Allowed {
		if strings.EqualFold(strings.TrimSuffix(a, "."), name) {
			return true
		}
	}
	return false
}

// GuardHost is the one HTTP entry point's first check: a request whose
// Host does not name this server gets 403 before any face sees it (a
// WebSocket handshake included).
func GuardHost(p HostPolicy, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.Allows(r.Host) {
			http.Error(w, "Forbidden: the Host header "+quoteHost(r.Host)+" does not name this server (start agentd with --allowed-host to accept it)", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func quoteHost(h string) string {
	if len(h) > 100 {
		h = h[:100] + "..."
	}
	return `"` + strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '"' {
			return '?'
		}
		return r
	}, h) + `"`
}
