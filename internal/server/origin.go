package server

import "net/http"

// CheckOrigin applies the WebSocket handshake's origin rule to any HTTP
// request, so every face of the one port treats browsers alike: a request
// with no Origin (not a browser) is allowed, one from the server's own
// host is allowed, one whose origin host matches a pattern (path.Match,
// case-insensitive) is allowed; anything else is refused with the reason.
func CheckOrigin(r *http.Request, patterns []string) error { return checkOrigin(r, patterns) }
