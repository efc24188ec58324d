package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

// externalNATS runs a NATS server with JetStream as an operator would
// outside agentd, with the authentication opts sets.
func externalNATS(t *testing.T, set func(*server.Options)) string {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true}
	set(opts)
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS not ready")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s.ClientURL()
}

// A node joins an external NATS with the credential it is given (read
// from a file), and is refused with a wrong one; the flags' rules hold in
// Credentials too.
func TestJoinExternalNATSCredentials(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	userURL := externalNATS(t, func(o *server.Options) { o.Username, o.Password = "agentd", "s3cret pass" })
	tokenURL := externalNATS(t, func(o *server.Options) { o.Authorization = "tok-123" })
	tests := []struct {
		name  string
		url   string
		creds Credentials
		want  string // "" joins
	}{
		{"user and password", userURL, Credentials{User: "agentd", PasswordFile: file("pw", "s3cret pass\n")}, ""},
		{"wrong password", userURL, Credentials{User: "agentd", PasswordFile: file("bad", "guess\n")}, "Authorization Violation"},
		{"no credential: the cluster key is not a user there", userURL, Credentials{}, "nkeys not supported by the server (this node authenticated with its cluster key"},
		{"token", tokenURL, Credentials{TokenFile: file("tok", "tok-123\n")}, ""},
		{"wrong token", tokenURL, Credentials{TokenFile: file("badtok", "tok-124")}, "Authorization Violation"},
		{"empty token file", tokenURL, Credentials{TokenFile: file("empty", "\n")}, "is empty"},
		{"missing password file", userURL, Credentials{User: "agentd", PasswordFile: filepath.Join(dir, "none")}, "NATS password file"},
		{"user without password", userURL, Credentials{User: "agentd"}, "needs a password file"},
		{"two credentials", userURL, Credentials{TokenFile: "t", NkeyFile: "n"}, "give one NATS credential"},
		{"missing CA", userURL, Credentials{User: "agentd", PasswordFile: file("pw2", "s3cret pass"), TLSCA: filepath.Join(dir, "none.pem")}, "TLS CA file"},
		{"client cert without key", userURL, Credentials{User: "agentd", PasswordFile: file("pw3", "s3cret pass"), TLSCert: "c.pem"}, "needs its key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := Join(ctxT(t), Config{Key: testKey, NodeID: "a", URL: tc.url, NATS: tc.creds, LeaseTTL: testTTL})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				n.Close()
				return
			}
			if err == nil {
				n.Close()
				t.Fatalf("joined, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Join: %v, want %q", err, tc.want)
			}
			if strings.Contains(tc.want, "Authorization Violation") && !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("Join: %v is not nats.ErrAuthorization", err)
			}
		})
	}
}
