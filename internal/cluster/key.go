package cluster

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/agentd-dev/agentd/internal/atomicfile"
)

// Key is the cluster's key: one secret every node of a cluster holds, and
// nothing else. It is a NATS user nkey seed, so it serves twice:
//
//   - as the NATS credential of the embedded server, which admits only
//     its public key (a node proves it holds the seed by signing the
//     server's nonce: the seed never crosses the wire, with or without
//     TLS), and by default as every node's credential for it;
//   - as the root of the key that signs what nodes send each other
//     (commands, their answers, broadcasts: sign.go), which a node checks
//     before it acts, so a NATS client that is not a node cannot have a
//     command run, whatever principal it writes into it.
//
// The file is the seed on one line, as `nk -gen user` writes it; a .creds
// file's seed block is read as well.
type Key struct {
	kp  nkeys.KeyPair
	pub string
	mac []byte // the signing key, derived from the seed
}

// signingLabel separates the signing key from any other use of the seed.
const signingLabel = "agentd cluster message signing v1"

// GenerateKey makes a new cluster key.
func GenerateKey() (*Key, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("cluster: making a cluster key: %w", err)
	}
	return keyOf(kp)
}

// ParseKey reads a cluster key from a file's contents.
func ParseKey(b []byte) (*Key, error) {
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return nil, fmt.Errorf("not a NATS nkey seed: %w", err)
	}
	return keyOf(kp)
}

func keyOf(kp nkeys.KeyPair) (*Key, error) {
	seed, err := kp.Seed()
	if err != nil {
		return nil, errors.New("holds a public key, not a seed (want the line starting with SU)")
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	if !nkeys.IsValidPublicUserKey(pub) {
		return nil, fmt.Errorf("is not a user nkey seed (its public key %.1s… is not a user's, want a seed starting with SU)", pub)
	}
	h := hmac.New(sha256.New, seed)
	h.Write([]byte(signingLabel))
	return &Key{kp: kp, pub: pub, mac: h.Sum(nil)}, nil
}

// Seed is the key as its file holds it.
func (k *Key) Seed() []byte {
	s, _ := k.kp.Seed()
	return append(s, '\n')
}

// PublicKey is the key's public nkey (U…): the one NATS user the embedded
// server admits, and what an external NATS server's configuration names
// to admit the nodes with this key. It is no secret.
func (k *Key) PublicKey() string { return k.pub }

// natsAuth authenticates a connection with the key as a NATS nkey.
func (k *Key) natsAuth() nats.Option {
	return nats.Nkey(k.pub, k.kp.Sign)
}

// LoadKey reads the key file at path. The file must not be readable by
// anyone but its owner (0600, as ssh asks of a private key): a key
// others can read is no longer the cluster's alone.
func LoadKey(path string) (*Key, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cluster key file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("cluster key file %s is readable by others (mode %04o): run chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster key file: %w", err)
	}
	k, err := ParseKey(b)
	if err != nil {
		return nil, fmt.Errorf("cluster key file %s %w", path, err)
	}
	return k, nil
}

// LoadOrCreateKey reads the key file at path, or makes a new key there
// (mode 0600) if there is none. created says it was made now. Of two
// processes creating it at once, one key wins and both use it.
func LoadOrCreateKey(path string) (k *Key, created bool, err error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		k, err := GenerateKey()
		if err != nil {
			return nil, false, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, false, fmt.Errorf("cluster key file: %w", err)
		}
		err = atomicfile.Create(path, k.Seed())
		if err == nil {
			return k, true, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, false, fmt.Errorf("cluster key file: writing %s: %w", path, err)
		}
	}
	k, err = LoadKey(path)
	return k, false, err
}
