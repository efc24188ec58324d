package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/agentd-dev/agentd/internal/fault"
	"github.com/agentd-dev/agentd/internal/jwtauth"
)

var testSecret = []byte(strings.Repeat("z", 32))

func jwtFor(t *testing.T, sub string, sessions ...string) string {
	t.Helper()
	c := jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()}
	if len(sessions) > 0 {
		c["sessions"] = sessions
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (e *env) startWithTokens(t *testing.T) *Server {
	t.Helper()
	v, err := jwtauth.New(jwtauth.Options{Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	return e.startConfig(t, Config{Tokens: v})
}

var restTexts = AuthTexts{Missing: "Missing authentication credentials", Invalid: "Invalid or expired token",
	NotJWT: "Invalid or expired token: this server takes a JWT"}

func refuseScheme(*http.Request) (string, error) {
	return "", fault.New(fault.Unauthorized, "Invalid authentication scheme")
}

func TestIdentify(t *testing.T) {
	e := newEnv(t)
	withJWT := e.startWithTokens(t)
	plain := newEnv(t).start(t, Limits{})
	const shared = "0123456789abcdef-shared"
	forged, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(strings.Repeat("x", 32)))
	cases := []struct {
		name    string
		srv     *Server
		header  string
		query   string
		opts    IdentifyOptions
		wantErr string
		want    Principal
	}{
		{"jwt in header", withJWT, "Bearer " + jwtFor(t, "alice"), "", IdentifyOptions{}, "", Principal{Subject: "alice", Scoped: true}},
		{"jwt in query", withJWT, "", jwtFor(t, "bob"), IdentifyOptions{}, "", Principal{Subject: "bob", Scoped: true}},
		{"lowercase bearer", withJWT, "bearer " + jwtFor(t, "carol"), "", IdentifyOptions{}, "", Principal{Subject: "carol", Scoped: true}},
		{"forged jwt", withJWT, "Bearer " + forged, "", IdentifyOptions{}, "Invalid or expired token: token signature is invalid", Principal{}},
		{"jwt required, shared token given", withJWT, "Bearer " + shared, "", IdentifyOptions{Token: shared, RequireJWT: true}, "this endpoint takes a JWT", Principal{}},
		{"jwt required, nothing given", withJWT, "", "", IdentifyOptions{RequireJWT: true}, "Missing authorization token", Principal{}},
		{"shared token beside jwt", withJWT, "Bearer " + shared, "", IdentifyOptions{Token: shared}, "", Principal{}},
		{"jwt keys only, opaque token", withJWT, "Bearer nope", "", IdentifyOptions{}, "not a JWT", Principal{}},
		{"jwt keys only, nothing", withJWT, "", "", IdentifyOptions{}, "Missing authorization token", Principal{}},
		{"shared token", plain, "Bearer " + shared, "", IdentifyOptions{Token: shared}, "", Principal{}},
		{"wrong shared token", plain, "Bearer " + shared + "x", "", IdentifyOptions{Token: shared}, "Invalid token", Principal{}},
		{"a jwt where none are verified", plain, "Bearer " + jwtFor(t, "alice"), "", IdentifyOptions{Token: shared}, "Invalid token", Principal{}},
		{"nothing configured", plain, "", "", IdentifyOptions{}, "", Principal{}},
		// A face's own words and credential reader (REST: gptme's words,
		// the cookie, a malformed header refused).
		{"face words, nothing given", plain, "", "", IdentifyOptions{Token: shared, Texts: restTexts}, "Missing authentication credentials", Principal{}},
		{"face words, wrong token", plain, "Bearer nope", "", IdentifyOptions{Token: shared, Texts: restTexts}, "Invalid or expired token", Principal{}},
		{"face words, not a JWT", withJWT, "Bearer nope", "", IdentifyOptions{Texts: restTexts}, "Invalid or expired token: this server takes a JWT", Principal{}},
		{"face reader", plain, "", "", IdentifyOptions{Token: shared, Credential: func(*http.Request) (string, error) { return shared, nil }}, "", Principal{}},
		{"face reader refuses", plain, "Basic x", "", IdentifyOptions{Token: shared, Credential: refuseScheme}, "Invalid authentication scheme", Principal{}},
		{"face reader not asked with nothing configured", plain, "Basic x", "", IdentifyOptions{Credential: refuseScheme}, "", Principal{}},
		{"face reader, jwt", withJWT, "", "", IdentifyOptions{Credential: func(*http.Request) (string, error) { return jwtFor(t, "dave"), nil }}, "", Principal{Subject: "dave", Scoped: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/x", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			if tc.query != "" {
				r.URL.RawQuery = "token=" + tc.query
			}
			p, err := tc.srv.Identify(context.Background(), r, tc.opts)
			if tc.wantErr != "" {
				if fault.CodeOf(err) != fault.Unauthorized || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want unauthorized with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Subject != tc.want.Subject || p.Scoped != tc.want.Scoped {
				t.Fatalf("principal %+v, want %+v", p, tc.want)
			}
		})
	}
}

// A session belongs to the subject that created it, across a crash; any
// other subject is told it does not exist, and it is not loaded to tell.
func TestSessionOwners(t *testing.T) {
	e := newEnv(t)
	s := e.startWithTokens(t)
	ctx := context.Background()
	alice := Principal{Subject: "alice", Scoped: true}
	bob := Principal{Subject: "bob", Scoped: true}
	h, err := s.Create(ctx, CreateRequest{Who: alice})
	if err != nil {
		t.Fatal(err)
	}
	id := h.ID()
	if h.Owner() != "alice" {
		t.Fatalf("owner %q", h.Owner())
	}
	check := func(s *Server, p Principal, want bool) {
		t.Helper()
		_, err := s.SessionFor(ctx, id, p)
		if want && err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		if !want && (fault.CodeOf(err) != fault.NotFound || err.Error() != "Session "+id+" not found") {
			t.Fatalf("%+v: err = %v, want not found", p, err)
		}
	}
	check(s, alice, true)
	check(s, bob, false)
	check(s, Principal{Subject: "bob", Scoped: true, Sessions: []string{id}}, true)
	check(s, Principal{Subject: "bob", Scoped: true, Sessions: []string{"*"}}, true)
	check(s, Principal{}, true) // the shared token reaches everything
	if _, err := s.SessionFor(ctx, "session-nope", alice); fault.CodeOf(err) != fault.NotFound {
		t.Fatalf("missing session: %v", err)
	}

	crash(s)
	s2 := e.startWithTokens(t)
	check(s2, bob, false)
	if n := s2.SessionCount(); n != 0 {
		t.Fatalf("refusing bob loaded the session (%d loaded)", n)
	}
	check(s2, alice, true)
	if got, _ := s2.Session(ctx, id); got.Owner() != "alice" {
		t.Fatalf("owner after restart %q", got.Owner())
	}
	// Loading alice's file as bob is refused; it stays alice's.
	file := h.Session().File()
	if err := s2.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Load(ctx, LoadRequest{Path: file, Who: bob}); fault.CodeOf(err) != fault.Forbidden {
		t.Fatalf("bob loading alice's file: %v", err)
	}
	h3, err := s2.Load(ctx, LoadRequest{Path: file, Who: alice})
	if err != nil {
		t.Fatal(err)
	}
	if h3.Owner() != "alice" {
		t.Fatalf("reloaded owner %q", h3.Owner())
	}
}

// TestPrincipalOwn: a scoped principal's command ids and keys live in a
// namespace of its own and read back as the client sent them; others'
// are unchanged.
func TestPrincipalOwn(t *testing.T) {
	alice := Principal{Subject: "alice", Scoped: true}
	bob := Principal{Subject: "bob", Scoped: true}
	tests := []struct {
		p    Principal
		id   string
		same bool // Own leaves id as it is
	}{
		{alice, "c1", false},
		{bob, "c1", false},
		{alice, "", true},
		{Principal{}, "c1", true},
		{Principal{Subject: "via-auth-command"}, "c1", true},
		{alice, "sub:bob", false},
	}
	for _, tc := range tests {
		own := tc.p.Own(tc.id)
		if (own == tc.id) != tc.same {
			t.Errorf("%+v.Own(%q) = %q", tc.p, tc.id, own)
		}
		if got := ClientID(own); got != tc.id {
			t.Errorf("ClientID(%q) = %q, want %q", own, got, tc.id)
		}
	}
	if alice.Own("c1") == bob.Own("c1") {
		t.Error("two subjects share a namespace")
	}
	msg := "Command id '" + alice.Own("c1") + "' depends on '" + alice.Own("c0") + "'"
	if got := ClientText(msg); got != "Command id 'c1' depends on 'c0'" {
		t.Errorf("ClientText = %q", got)
	}
}
