package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/agentd-dev/agentd/internal/cluster/clustertest"
)

// The cluster's transport admits only the nodes of the cluster, as an
// attacker on the NATS port would try it: a client with no credentials,
// or with credentials of its own, is refused by the embedded NATS; one
// that holds the NATS credential but is no node (here: it read the key
// file) has a forged command, carrying the principal it likes, refused
// by the node, and the command does not run.
func TestClusterNATSRefusesOutsiders(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	natsAddr := clustertest.FreeAddr(t)
	s := svStart(t, e, clNodeArgs(e, "A", "--cluster", "embedded", "--cluster-listen", natsAddr)...)
	url := "nats://" + natsAddr
	c := s.dial("a")
	svCreate(c, "s1")

	other, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	otherPub, _ := other.PublicKey()
	for _, tc := range []struct {
		name string
		opts []nats.Option
	}{
		{"anonymous (CONNECT {})", nil},
		{"another nkey", []nats.Option{nats.Nkey(otherPub, other.Sign)}},
		{"a user and password", []nats.Option{nats.UserInfo("agentd", "agentd")}},
		{"a token", []nats.Option{nats.Token("secret")}},
	} {
		nc, err := nats.Connect(url, append(tc.opts, nats.NoReconnect())...)
		if err == nil {
			nc.Close()
			t.Errorf("%s: connected to the cluster's NATS", tc.name)
		} else if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("%s: %v, want an authorization violation", tc.name, err)
		}
	}

	// The key file: 0600, and a NATS credential that is no node's.
	keyPath := clKeyPath(e, "A")
	if fi, err := os.Stat(keyPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file %s: %v, mode %v", keyPath, err, fi.Mode().Perm())
	}
	nc, err := nats.Connect(url, clKeyAuth(t, keyPath), nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	marker := filepath.Join(e.cwd, "forged-ran")
	forged := `{"cmd":{"type":"bash","sessionId":"s1","payload":{"command":"touch ` + marker + `"}},"who":{},"from":"n2","hops":1}`
	ans, err := nc.Request("agentd.node.A", []byte(forged), svWait)
	if err != nil {
		t.Fatal(err)
	}
	if e := ans.Header.Get("Agentd-Error"); !strings.Contains(e, "command refused") {
		t.Fatalf("forged command answered %q (error %q), want it refused", ans.Data, e)
	}
	// The same bash through the node's own client runs: what stopped the
	// forged one is its missing signature, not the command.
	real := filepath.Join(e.cwd, "real-ran")
	c.must("bash", svM{"sessionId": "s1", "command": "touch " + real})
	if _, err := os.Stat(real); err != nil {
		t.Fatalf("the client's bash did not run: %v", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the forged command ran")
	}
	svWaitUntil(t, "the refusal is logged", func() bool { return strings.Contains(s.stderr.String(), "cluster: refused a command") })
}

// clKeyAuth authenticates to NATS with the cluster key file at path.
func clKeyAuth(t *testing.T, path string) nats.Option {
	t.Helper()
	o, err := nats.NkeyOptionFromSeed(path)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// The cluster key outlives kill -9: the restarted node reads the same
// file and the node that joined with a copy of it rejoins.
func TestClusterKeyAfterKill9(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	nodes := clStartWith(t, e, []string{"A", "B"}, "--cluster-spread")
	a, b := nodes["A"], nodes["B"]
	before, err := os.ReadFile(clKeyPath(e, "A"))
	if err != nil {
		t.Fatal(err)
	}

	a.kill9()
	a = a.restart()
	after, err := os.ReadFile(clKeyPath(e, "A"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("the cluster key changed across kill -9")
	}
	if fi, _ := os.Stat(clKeyPath(e, "A")); fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v after the restart", fi.Mode().Perm())
	}
	svWaitUntil(t, "B rejoins the restarted A", func() bool {
		sb := clStatus(t, b)
		return sb.Connected && sb.Members == 2 && clStatus(t, a).Members == 2
	})
	// A command crosses between them again, signed: the session is
	// placed on A, created through B.
	c := b.dial("b")
	svCreate(c, clSessionOn("A", "A", "B"))
}

// Off loopback the embedded NATS takes TLS or does not start; with TLS,
// a node verifying the certificate joins, and a client without TLS is
// refused.
func TestClusterTLS(t *testing.T) {
	t.Parallel()
	e := e2eNewEnv(t, e2eOpts{})
	code, stderr := svRunExit(t, e, nil, clNodeArgs(e, "X", "--cluster", "embedded", "--cluster-listen", "0.0.0.0:0")...)
	if code == 0 || !strings.Contains(stderr, "--cluster-listen 0.0.0.0:0 is reachable from other hosts") || !strings.Contains(stderr, "--cluster-tls-cert") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}

	cert, key := clustertest.WriteCert(t, e.root)
	natsAddr := clustertest.FreeAddr(t)
	a := svStart(t, e, clNodeArgs(e, "A", "--cluster", "embedded", "--cluster-listen", natsAddr, "--cluster-tls-cert", cert, "--cluster-tls-key", key)...)
	keyCopy := clKeyCopy(t, e, "A")
	b := svStart(t, e, clNodeArgs(e, "B", "--cluster", "nats://"+natsAddr, "--cluster-key", keyCopy, "--nats-tls-ca", cert)...)
	svWaitUntil(t, "A and B see each other", func() bool { return clStatus(t, a).Members == 2 && clStatus(t, b).Members == 2 })

	// The key, but no CA: the client cannot check the server and does
	// not go on.
	if nc, err := nats.Connect("nats://"+natsAddr, clKeyAuth(t, keyCopy), nats.NoReconnect()); err == nil {
		nc.Close()
		t.Fatal("connected without verifying the server's certificate")
	}
	// Plain NATS on the TLS port gets nothing but the server's INFO.
	conn, err := net.Dial("tcp", natsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(svWait))
	buf := make([]byte, 4096)
	n, _ := conn.Read(buf)
	if !strings.Contains(string(buf[:n]), `"tls_required":true`) {
		t.Fatalf("the server's INFO does not require TLS: %s", buf[:n])
	}
	_, _ = conn.Write([]byte("CONNECT {}\r\nSUB > 1\r\nPING\r\n"))
	n, _ = conn.Read(buf)
	if strings.Contains(string(buf[:n]), "PONG") {
		t.Fatalf("a plain client was answered: %s", buf[:n])
	}
}
