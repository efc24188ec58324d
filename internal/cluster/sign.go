package cluster

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// What crosses between nodes outside JetStream (a command sent to a node
// and its answer, a broadcast) is signed with the cluster key (Key.mac)
// and checked on receipt, before anything acts on it. The signature
// covers what the message is (its kind), where it goes (subject and reply
// subject), who sends it (the Agentd-Node header), any error it reports,
// when it was made and the payload, in which the serve wiring carries the
// principal a command runs as. So a NATS client that is not a node (one
// that got into a NATS shared with others, or reads what nodes send)
// cannot have a command run, change its principal, redirect it to another
// node, or answer in a node's name; and one it saw cannot be sent again
// (a nonce, remembered as long as the message is fresh).

// hdrSig carries the signature: "v1 <unix ms> <nonce> <mac>".
const hdrSig = "Agentd-Sig"

// Kinds of signed message; part of what is signed, so that one kind is
// never taken for another.
const (
	sigCommand   = "command"
	sigReply     = "reply"
	sigBroadcast = "broadcast"
	// sigLive prefixes the kind of a session's live events (live.go),
	// which also names their seq, epoch and batch headers.
	sigLive = "live"
)

// signWindow is how far a message's time may be from the receiver's
// clock: the cluster's leases already need clocks in step to well under
// a lease TTL, and a message older than this is refused (a replay).
const signWindow = time.Minute

// signer signs and checks messages with one cluster key.
type signer struct {
	key  []byte
	node string
	now  func() time.Time
}

func newSigner(k *Key, node string) *signer {
	return &signer{key: k.mac, node: node, now: time.Now}
}

// nonces remembers the nonces of the messages one subscription accepted,
// while they are fresh, to refuse them a second time.
type nonces struct {
	mu        sync.Mutex       // a leaf: guards seen and pruneNext
	seen      map[string]int64 // nonce → unix ms after which it is stale
	pruneNext int
}

func newNonces() *nonces { return &nonces{seen: map[string]int64{}, pruneNext: 1024} }

// first records nonce, valid until until (unix ms), and reports whether
// it is new.
func (c *nonces) first(nonce string, now, until int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.seen[nonce]; dup {
		return false
	}
	if len(c.seen) >= c.pruneNext {
		for k, u := range c.seen {
			if u < now {
				delete(c.seen, k)
			}
		}
		c.pruneNext = max(1024, 2*len(c.seen))
	}
	c.seen[nonce] = until
	return true
}

// sign sets m's node and signature headers.
func (s *signer) sign(kind string, m *nats.Msg) {
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header.Set(hdrNode, s.node)
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	nonce := base64.RawURLEncoding.EncodeToString(raw[:])
	ts := strconv.FormatInt(s.now().UnixMilli(), 10)
	mac := s.mac(kind, m, ts, nonce)
	m.Header.Set(hdrSig, "v1 "+ts+" "+nonce+" "+base64.RawURLEncoding.EncodeToString(mac))
}

func (s *signer) mac(kind string, m *nats.Msg, ts, nonce string) []byte {
	h := hmac.New(sha256.New, s.key)
	var buf []byte
	for _, f := range []string{kind, m.Subject, m.Reply, m.Header.Get(hdrNode), m.Header.Get(hdrError), ts, nonce} {
		buf = binary.AppendUvarint(buf[:0], uint64(len(f)))
		h.Write(buf)
		h.Write([]byte(f))
	}
	h.Write(m.Data)
	return h.Sum(nil)
}

// errBadSignature marks a message refused for its signature.
var errBadSignature = errors.New("not signed with this cluster's key")

// verify checks m's signature as a message of kind. With seen, a nonce
// already accepted is refused: a replayed command or broadcast. It
// returns why m is refused (wrapping errBadSignature), or nil.
func (s *signer) verify(kind string, m *nats.Msg, seen *nonces) error {
	v := m.Header.Get(hdrSig)
	if v == "" {
		return fmt.Errorf("%w: no %s header", errBadSignature, hdrSig)
	}
	f := strings.Fields(v)
	if len(f) != 4 || f[0] != "v1" {
		return fmt.Errorf("%w: %s header is not \"v1 <time> <nonce> <mac>\"", errBadSignature, hdrSig)
	}
	ts, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s header's time is not a number", errBadSignature, hdrSig)
	}
	got, err := base64.RawURLEncoding.DecodeString(f[3])
	if err != nil || !hmac.Equal(got, s.mac(kind, m, f[1], f[2])) {
		return fmt.Errorf("%w: the signature does not match", errBadSignature)
	}
	now := s.now().UnixMilli()
	if d := time.Duration(now-ts) * time.Millisecond; d > signWindow || d < -signWindow {
		return fmt.Errorf("%w: signed %s away from this node's clock (at most %s; are the nodes' clocks in step?)", errBadSignature, d.Round(time.Millisecond), signWindow)
	}
	if seen != nil && !seen.first(f[2], now, ts+signWindow.Milliseconds()) {
		return fmt.Errorf("%w: a replay of a message already received", errBadSignature)
	}
	return nil
}
