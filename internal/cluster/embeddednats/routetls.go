package embeddednats

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"time"
)

// routeTLSName is the name in the route certificate derived from the
// route secret; the dialling side checks it whatever address it dialled.
const routeTLSName = "agentd-route"

// routeTLSLabel separates the route certificate's key from any other use
// of the route secret.
const routeTLSLabel = "agentd route tls key v1"

// secretRouteTLS is the route TLS of servers given no certificate: every
// server derives the same Ed25519 key and self-signed certificate from the
// route secret, presents it and trusts it alone, both ways. Without it the
// password would be the first thing a server sends to whatever listens on
// a route address (another local user's process bound to the port of a
// node that is down, or an address gossiped by a peer), in clear text;
// with it, the password only crosses a TLS session whose other end proved
// it holds the same secret.
func secretRouteTLS(secret string) (*tls.Config, error) {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(routeTLSLabel))
	priv := ed25519.NewKeyFromSeed(h.Sum(nil))
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: routeTLSName},
		DNSNames:              []string{routeTLSName},
		NotBefore:             time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, priv.Public(), priv)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: priv, Leaf: cert}},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		// NATS keeps a ServerName it is given: the name in the
		// certificate, not the address dialled, is what is checked.
		ServerName: routeTLSName,
		MinVersion: tls.VersionTLS13,
	}, nil
}
