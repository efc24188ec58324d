package convapi

import (
	"encoding/base64"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/agentd-dev/agentd/internal/jwtauth"
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

var jwtSecret = []byte(strings.Repeat("k", 32))

// signed is an HS256 JWT for sub with claims besides sub and a one-hour
// exp (which claims may override).
func signed(t *testing.T, m jwt.SigningMethod, key any, sub string, claims map[string]any) string {
	t.Helper()
	c := jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
	for k, v := range claims {
		c[k] = v
	}
	s, err := jwt.NewWithClaims(m, c).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func jwtFor(t *testing.T, sub string, sessions ...string) string {
	t.Helper()
	var c map[string]any
	if len(sessions) > 0 {
		c = map[string]any{"sessions": sessions}
	}
	return signed(t, jwt.SigningMethodHS256, jwtSecret, sub, c)
}

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

func newJWTFixture(t *testing.T, token string) *fixture {
	t.Helper()
	v, err := jwtauth.New(jwtauth.Options{Secret: jwtSecret})
	if err != nil {
		t.Fatal(err)
	}
	return newFixture(t, fixtureOptions{token: token, tokens: v})
}

// listed reports the ids GET /api/v2/conversations answers.
func listed(t *testing.T, fx *fixture, hdr ...string) []string {
	t.Helper()
	r := fx.ok("GET", "/api/v2/conversations", nil, hdr...)
	var ids []string
	for _, c := range r.list {
		ids = append(ids, c.(map[string]any)["id"].(string))
	}
	sort.Strings(ids)
	return ids
}

// A JWT's subject owns what it creates; another subject finds nothing
// there: every endpoint of the conversation answers exactly as for one
// that does not exist, and lists leave it out. The sessions claim grants
// it; the shared token still reaches everything.
func TestJWTPrincipals(t *testing.T) {
	fx := newJWTFixture(t, testToken)
	alice, bob := jwtFor(t, "alice"), jwtFor(t, "bob")
	carol := jwtFor(t, "carol", "alices")
	shared := bearer(testToken)

	r := fx.ok("PUT", "/api/v2/conversations/alices", userMsgs("alice's secret"), bearer(alice)...)
	aliceSID := r.str("session_id")
	fx.ok("PUT", "/api/v2/conversations/bobs", userMsgs("bob's"), bearer(bob)...)
	if owner := fx.layer.Sessions(); len(owner) != 2 {
		t.Fatalf("%d sessions", len(owner))
	}
	for _, h := range fx.layer.Sessions() {
		if want := strings.TrimSuffix(h.ID(), "s"); h.Owner() != want {
			t.Errorf("%s is owned by %q, want %q", h.ID(), h.Owner(), want)
		}
	}

	endpoints := []struct {
		method, path string
		body         any
	}{
		{"GET", "", nil},
		{"GET", "?limit=1", nil},
		{"POST", "", map[string]any{"role": "user", "content": "hi"}},
		{"GET", "/events", nil},
		{"GET", "/events?session_id=" + aliceSID, nil},
		{"POST", "/step", map[string]any{"session_id": aliceSID}},
		{"POST", "/tool/confirm", map[string]any{"tool_id": "tool-x", "action": "confirm"}},
		{"POST", "/interrupt", map[string]any{"session_id": aliceSID}},
		{"GET", "/config", nil},
		{"PATCH", "/config", map[string]any{"chat": map[string]any{"name": "mine now"}}},
		{"PATCH", "/messages/0", map[string]any{"content": "rewritten"}},
		{"DELETE", "/messages/0", nil},
		{"POST", "/fork?after_message=0", nil},
		{"POST", "/rerun", map[string]any{"session_id": aliceSID}},
		{"POST", "/elicit/respond", map[string]any{"elicit_id": "e1", "action": "decline"}},
		{"DELETE", "", nil},
	}
	for _, ep := range endpoints {
		t.Run(ep.method+ep.path, func(t *testing.T) {
			got := fx.do(ep.method, "/api/v2/conversations/alices"+ep.path, ep.body, bearer(bob)...)
			unknown := fx.do(ep.method, "/api/v2/conversations/nobody"+ep.path, ep.body, bearer(bob)...)
			if got.status != http.StatusNotFound {
				t.Errorf("bob on alice's conversation: %s, want 404", got)
			}
			if g, u := got.str("error"), strings.ReplaceAll(unknown.str("error"), "nobody", "alices"); got.status != unknown.status || g != u {
				t.Errorf("bob on alice's conversation: %s\nand on an unknown one: %s", got, unknown)
			}
		})
	}
	// Nothing bob sent reached it.
	if c := fx.ok("GET", "/api/v2/conversations/alices", nil, bearer(alice)...); len(c.m["log"].([]any)) != 1 {
		t.Errorf("alice's conversation changed: %s", c)
	}

	tests := []struct {
		name string
		hdr  []string
		want []string
	}{
		{"alice", bearer(alice), []string{"alices"}},
		{"bob", bearer(bob), []string{"bobs"}},
		{"carol, granted alice's", bearer(carol), []string{"alices"}},
		{"a wildcard grant", bearer(jwtFor(t, "ops", "*")), []string{"alices", "bobs"}},
		{"the shared token", shared, []string{"alices", "bobs"}},
		{"the shared token in the cookie", []string{"Cookie", cookieName + "=" + testToken}, []string{"alices", "bobs"}},
	}
	for _, tt := range tests {
		t.Run("list as "+tt.name, func(t *testing.T) {
			if got := listed(t, fx, tt.hdr...); !slices.Equal(got, tt.want) {
				t.Errorf("listed %v, want %v", got, tt.want)
			}
			paged := fx.ok("GET", "/api/v2/conversations?paginated=true", nil, tt.hdr...)
			if n := len(paged.m["conversations"].([]any)); n != len(tt.want) {
				t.Errorf("the paginated list has %d, want %d", n, len(tt.want))
			}
		})
	}
	if r := fx.do("GET", "/api/v2/conversations/alices", nil, bearer(carol)...); r.status != 200 {
		t.Errorf("carol, granted it: %s", r)
	}
	if r := fx.do("GET", "/api/v2/conversations/bobs", nil, bearer(carol)...); r.status != 404 {
		t.Errorf("carol on bob's: %s", r)
	}
	if r := fx.do("GET", "/api/v2/conversations/alices", nil, shared...); r.status != 200 {
		t.Errorf("the shared token: %s", r)
	}

	// Attachments of alice's conversation are not bob's to see or remove.
	for _, s := range fx.ok("GET", "/api/v2/sessions", nil, bearer(bob)...).list {
		if s.(map[string]any)["conversation_id"] == "alices" {
			t.Errorf("bob sees alice's attachment %v", s)
		}
	}
	wantErr(t, fx.do("DELETE", "/api/v2/sessions/"+aliceSID, nil, bearer(bob)...), 404, "Session not found: "+aliceSID)
	fx.ok("DELETE", "/api/v2/sessions/"+aliceSID, nil, bearer(alice)...)

	// An idempotency key is the subject's own: bob repeating alice's PUT
	// with her key does not get her answer (and her attachment).
	body := userMsgs("first")
	first := fx.ok("PUT", "/api/v2/conversations/keyed", body, append(bearer(alice), "Idempotency-Key", "k1")...)
	again := fx.do("PUT", "/api/v2/conversations/keyed", body, append(bearer(bob), "Idempotency-Key", "k1")...)
	if again.status == 200 || strings.Contains(string(again.body), first.str("session_id")) {
		t.Errorf("bob replayed alice's create: %s", again)
	}
	if r := fx.ok("PUT", "/api/v2/conversations/keyed", body, append(bearer(alice), "Idempotency-Key", "k1")...); r.str("session_id") != first.str("session_id") {
		t.Errorf("alice's own replay: %s, want %s", r, first)
	}
}

// A JWT's holder gets its own JWT in the cookie, never the shared token,
// and the cookie then acts for that subject.
func TestJWTCookie(t *testing.T) {
	fx := newJWTFixture(t, testToken)
	alice := jwtFor(t, "alice")
	fx.ok("PUT", "/api/v2/conversations/alices", nil, bearer(alice)...)
	fx.ok("PUT", "/api/v2/conversations/shared", nil, bearer(testToken)...)
	c := fx.ok("POST", "/api/v2/auth/cookie", nil, bearer(alice)...).header.Get("Set-Cookie")
	if strings.Contains(c, testToken) || !strings.Contains(c, cookieName+"="+alice) {
		t.Fatalf("Set-Cookie %q", c)
	}
	if got := listed(t, fx, "Cookie", cookieName+"="+alice); !slices.Equal(got, []string{"alices"}) {
		t.Errorf("with alice's cookie: %v", got)
	}
}

func TestJWTRefused(t *testing.T) {
	now := time.Now()
	forged := signed(t, jwt.SigningMethodHS256, []byte(strings.Repeat("x", 32)), "alice", nil)
	valid := jwtFor(t, "alice")
	parts := strings.Split(valid, ".")
	tests := []struct {
		name   string
		token  func() string
		shared string // the server's shared token, "" for JWTs only
		msg    string
	}{
		{"expired", func() string {
			return signed(t, jwt.SigningMethodHS256, jwtSecret, "alice", map[string]any{"exp": now.Add(-time.Hour).Unix(), "iat": now.Add(-2 * time.Hour).Unix()})
		}, testToken, "Invalid or expired token: token has expired"},
		{"bad signature", func() string { return forged }, testToken, "Invalid or expired token: token signature is invalid: signature is invalid"},
		{"tampered claims", func() string {
			return parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"mallory","exp":9999999999}`)) + "." + parts[2]
		}, testToken, "Invalid or expired token: token signature is invalid: signature is invalid"},
		{"alg none", func() string {
			s, err := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "alice", "exp": now.Add(time.Hour).Unix()}).SignedString(jwt.UnsafeAllowNoneSignatureType)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, testToken, "Invalid or expired token: token signature is invalid: it is signed with none; this server accepts HS256"},
		{"not a JWT where one is required", func() string { return "just-a-string" }, "", "Invalid or expired token: this server takes a JWT"},
		{"none where a JWT is required", func() string { return "" }, "", "Missing authentication credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newJWTFixture(t, tt.shared)
			var hdr []string
			if tok := tt.token(); tok != "" {
				hdr = bearer(tok)
			}
			for _, path := range []string{"/api/v2/conversations", "/api/v2/conversations/x", "/api/v2/conversations/x/events"} {
				r := fx.do("GET", path, nil, hdr...)
				if r.status != http.StatusUnauthorized || !strings.HasPrefix(r.str("error"), strings.SplitN(tt.msg, ":", 2)[0]) {
					t.Errorf("GET %s: %s, want 401 %q", path, r, tt.msg)
				}
				if r.header.Get("WWW-Authenticate") == "" {
					t.Errorf("a 401 without WWW-Authenticate")
				}
			}
			r := fx.do("PUT", "/api/v2/conversations/made", map[string]any{}, hdr...)
			wantErr(t, r, http.StatusUnauthorized, tt.msg)
			if len(fx.layer.Sessions()) != 0 {
				t.Errorf("a refused request made a conversation")
			}
		})
	}
	// A valid JWT on a server with JWTs only.
	fx := newJWTFixture(t, "")
	fx.ok("PUT", "/api/v2/conversations/made", map[string]any{}, bearer(valid)...)
}
