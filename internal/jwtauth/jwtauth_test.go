package jwtauth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func claims(sub string, extra map[string]any) jwt.MapClaims {
	c := jwt.MapClaims{"sub": sub, "exp": now.Add(time.Hour).Unix(), "iat": now.Add(-time.Minute).Unix()}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	return c
}

func sign(t *testing.T, m jwt.SigningMethod, key any, c jwt.MapClaims, header map[string]any) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pemOf(t *testing.T, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func TestVerify(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	otherRSA, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	edPub, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	rsaPEM := pemOf(t, &rsaKey.PublicKey)

	keysOf := func(data []byte) []Key {
		k, err := ParseKeys(data)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	hs := Options{Secret: secret, Now: func() time.Time { return now }}
	rs := Options{Keys: keysOf(rsaPEM), Now: func() time.Time { return now }}
	es := Options{Keys: keysOf(pemOf(t, &ecKey.PublicKey)), Now: func() time.Time { return now }}
	ed := Options{Keys: keysOf(pemOf(t, edPub)), Now: func() time.Time { return now }}
	withIss := hs
	withIss.Issuer, withIss.Audience = "agentd-test", "agentd"

	// A JWK Set with two RSA keys told apart by kid.
	jwks, _ := json.Marshal(map[string]any{"keys": []map[string]any{
		{"kty": "RSA", "kid": "a", "n": b64(rsaKey.N.Bytes()), "e": b64(big.NewInt(int64(rsaKey.E)).Bytes())},
		{"kty": "RSA", "kid": "b", "n": b64(otherRSA.N.Bytes()), "e": b64(big.NewInt(int64(otherRSA.E)).Bytes())},
	}})
	set := Options{Keys: keysOf(jwks), Now: func() time.Time { return now }}

	noneTok := func() string {
		s, _ := jwt.NewWithClaims(jwt.SigningMethodNone, claims("alice", nil)).SignedString(jwt.UnsafeAllowNoneSignatureType)
		return s
	}

	cases := []struct {
		name    string
		opts    Options
		tok     string
		wantErr error
		wantSub string
	}{
		{"hs256", hs, sign(t, jwt.SigningMethodHS256, secret, claims("alice", nil), nil), nil, "alice"},
		{"rs256", rs, sign(t, jwt.SigningMethodRS256, rsaKey, claims("bob", nil), nil), nil, "bob"},
		{"es256", es, sign(t, jwt.SigningMethodES256, ecKey, claims("carol", nil), nil), nil, "carol"},
		{"eddsa", ed, sign(t, jwt.SigningMethodEdDSA, edPriv, claims("dave", nil), nil), nil, "dave"},
		{"jwks kid a", set, sign(t, jwt.SigningMethodRS256, rsaKey, claims("erin", nil), map[string]any{"kid": "a"}), nil, "erin"},
		{"jwks kid b", set, sign(t, jwt.SigningMethodRS256, otherRSA, claims("frank", nil), map[string]any{"kid": "b"}), nil, "frank"},
		{"jwks no kid tries both", set, sign(t, jwt.SigningMethodRS256, otherRSA, claims("gina", nil), nil), nil, "gina"},
		{"jwks wrong kid", set, sign(t, jwt.SigningMethodRS256, otherRSA, claims("x", nil), map[string]any{"kid": "a"}), ErrSignature, ""},
		{"none", hs, noneTok(), ErrSignature, ""},
		{"none against keys", rs, noneTok(), ErrSignature, ""},
		{"wrong secret", hs, sign(t, jwt.SigningMethodHS256, []byte(strings.Repeat("x", 32)), claims("a", nil), nil), ErrSignature, ""},
		{"wrong rsa key", rs, sign(t, jwt.SigningMethodRS256, otherRSA, claims("a", nil), nil), ErrSignature, ""},
		// The classic confusion: HMAC keyed with the server's public key.
		{"hs256 with the public key", rs, sign(t, jwt.SigningMethodHS256, rsaPEM, claims("a", nil), nil), ErrSignature, ""},
		{"rs384 against an rs256 key", rs, sign(t, jwt.SigningMethodRS384, rsaKey, claims("a", nil), nil), ErrSignature, ""},
		{"rs256 against a secret", hs, sign(t, jwt.SigningMethodRS256, rsaKey, claims("a", nil), nil), ErrSignature, ""},
		{"expired", hs, sign(t, jwt.SigningMethodHS256, secret, claims("a", map[string]any{"exp": now.Add(-time.Minute).Unix()}), nil), ErrExpired, ""},
		{"expired within leeway", hs, sign(t, jwt.SigningMethodHS256, secret, claims("a", map[string]any{"exp": now.Add(-10 * time.Second).Unix()}), nil), nil, "a"},
		{"not yet valid", hs, sign(t, jwt.SigningMethodHS256, secret, claims("a", map[string]any{"nbf": now.Add(time.Hour).Unix()}), nil), ErrNotYet, ""},
		{"issued in the future", hs, sign(t, jwt.SigningMethodHS256, secret, claims("a", map[string]any{"iat": now.Add(time.Hour).Unix()}), nil), ErrNotYet, ""},
		{"no exp", hs, sign(t, jwt.SigningMethodHS256, secret, claims("a", map[string]any{"exp": nil}), nil), ErrClaims, ""},
		{"no sub, no sessions", hs, sign(t, jwt.SigningMethodHS256, secret, claims("", map[string]any{"sub": nil}), nil), ErrClaims, ""},
		{"sessions only", hs, sign(t, jwt.SigningMethodHS256, secret, claims("", map[string]any{"sub": nil, "sessions": []string{"s1"}}), nil), nil, ""},
		{"iss and aud", withIss, sign(t, jwt.SigningMethodHS256, secret, claims("a", map[string]any{"iss": "agentd-test", "aud": "agentd"}), nil), nil, "a"},
		{"wrong iss", withIss, sign(t, jwt.SigningMethodHS256, secret, claims("a", map[string]any{"iss": "evil", "aud": "agentd"}), nil), ErrClaims, ""},
		{"wrong aud", withIss, sign(t, jwt.SigningMethodHS256, secret, claims("a", map[string]any{"iss": "agentd-test", "aud": "other"}), nil), ErrClaims, ""},
		// RFC 7515 §4.1.11: a crit this verifier does not understand (it
		// understands none) voids a validly signed token, and a crit
		// that is present but not a list of extension names is malformed.
		{"crit unknown extension", hs, sign(t, jwt.SigningMethodHS256, secret, claims("a", nil), map[string]any{"crit": []string{"exp-x"}, "exp-x": true}), ErrCritical, ""},
		{"crit b64", rs, sign(t, jwt.SigningMethodRS256, rsaKey, claims("a", nil), map[string]any{"crit": []string{"b64"}, "b64": false}), ErrCritical, ""},
		{"crit empty list", hs, sign(t, jwt.SigningMethodHS256, secret, claims("a", nil), map[string]any{"crit": []string{}}), ErrMalformed, ""},
		{"crit null", hs, sign(t, jwt.SigningMethodHS256, secret, claims("a", nil), map[string]any{"crit": nil}), ErrMalformed, ""},
		{"crit string", hs, sign(t, jwt.SigningMethodHS256, secret, claims("a", nil), map[string]any{"crit": "exp-x", "exp-x": 1}), ErrMalformed, ""},
		{"crit object", hs, sign(t, jwt.SigningMethodHS256, secret, claims("a", nil), map[string]any{"crit": map[string]any{"exp-x": 1}}), ErrMalformed, ""},
		{"crit non-string", hs, sign(t, jwt.SigningMethodHS256, secret, claims("a", nil), map[string]any{"crit": []any{1}}), ErrMalformed, ""},
		{"crit empty name", hs, sign(t, jwt.SigningMethodHS256, secret, claims("a", nil), map[string]any{"crit": []string{""}}), ErrMalformed, ""},
		{"crit registered name", hs, sign(t, jwt.SigningMethodHS256, secret, claims("a", nil), map[string]any{"crit": []string{"alg"}}), ErrMalformed, ""},
		{"crit duplicate", hs, sign(t, jwt.SigningMethodHS256, secret, claims("a", nil), map[string]any{"crit": []string{"exp-x", "exp-x"}, "exp-x": 1}), ErrMalformed, ""},
		{"crit names an absent header", hs, sign(t, jwt.SigningMethodHS256, secret, claims("a", nil), map[string]any{"crit": []string{"exp-x"}}), ErrMalformed, ""},
		{"crit with a bad signature", hs, sign(t, jwt.SigningMethodHS256, []byte(strings.Repeat("x", 32)), claims("a", nil), map[string]any{"crit": []string{"exp-x"}, "exp-x": true}), ErrSignature, ""},
		{"garbage", hs, "not.a.jwt", ErrMalformed, ""},
		{"empty", hs, "", ErrMalformed, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := New(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			c, err := v.Verify(tc.tok)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if c.Subject != tc.wantSub {
				t.Fatalf("subject %q, want %q", c.Subject, tc.wantSub)
			}
		})
	}
}

func TestSessionsClaim(t *testing.T) {
	secret := []byte(strings.Repeat("k", 40))
	v, err := New(Options{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		sessions any
		want     []string
		bad      bool
	}{
		{[]string{"a", "b"}, []string{"a", "b"}, false},
		{"*", []string{"*"}, false},
		{42, nil, true},
	} {
		c := jwt.MapClaims{"sub": "u", "exp": time.Now().Add(time.Hour).Unix(), "sessions": tc.sessions}
		got, err := v.Verify(sign(t, jwt.SigningMethodHS256, secret, c, nil))
		if tc.bad {
			if err == nil {
				t.Fatalf("sessions %v accepted", tc.sessions)
			}
			continue
		}
		if err != nil || strings.Join(got.Sessions, ",") != strings.Join(tc.want, ",") {
			t.Fatalf("sessions %v: got %v, %v", tc.sessions, got.Sessions, err)
		}
	}
}

func TestParseKeysRefuses(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	weak, _ := rsa.GenerateKey(rand.Reader, 1024)
	priv := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)})
	cases := []struct {
		name, data, want string
	}{
		{"empty", "", "empty"},
		{"private pem", string(priv), "private key"},
		{"weak rsa", string(pemOf(t, &weak.PublicKey)), "too weak"},
		{"not pem", "hello", "no PEM blocks"},
		{"bad json", "{", "JWK"},
		{"oct jwk", `{"kty":"oct","k":"c2VjcmV0"}`, "symmetric"},
		{"private jwk", `{"kty":"EC","crv":"P-256","x":"AA","y":"AA","d":"AA"}`, "private"},
		{"unknown kty", `{"keys":[{"kty":"XYZ"}]}`, "unsupported kty"},
		{"ec alg mismatch", `{"kty":"EC","crv":"P-256","alg":"ES384","x":"` + b64(make([]byte, 32)) + `","y":"` + b64(make([]byte, 32)) + `"}`, "EC key"},
		{"only encryption keys", `{"keys":[{"kty":"RSA","use":"enc","n":"AQ","e":"AQ"}]}`, "no signing keys"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseKeys([]byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	if _, err := New(Options{Secret: []byte("short")}); err == nil || !strings.Contains(err.Error(), "too short") {
		t.Fatalf("short secret: %v", err)
	}
}

func TestLooksLikeJWT(t *testing.T) {
	for tok, want := range map[string]bool{"a.b.c": true, "abcdef0123456789abcdef": false, "a.b": false, "a .b.c": false} {
		if LooksLikeJWT(tok) != want {
			t.Errorf("LooksLikeJWT(%q) != %v", tok, want)
		}
	}
}

// FuzzVerify feeds the verifier what a client may send as a token: it
// must refuse without panicking, and never accept a token it did not
// sign.
func FuzzVerify(f *testing.F) {
	secret := []byte(strings.Repeat("f", 32))
	v, err := New(Options{Secret: secret})
	if err != nil {
		f.Fatal(err)
	}
	good, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "a", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(secret)
	f.Add(good)
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.")
	f.Add("a.b.c")
	f.Add("..")
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := v.Verify(tok)
		if err == nil && tok != good {
			// Only re-encodings of the one signed token may pass.
			if c.Subject != "a" {
				t.Fatalf("accepted a token it did not sign: %q", tok)
			}
		}
	})
}
