package cluster

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// routeLabel separates the route secret from any other use of the seed.
const routeLabel = "agentd cluster route secret v1"

// RouteSecret is the password the embedded NATS servers of a cluster
// (--cluster embedded with --cluster-routes) present to each other on
// their routes and require of each other: derived from the key's seed,
// so every node holding the cluster key has it and nobody else does.
// NATS routes take a user and password only (no nkey challenge), so the
// password only ever crosses a route inside TLS: with the configured
// certificate, or, without one, with one embeddednats derives from this
// secret (on loopback or off it). It reveals nothing of the seed
// or of the signing key.
func (k *Key) RouteSecret() string {
	seed, _ := k.kp.Seed()
	h := hmac.New(sha256.New, seed)
	h.Write([]byte(routeLabel))
	return hex.EncodeToString(h.Sum(nil))
}
