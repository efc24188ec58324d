package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentd-dev/agentd/internal/atomicfile"
	"github.com/agentd-dev/agentd/internal/pipeline"
)

// fingerprintKeyFile is where a server on its own keeps the key of the
// command journal's request fingerprints (pipeline.Fingerprint), in its
// state directory. It is made once and kept: an idempotent request
// repeated after a restart, even a kill -9, must fingerprint as before.
const fingerprintKeyFile = "fingerprint.key"

// fingerprintKey returns the key of dir, made on first use. A file that
// is there but unreadable or damaged is an error, not replaced: a new
// key would make every journaled request look like another one.
func fingerprintKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, fingerprintKeyFile)
	key, err := readFingerprintKey(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("server state directory: %w", err)
	}
	key = make([]byte, pipeline.FingerprintKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("making the journal's fingerprint key: %w", err)
	}
	// Created, never replaced: of two servers racing on one directory
	// the first wins and the other reads its key.
	err = atomicfile.Create(path, []byte(hex.EncodeToString(key)+"\n"))
	if errors.Is(err, fs.ErrExist) {
		return readFingerprintKey(path)
	} else if err != nil {
		return nil, fmt.Errorf("the journal's fingerprint key: %w", err)
	}
	return key, nil
}

func readFingerprintKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("the journal's fingerprint key: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != pipeline.FingerprintKeyBytes {
		return nil, fmt.Errorf("the journal's fingerprint key %s is damaged (want %d hex-encoded bytes); remove it to make a new one, which makes idempotency keys of earlier requests unusable", path, pipeline.FingerprintKeyBytes)
	}
	return key, nil
}
