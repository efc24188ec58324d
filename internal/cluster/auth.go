package cluster

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
)

// Credentials are how a node authenticates to an external NATS server
// and checks it: at most one of user and password, a token, an nkey seed
// file or a .creds file, plus TLS. With none of the four, the node
// authenticates with the cluster key as an nkey (what the embedded server
// admits). Secrets come from files so that they do not show in the
// process's command line.
type Credentials struct {
	User         string
	PasswordFile string
	TokenFile    string
	NkeyFile     string // a user nkey seed
	CredsFile    string // a .creds file (user JWT and seed)
	// TLSCA verifies the server's certificate instead of the system's
	// roots; TLSCert and TLSKey are this node's client certificate, for
	// a server that asks for one.
	TLSCA, TLSCert, TLSKey string
}

// HasAuth reports whether any credential other than the cluster key is
// given.
func (c Credentials) HasAuth() bool {
	return c.User != "" || c.PasswordFile != "" || c.TokenFile != "" || c.NkeyFile != "" || c.CredsFile != ""
}

// options are the nats.Options that authenticate with c, or with key when
// c names no credential.
func (c Credentials) options(key *Key) ([]nats.Option, error) {
	var opts []nats.Option
	n := 0
	for _, set := range []bool{c.User != "" || c.PasswordFile != "", c.TokenFile != "", c.NkeyFile != "", c.CredsFile != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return nil, errors.New("cluster: give one NATS credential: a user and password, a token, an nkey seed or a .creds file")
	}
	switch {
	case c.User != "" || c.PasswordFile != "":
		if c.User == "" || c.PasswordFile == "" {
			return nil, errors.New("cluster: a NATS user needs a password file, and a password file a user")
		}
		pw, err := readSecret("NATS password file", c.PasswordFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserInfo(c.User, pw))
	case c.TokenFile != "":
		tok, err := readSecret("NATS token file", c.TokenFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Token(tok))
	case c.NkeyFile != "":
		o, err := nats.NkeyOptionFromSeed(c.NkeyFile)
		if err != nil {
			return nil, fmt.Errorf("cluster: NATS nkey seed file %s: %w", c.NkeyFile, err)
		}
		opts = append(opts, o)
	case c.CredsFile != "":
		// nats.go reads it at every connect; read it once now so that a
		// missing file is an error at start.
		if _, err := os.Stat(c.CredsFile); err != nil {
			return nil, fmt.Errorf("cluster: NATS .creds file: %w", err)
		}
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	default:
		opts = append(opts, key.natsAuth())
	}
	if c.TLSCA != "" {
		if _, err := os.Stat(c.TLSCA); err != nil {
			return nil, fmt.Errorf("cluster: NATS TLS CA file: %w", err)
		}
		opts = append(opts, nats.RootCAs(c.TLSCA))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return nil, errors.New("cluster: a NATS TLS client certificate needs its key, and a key its certificate")
	}
	if c.TLSCert != "" {
		opts = append(opts, nats.ClientCert(c.TLSCert, c.TLSKey))
	}
	return opts, nil
}

// readSecret reads a one-line secret from a file, without the line end.
func readSecret(what, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("cluster: %s: %w", what, err)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if strings.TrimSpace(s) == "" {
		return "", fmt.Errorf("cluster: %s %s is empty", what, path)
	}
	return s, nil
}
