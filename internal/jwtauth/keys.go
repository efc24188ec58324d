package jwtauth

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
)

// ParseKeys reads public keys from PEM (PUBLIC KEY, RSA PUBLIC KEY or
// CERTIFICATE blocks, any number) or from JSON: a JWK Set ({"keys":
// [...]}) or one JWK. Private keys are refused: the server only verifies.
// Each key's algorithm follows from its type: RSA verifies RS256 (or the
// RS/PS algorithm its JWK names), an EC key the ES algorithm of its curve,
// Ed25519 EdDSA.
func ParseKeys(data []byte) ([]Key, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, errors.New("no keys: the file is empty")
	}
	if data[0] == '{' {
		return parseJWKs(data)
	}
	return parsePEM(data)
}

func parsePEM(data []byte) ([]Key, error) {
	var keys []Key
	for n := 1; ; n++ {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		var pub any
		var err error
		switch b.Type {
		case "PUBLIC KEY":
			pub, err = x509.ParsePKIXPublicKey(b.Bytes)
		case "RSA PUBLIC KEY":
			pub, err = x509.ParsePKCS1PublicKey(b.Bytes)
		case "CERTIFICATE":
			var cert *x509.Certificate
			if cert, err = x509.ParseCertificate(b.Bytes); err == nil {
				pub = cert.PublicKey
			}
		default:
			if bytes.Contains([]byte(b.Type), []byte("PRIVATE")) {
				return nil, fmt.Errorf("PEM block %d is a private key; give the server the public key only", n)
			}
			return nil, fmt.Errorf("PEM block %d: unsupported type %q (want PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE)", n, b.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", n, err)
		}
		k, err := keyOf(pub, "")
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", n, err)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("no PEM blocks and not JSON: want PEM public keys or a JWK Set")
	}
	return keys, nil
}

// keyOf returns the Key for a public key, with alg when a JWK named one
// that fits the key type.
func keyOf(pub any, alg string) (Key, error) {
	switch p := pub.(type) {
	case *rsa.PublicKey:
		if p.N.BitLen() < 2048 {
			return Key{}, fmt.Errorf("RSA key of %d bits is too weak (at least 2048)", p.N.BitLen())
		}
		switch alg {
		case "":
			alg = "RS256"
		case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512":
		default:
			return Key{}, fmt.Errorf("RSA key cannot verify %s", alg)
		}
		return Key{Alg: alg, Pub: p}, nil
	case *ecdsa.PublicKey:
		want := map[string]string{"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}[p.Curve.Params().Name]
		if want == "" {
			return Key{}, fmt.Errorf("EC curve %s is not supported", p.Curve.Params().Name)
		}
		if alg != "" && alg != want {
			return Key{}, fmt.Errorf("EC key on %s cannot verify %s (it verifies %s)", p.Curve.Params().Name, alg, want)
		}
		return Key{Alg: want, Pub: p}, nil
	case ed25519.PublicKey:
		if alg != "" && alg != "EdDSA" {
			return Key{}, fmt.Errorf("Ed25519 key cannot verify %s", alg)
		}
		return Key{Alg: "EdDSA", Pub: p}, nil
	}
	return Key{}, fmt.Errorf("unsupported key type %T", pub)
}

type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
	D   string `json:"d"`
	K   string `json:"k"`
}

func parseJWKs(data []byte) ([]Key, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("JWK Set: %w", err)
	}
	raws := set.Keys
	if raws == nil {
		raws = []json.RawMessage{data} // one JWK
	}
	var keys []Key
	for i, raw := range raws {
		var j jwk
		if err := json.Unmarshal(raw, &j); err != nil {
			return nil, fmt.Errorf("JWK %d: %w", i+1, err)
		}
		if j.Use != "" && j.Use != "sig" {
			continue // an encryption key
		}
		k, err := j.key()
		if err != nil {
			name := fmt.Sprintf("JWK %d", i+1)
			if j.Kid != "" {
				name += fmt.Sprintf(" (kid %q)", j.Kid)
			}
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		k.ID = j.Kid
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("JWK Set has no signing keys")
	}
	return keys, nil
}

func (j jwk) key() (Key, error) {
	if j.D != "" || j.K != "" {
		return Key{}, errors.New("a private or symmetric key; give the server public keys only (use --jwt-secret-file for HS256)")
	}
	b := func(name, s string) ([]byte, error) {
		v, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil || len(v) == 0 {
			return nil, fmt.Errorf("%q is not base64url", name)
		}
		return v, nil
	}
	var pub crypto.PublicKey
	switch j.Kty {
	case "RSA":
		n, err := b("n", j.N)
		if err != nil {
			return Key{}, err
		}
		e, err := b("e", j.E)
		if err != nil {
			return Key{}, err
		}
		if len(e) > 4 {
			return Key{}, errors.New(`"e" is too large`)
		}
		pub = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
	case "EC":
		curve := map[string]elliptic.Curve{"P-256": elliptic.P256(), "P-384": elliptic.P384(), "P-521": elliptic.P521()}[j.Crv]
		if curve == nil {
			return Key{}, fmt.Errorf("EC curve %q is not supported", j.Crv)
		}
		x, err := b("x", j.X)
		if err != nil {
			return Key{}, err
		}
		y, err := b("y", j.Y)
		if err != nil {
			return Key{}, err
		}
		size := (curve.Params().BitSize + 7) / 8
		if len(x) != size || len(y) != size {
			return Key{}, fmt.Errorf("EC coordinates must be %d bytes", size)
		}
		raw := append(append([]byte{4}, x...), y...)
		k, err := ecdsa.ParseUncompressedPublicKey(curve, raw)
		if err != nil {
			return Key{}, fmt.Errorf("EC key: %w", err)
		}
		pub = k
	case "OKP":
		if j.Crv != "Ed25519" {
			return Key{}, fmt.Errorf("OKP curve %q is not supported (want Ed25519)", j.Crv)
		}
		x, err := b("x", j.X)
		if err != nil {
			return Key{}, err
		}
		if len(x) != ed25519.PublicKeySize {
			return Key{}, fmt.Errorf("Ed25519 key must be %d bytes", ed25519.PublicKeySize)
		}
		pub = ed25519.PublicKey(x)
	case "oct":
		return Key{}, errors.New("a symmetric key; use --jwt-secret-file for HS256")
	default:
		return Key{}, fmt.Errorf("unsupported kty %q", j.Kty)
	}
	return keyOf(pub, j.Alg)
}
