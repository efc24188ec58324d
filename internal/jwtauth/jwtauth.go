// Package jwtauth verifies the JSON Web Tokens clients present: HS256
// with a shared secret, or RS256, ES256/384/512 and EdDSA with public keys
// read from PEM or a JWK Set. The type of each key fixes the one
// algorithm it verifies, so a token cannot choose a weaker or confused
// algorithm ("none", or HMAC keyed with a public key).
package jwtauth

import (
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Options configure a Verifier. Exactly one of Secret and Keys is used.
type Options struct {
	// Secret is the HS256 key.
	Secret []byte
	// Keys are public keys (see ParseKeys).
	Keys []Key
	// Issuer and Audience, when set, must be the token's iss and one of
	// its aud.
	Issuer   string
	Audience string
	// Leeway is the clock skew allowed on exp, nbf and iat (default 30 s).
	Leeway time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// MinSecretBytes is the shortest HS256 secret accepted: shorter secrets
// can be found by brute force from a single token.
const MinSecretBytes = 32

// Key is one verification key with the algorithm it verifies.
type Key struct {
	ID  string // kid; "" matches a token without one
	Alg string
	Pub crypto.PublicKey // or []byte for HS256
}

// Claims are what agentd reads from a verified token.
type Claims struct {
	// Subject is the token's sub: the owner recorded on sessions it
	// creates.
	Subject string
	// Sessions lists session ids the token grants besides the subject's
	// own; "*" grants every session.
	Sessions []string
	Expires  time.Time
}

// Verifier checks tokens.
type Verifier struct {
	keys   []Key
	algs   []string
	parser *jwt.Parser
}

// Errors of Verify. Every one means the client is unauthorized; the text
// says what to fix.
var (
	ErrMalformed = errors.New("token is not a well-formed JWT")
	ErrSignature = errors.New("token signature is invalid")
	ErrExpired   = errors.New("token has expired")
	ErrNotYet    = errors.New("token is not valid yet")
	ErrClaims    = errors.New("token claims are not acceptable")
	// ErrCritical is a token whose crit header names an extension this
	// verifier does not implement (RFC 7515 §4.1.11): it must not be
	// accepted, since its issuer said it is void without that extension.
	ErrCritical = errors.New("token requires a JWS extension this server does not support")
)

// New builds a Verifier.
func New(o Options) (*Verifier, error) {
	var keys []Key
	switch {
	case len(o.Secret) > 0 && len(o.Keys) > 0:
		return nil, errors.New("jwt: both a secret and public keys are configured; use one")
	case len(o.Secret) > 0:
		if len(o.Secret) < MinSecretBytes {
			return nil, fmt.Errorf("jwt secret: %d bytes is too short (at least %d); `openssl rand -hex 32` makes one", len(o.Secret), MinSecretBytes)
		}
		keys = []Key{{Alg: "HS256", Pub: o.Secret}}
	case len(o.Keys) > 0:
		keys = o.Keys
	default:
		return nil, errors.New("jwt: no secret and no keys")
	}
	v := &Verifier{keys: keys}
	for _, k := range keys {
		if !slices.Contains(v.algs, k.Alg) {
			v.algs = append(v.algs, k.Alg)
		}
	}
	leeway := o.Leeway
	if leeway == 0 {
		leeway = 30 * time.Second
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(v.algs), jwt.WithLeeway(leeway), jwt.WithExpirationRequired(), jwt.WithIssuedAt(),
	}
	if o.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(o.Issuer))
	}
	if o.Audience != "" {
		opts = append(opts, jwt.WithAudience(o.Audience))
	}
	if o.Now != nil {
		opts = append(opts, jwt.WithTimeFunc(o.Now))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

// Algorithms are the algorithms the verifier accepts.
func (v *Verifier) Algorithms() []string { return slices.Clone(v.algs) }

// LooksLikeJWT reports whether tok has a JWT's shape (three base64url
// parts), to tell it from an opaque token.
func LooksLikeJWT(tok string) bool {
	return strings.Count(tok, ".") == 2 && !strings.ContainsAny(tok, " \t")
}

type tokenClaims struct {
	jwt.RegisteredClaims
	Sessions sessionsClaim `json:"sessions,omitempty"`
}

// sessionsClaim accepts a list of ids or a single string.
type sessionsClaim []string

func (s *sessionsClaim) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New(`"sessions" must be a list of session ids`)
	}
	*s = many
	return nil
}

// Verify checks tok's signature, algorithm, times, issuer and audience,
// and returns its claims. Errors wrap one of the Err values with detail a
// client can act on.
func (v *Verifier) Verify(tok string) (Claims, error) {
	var tc tokenClaims
	t, err := v.parser.ParseWithClaims(tok, &tc, v.keyFor)
	if err != nil {
		var hdr tokenClaims
		if t, _, uerr := jwt.NewParser().ParseUnverified(tok, &hdr); uerr == nil && !slices.Contains(v.algs, t.Method.Alg()) {
			return Claims{}, fmt.Errorf("%w: it is signed with %s; this server accepts %s", ErrSignature, t.Method.Alg(), strings.Join(v.algs, ", "))
		}
		return Claims{}, classify(err)
	}
	if err := checkCrit(t.Header); err != nil {
		return Claims{}, err
	}
	if tc.Subject == "" && len(tc.Sessions) == 0 {
		return Claims{}, fmt.Errorf("%w: it names no subject (sub) and grants no sessions", ErrClaims)
	}
	c := Claims{Subject: tc.Subject, Sessions: tc.Sessions}
	if tc.ExpiresAt != nil {
		c.Expires = tc.ExpiresAt.Time
	}
	return c, nil
}

// registeredHeaders are the header parameters RFC 7515 and RFC 7518
// define, which crit may not list (RFC 7515 §4.1.11).
var registeredHeaders = []string{
	"alg", "jku", "jwk", "kid", "x5u", "x5c", "x5t", "x5t#S256", "typ", "cty", "crit",
	"enc", "zip", "epk", "apu", "apv", "iv", "tag", "p2s", "p2c",
}

// checkCrit applies RFC 7515 §4.1.11 to a token's header. This verifier
// implements no JWS extension (not even RFC 7797's b64), so a crit that
// is well formed still names something it does not understand, and the
// token is refused; one that is present but not a non-empty list of
// distinct extension names is malformed and refused as that.
func checkCrit(h map[string]any) error {
	raw, ok := h["crit"]
	if !ok {
		return nil
	}
	list, ok := raw.([]any)
	if !ok || len(list) == 0 {
		return fmt.Errorf("%w: its crit header must be a non-empty list of header names", ErrMalformed)
	}
	names := make([]string, 0, len(list))
	for _, e := range list {
		name, ok := e.(string)
		switch {
		case !ok || name == "":
			return fmt.Errorf("%w: its crit header must list header names (strings)", ErrMalformed)
		case slices.Contains(registeredHeaders, name):
			return fmt.Errorf("%w: its crit header lists %q, which the JWS specification defines", ErrMalformed, name)
		case slices.Contains(names, name):
			return fmt.Errorf("%w: its crit header lists %q twice", ErrMalformed, name)
		}
		if _, present := h[name]; !present {
			return fmt.Errorf("%w: its crit header lists %q, which the header does not have", ErrMalformed, name)
		}
		names = append(names, name)
	}
	return fmt.Errorf("%w: %s (crit)", ErrCritical, strings.Join(names, ", "))
}

// keyFor picks the keys that may verify t: those of its algorithm, and
// of its kid when it names one.
func (v *Verifier) keyFor(t *jwt.Token) (any, error) {
	alg := t.Method.Alg()
	kid, _ := t.Header["kid"].(string)
	var set jwt.VerificationKeySet
	for _, k := range v.keys {
		if k.Alg != alg || (kid != "" && k.ID != "" && k.ID != kid) {
			continue
		}
		set.Keys = append(set.Keys, k.Pub)
	}
	if len(set.Keys) == 0 {
		if kid != "" {
			return nil, fmt.Errorf("no %s key with kid %q", alg, kid)
		}
		return nil, fmt.Errorf("no %s key", alg)
	}
	if len(set.Keys) == 1 {
		return set.Keys[0], nil
	}
	return set, nil
}

func classify(err error) error {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return fmt.Errorf("%w", ErrExpired)
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return fmt.Errorf("%w", ErrNotYet)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return fmt.Errorf("%w: %s", ErrSignature, reason(err))
	case errors.Is(err, jwt.ErrTokenMalformed):
		return fmt.Errorf("%w", ErrMalformed)
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return fmt.Errorf("%w: it has no expiry (exp)", ErrClaims)
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return fmt.Errorf("%w: wrong issuer (iss)", ErrClaims)
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return fmt.Errorf("%w: wrong audience (aud)", ErrClaims)
	case errors.Is(err, jwt.ErrTokenInvalidClaims):
		return fmt.Errorf("%w: %s", ErrClaims, reason(err))
	}
	return fmt.Errorf("%w: %s", ErrSignature, reason(err))
}

// reason is the innermost message of a jwt error, without the library's
// prefixes, which repeat what the sentinel says.
func reason(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}
