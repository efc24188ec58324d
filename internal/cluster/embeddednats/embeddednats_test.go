package embeddednats

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"go.uber.org/goleak"

	"github.com/agentd-dev/agentd/internal/cluster/clustertest"
)

// user is a NATS user nkey for a test: the public key a server admits and
// the option a client authenticates with.
func user(t *testing.T) (string, nats.Option) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub, nats.Nkey(pub, kp.Sign)
}

func TestStartAcceptsClientsAndShutsDown(t *testing.T) {
	defer goleak.VerifyNone(t)
	pub, auth := user(t)
	s, err := Start(Config{StoreDir: t.TempDir(), Nkey: pub})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.ClientURL(), auth)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.ClientURL(), "nats://127.0.0.1:") {
		t.Errorf("client URL %s is not on 127.0.0.1", s.ClientURL())
	}
	nc.Close()
	s.Shutdown()
}

func TestStartRejectsBadConfig(t *testing.T) {
	pub, _ := user(t)
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no store", Config{Nkey: pub}, "store directory"},
		{"no user", Config{StoreDir: "x"}, "public user nkey"},
		{"not a user's key", Config{StoreDir: "x", Nkey: "SU" + pub[2:]}, "public user nkey"},
		{"bad listen", Config{StoreDir: "x", Nkey: pub, Listen: "127.0.0.1"}, `listen address "127.0.0.1"`},
		{"bad port", Config{StoreDir: "x", Nkey: pub, Listen: "127.0.0.1:http"}, `port "http"`},
		{"cluster without name", Config{StoreDir: "x", Nkey: pub, ClusterListen: "127.0.0.1:0"}, "cluster name"},
		{"certificate without key", Config{StoreDir: "x", Nkey: pub, TLSCert: "c.pem"}, "needs its key"},
		{"missing certificate", Config{StoreDir: "x", Nkey: pub, TLSCert: "none.pem", TLSKey: "none.key"}, "TLS certificate none.pem"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Start(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: %v, want an error mentioning %s", err, tc.want)
			}
		})
	}
}

// The server admits only the user of its nkey: a client with no
// credentials, another nkey, a user and password or a token is refused
// before it can subscribe or publish anything.
func TestStartRefusesClientsWithoutTheKey(t *testing.T) {
	defer goleak.VerifyNone(t)
	pub, auth := user(t)
	s, err := Start(Config{StoreDir: t.TempDir(), Nkey: pub})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	_, other := user(t)
	for _, tc := range []struct {
		name string
		opts []nats.Option
	}{
		{"anonymous", nil},
		{"another nkey", []nats.Option{other}},
		{"a user and password", []nats.Option{nats.UserInfo("agentd", "guess")}},
		{"a token", []nats.Option{nats.Token("guess")}},
		{"the right public key, signed by another", []nats.Option{nats.Nkey(pub, func(nonce []byte) ([]byte, error) {
			kp, _ := nkeys.CreateUser()
			return kp.Sign(nonce)
		})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := nats.Connect(s.ClientURL(), append(tc.opts, nats.NoReconnect())...)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("connect: %v, want an authorization violation", err)
			}
		})
	}
	nc, err := nats.Connect(s.ClientURL(), auth)
	if err != nil {
		t.Fatalf("the key's own user: %v", err)
	}
	nc.Close()
}

// With a certificate the listener takes TLS only: a client speaking plain
// NATS is refused, one that verifies the certificate gets in (with the
// key), and a node in the process connects without a socket and without
// TLS.
func TestStartWithTLS(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	cert, key := clustertest.WriteCert(t, dir)
	ca := cert // self-signed: its own CA
	pub, auth := user(t)
	s, err := Start(Config{StoreDir: t.TempDir(), Nkey: pub, TLSCert: cert, TLSKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if nc, err := nats.Connect(s.ClientURL(), auth, nats.NoReconnect()); err == nil {
		nc.Close()
		t.Fatal("a client without TLS (no CA to verify the server) connected")
	}
	nc, err := nats.Connect(s.ClientURL(), auth, nats.RootCAs(ca), nats.NoReconnect())
	if err != nil {
		t.Fatalf("TLS client with the CA: %v", err)
	}
	if !nc.TLSRequired() {
		t.Error("the connection does not say TLS is required")
	}
	nc.Close()
	if nc, err := nats.Connect(s.ClientURL(), nats.RootCAs(ca), nats.NoReconnect()); err == nil {
		nc.Close()
		t.Fatal("a TLS client without the key connected")
	}
	if !strings.HasPrefix(s.ClientURL(), "tls://") {
		t.Errorf("client URL %s does not say tls://", s.ClientURL())
	}
	nc, err = nats.Connect(s.InProcessURL(), auth, nats.InProcessServer(s))
	if err != nil {
		t.Fatalf("in-process client: %v", err)
	}
	nc.Close()
}
