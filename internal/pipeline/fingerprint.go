package pipeline

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// FingerprintKeyBytes is the length of a key for Fingerprint (and of
// Options.FingerprintKey): as long as HMAC-SHA256's output.
const FingerprintKeyBytes = 32

// Fingerprint is what identifies cmd's request for its idempotency key
// and its id: everything but id and idempotencyKey, with the payload's
// JSON canonicalized (spec §8.3), hashed. The journal keeps it next to
// outcomes for as long as they are replayable, and a payload may hold a
// secret (an MCP server's env), so with a key the hash is HMAC-SHA256
// under it: a fingerprint read off the disk cannot be checked against
// guesses of the secret without the key. nil key: plain SHA-256, for a
// journal whose fingerprints several processes without a shared key
// compare.
func Fingerprint(key []byte, cmd Command) string {
	var payload any
	if len(cmd.Payload) > 0 {
		dec := json.NewDecoder(bytes.NewReader(cmd.Payload))
		dec.UseNumber()
		if dec.Decode(&payload) != nil {
			payload = string(cmd.Payload)
		}
	}
	b, _ := json.Marshal(struct {
		T string   `json:"t"`
		S string   `json:"s"`
		D []string `json:"d"`
		V *int     `json:"v"`
		P any      `json:"p"`
	}{cmd.Type, cmd.SessionID, cmd.DependsOn, cmd.IfSessionVersion, payload})
	var sum []byte
	if key != nil {
		m := hmac.New(sha256.New, key)
		m.Write(b)
		sum = m.Sum(nil)
	} else {
		s := sha256.Sum256(b)
		sum = s[:]
	}
	return hex.EncodeToString(sum[:16])
}
