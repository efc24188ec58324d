package convapi

import (
	"net/http"
	"strings"
	"testing"
)

const testToken = "s3cret-token-of-enough-length"

func TestTokenAuth(t *testing.T) {
	fx := newFixture(t, fixtureOptions{token: testToken})
	tests := []struct {
		name   string
		path   string
		hdr    []string
		status int
		msg    string
	}{
		{"no credentials", "/api/v2/conversations", nil, 401, "Missing authentication credentials"},
		{"wrong token", "/api/v2/conversations", []string{"Authorization", "Bearer wrong-token"}, 401, "Invalid or expired token"},
		{"another scheme", "/api/v2/conversations", []string{"Authorization", "Basic " + testToken}, 401, "Invalid authentication scheme"},
		{"no scheme", "/api/v2/conversations", []string{"Authorization", testToken}, 401, "Invalid authorization header format"},
		{"bearer", "/api/v2/conversations", []string{"Authorization", "Bearer " + testToken}, 200, ""},
		{"bearer, any case", "/api/v2/conversations", []string{"Authorization", "bearer " + testToken}, 200, ""},
		{"query", "/api/v2/conversations?token=" + testToken, nil, 200, ""},
		{"wrong query", "/api/v2/conversations?token=nope", nil, 401, "Invalid or expired token"},
		{"cookie", "/api/v2/conversations", []string{"Cookie", cookieName + "=" + testToken}, 200, ""},
		{"public root", "/api/v2", nil, 200, ""},
		{"public version", "/api/v2/version", nil, 200, ""},
		{"public contract", "/api/v2/openapi.json", nil, 200, ""},
		{"events need it", "/api/v2/conversations/x/events", nil, 401, "Missing authentication credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := fx.do("GET", tt.path, nil, tt.hdr...)
			if tt.msg != "" {
				wantErr(t, r, tt.status, tt.msg)
				if r.header.Get("WWW-Authenticate") == "" {
					t.Errorf("a 401 without WWW-Authenticate")
				}
				return
			}
			if r.status != tt.status {
				t.Errorf("got %s, want %d", r, tt.status)
			}
		})
	}

	// The cookie is set for a Bearer request only, HttpOnly, for /api/.
	wantErr(t, fx.do("POST", "/api/v2/auth/cookie", nil, "Cookie", cookieName+"="+testToken), 401,
		"Missing authentication credentials: send Authorization: Bearer <token> to set the cookie")
	r := fx.ok("POST", "/api/v2/auth/cookie", nil, "Authorization", "Bearer "+testToken)
	c := r.header.Get("Set-Cookie")
	for _, want := range []string{cookieName + "=" + testToken, "Path=/api/", "HttpOnly", "SameSite=Lax", "Max-Age=86400"} {
		if !strings.Contains(c, want) {
			t.Errorf("Set-Cookie %q lacks %q", c, want)
		}
	}
	if c := fx.ok("DELETE", "/api/v2/auth/cookie", nil).header.Get("Set-Cookie"); !strings.Contains(c, "Max-Age=0") {
		t.Errorf("clearing the cookie: Set-Cookie %q", c)
	}
}

func TestNoTokenNoCookie(t *testing.T) {
	fx := newFixture(t, fixtureOptions{})
	r := fx.ok("POST", "/api/v2/auth/cookie", nil)
	if r.header.Get("Set-Cookie") != "" || r.str("message") != "No token is configured: requests need no credentials" {
		t.Errorf("auth/cookie without a token: %s %v", r, r.header)
	}
}

// Browsers: the server's own origin and --allow-origin patterns get CORS
// with the exact origin, never a wildcard; any other origin is refused
// before anything runs, and so is a Host that does not name the server.
func TestOriginsAndHosts(t *testing.T) {
	fx := newFixture(t, fixtureOptions{origins: []string{"app.example.com"}})
	host := strings.TrimPrefix(fx.ts.URL, "http://")

	r := fx.do("PUT", "/api/v2/conversations/evil", map[string]any{}, "Origin", "https://evil.example.net")
	if r.status != http.StatusForbidden || !strings.HasPrefix(r.str("error"), "Cross-origin request refused: ") {
		t.Errorf("a foreign origin: %s", r)
	}
	if r := fx.do("GET", "/api/v2/conversations/evil", nil); r.status != http.StatusNotFound {
		t.Errorf("the refused request made a conversation: %s", r)
	}

	r = fx.do("GET", "/api/v2/conversations", nil, "Origin", "https://app.example.com")
	if r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != "https://app.example.com" || r.header.Get("Access-Control-Allow-Credentials") != "true" {
		t.Errorf("an allowed origin: %s %v", r, r.header)
	}
	r = fx.do("GET", "/api/v2/conversations", nil, "Origin", "http://"+host)
	if r.status != 200 {
		t.Errorf("the server's own origin: %s", r)
	}

	r = fx.do("OPTIONS", "/api/v2/conversations/x/step", nil, "Origin", "https://app.example.com", "Access-Control-Request-Method", "POST")
	if r.status != http.StatusNoContent || !strings.Contains(r.header.Get("Access-Control-Allow-Headers"), "Last-Event-ID") ||
		r.header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Errorf("preflight: %s %v", r, r.header)
	}
	for _, v := range r.header.Values("Access-Control-Allow-Origin") {
		if v == "*" {
			t.Errorf("a wildcard origin")
		}
	}

	req, _ := http.NewRequest("GET", fx.ts.URL+"/api/v2/conversations", nil)
	req.Host = "attacker.example"
	resp, err := fx.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a rebinding Host got %d", resp.StatusCode)
	}
}
