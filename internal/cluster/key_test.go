package cluster

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// The key file is made once, 0600, and read back the same by every later
// start; a file others can read, or that holds no user seed, is refused
// with what to do.
func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "cluster.key")
	k, created, err := LoadOrCreateKey(path)
	if err != nil || !created {
		t.Fatalf("first start: %v, created %v", err, created)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %04o, want 0600", fi.Mode().Perm())
	}
	again, created, err := LoadOrCreateKey(path)
	if err != nil || created || again.PublicKey() != k.PublicKey() || !bytes.Equal(again.mac, k.mac) {
		t.Fatalf("second start: %v, created %v, same key %v", err, created, again != nil && again.PublicKey() == k.PublicKey())
	}
	if b, _ := os.ReadFile(path); !bytes.HasPrefix(b, []byte("SU")) {
		t.Errorf("the file does not hold a user seed: %.2q…", b)
	}
	if names, _ := os.ReadDir(filepath.Dir(path)); len(names) != 1 {
		t.Errorf("left beside the key: %v", names)
	}

	write := func(name string, data []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	acct, _ := nkeys.CreateAccount()
	acctSeed, _ := acct.Seed()
	for _, tc := range []struct {
		name, path, want string
	}{
		{"readable by others", write("open.key", k.Seed(), 0o644), "readable by others (mode 0644): run chmod 600"},
		{"not a seed", write("junk.key", []byte("hello\n"), 0o600), "not a NATS nkey seed"},
		{"a public key", write("pub.key", []byte(k.PublicKey()+"\n"), 0o600), "not a NATS nkey seed"},
		{"an account's seed", write("acct.key", append(acctSeed, '\n'), 0o600), "not a user nkey seed"},
		{"missing", filepath.Join(dir, "none.key"), "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := LoadKey(tc.path); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadKey: %v, want %q", err, tc.want)
			}
		})
	}
}

// A signature is checked against everything it covers, and with a nonce
// set a message is accepted once.
func TestSignVerify(t *testing.T) {
	s := newSigner(testKey, "a")
	m := &nats.Msg{Subject: "agentd.node.b", Reply: "_INBOX.x.1", Data: []byte("payload")}
	s.sign(sigCommand, m)
	seen := newNonces()
	if err := s.verify(sigCommand, m, seen); err != nil {
		t.Fatal(err)
	}
	if err := s.verify(sigCommand, m, seen); err == nil || !strings.Contains(err.Error(), "replay") {
		t.Fatalf("the same message again: %v", err)
	}
	if err := s.verify(sigCommand, m, nil); err != nil {
		t.Fatalf("without a nonce set: %v", err)
	}
	if err := s.verify(sigReply, m, nil); err == nil {
		t.Fatal("a command taken for a reply")
	}
	e := &nats.Msg{Subject: "_INBOX.x.1", Header: nats.Header{}}
	e.Header.Set(hdrError, "no such session")
	s.sign(sigReply, e)
	e.Header.Set(hdrError, "session s2 approved")
	if err := s.verify(sigReply, e, nil); err == nil {
		t.Fatal("an answer's error changed, still accepted")
	}
	// The nonce set forgets what is stale (it can no longer be accepted).
	seen = newNonces()
	seen.pruneNext = 2
	old := time.Now().Add(-time.Hour).UnixMilli()
	seen.first("n1", old, old)
	seen.first("n2", old, old)
	seen.first("n3", time.Now().UnixMilli(), time.Now().UnixMilli())
	if len(seen.seen) != 1 {
		t.Fatalf("nonces kept: %v", seen.seen)
	}
}
