package embeddednats

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd-dev/agentd/internal/cluster/clustertest"
)

// logLines collects a server's log messages, for a test to wait on one.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

// Enabled leaves out the server's debug notices and protocol trace.
func (l *logLines) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelInfo }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, r.Message)
	return nil
}
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }

func (l *logLines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
	}
}

// Routes admit only a server presenting the route secret: two servers
// with it form a route, a third with another secret routing to the first
// is refused, and neither side counts it as a route. With a certificate
// and the CA that signed the others', routes speak TLS both ways.
func TestRoutesNeedTheSecret(t *testing.T) {
	defer goleak.VerifyNone(t)
	pub, _ := user(t)
	dir := t.TempDir()
	cert, key := clustertest.WriteCert(t, dir)
	ca := cert // self-signed: its own CA
	for _, tc := range []struct {
		name          string
		cert, key, ca string
		// refused and told are what n1 and the intruder log: without a
		// certificate, the TLS derived from another secret fails
		// before any password is sent.
		refused, told string
	}{
		{name: "plain, on loopback", refused: "handshake error", told: "handshake error"},
		{name: "TLS", cert: cert, key: key, ca: ca, refused: "authentication error", told: "Authorization Violation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r1, r2, r3 := clustertest.FreeAddr(t), clustertest.FreeAddr(t), clustertest.FreeAddr(t)
			start := func(name, listen, secret string, routes []string, log *logLines) *Server {
				t.Helper()
				s, err := Start(Config{StoreDir: t.TempDir(), ServerName: name, Nkey: pub, ClusterName: "agentd",
					ClusterListen: listen, Routes: routes, RouteSecret: secret, TLSCert: tc.cert, TLSKey: tc.key, TLSCA: tc.ca,
					Logger: slog.New(log)})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Shutdown)
				return s
			}
			log1, log3 := &logLines{}, &logLines{}
			s1 := start("n1", r1, "the-secret", []string{r1, r2}, log1)
			s2 := start("n2", r2, "the-secret", []string{r1, r2}, &logLines{})
			waitUntil(t, "n1 and n2 routed", func() bool { return s1.NumRoutes() > 0 && s2.NumRoutes() > 0 })
			if got := s1.ClusterAddr(); got != r1 {
				t.Errorf("ClusterAddr %q, want %q", got, r1)
			}
			s3 := start("intruder", r3, "another-secret", []string{"nats-route://" + r1}, log3)
			waitUntil(t, "n1 refuses the intruder's route", func() bool { return log1.has(tc.refused) })
			waitUntil(t, "the intruder is told", func() bool { return log3.has(tc.told) })
			if n := s3.NumRoutes(); n != 0 {
				t.Errorf("the intruder has %d routes", n)
			}
			// n1 and n2 may still be opening their pool's connections
			// (CI: n1 2, n2 3): their counts meet once they have, and a
			// count that took in the intruder would stay above n2's.
			waitUntil(t, "n1 counts as many routes as n2, not the intruder", func() bool { return s1.NumRoutes() == s2.NumRoutes() })
		})
	}
}

func TestRoutesRejectBadConfig(t *testing.T) {
	pub, _ := user(t)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"routes without a secret", Config{StoreDir: "x", Nkey: pub, ClusterName: "agentd", ClusterListen: "127.0.0.1:0"}, "route secret"},
		{"a route without a port", Config{StoreDir: "x", Nkey: pub, ClusterName: "agentd", ClusterListen: "127.0.0.1:0", RouteSecret: "s", Routes: []string{"n1"}}, `route "n1"`},
		{"a missing CA", Config{StoreDir: "x", Nkey: pub, ClusterName: "agentd", ClusterListen: "127.0.0.1:0", RouteSecret: "s", TLSCert: "c.pem", TLSKey: "k.pem", TLSCA: "none.pem"}, "TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Start(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: %v, want an error mentioning %s", err, tc.want)
			}
		})
	}
}

// A server without a certificate never sends the route secret to
// whatever listens on a route address: here a process that took the port
// of a node that is down and speaks NATS (the INFO a server sends first).
// What arrives is a TLS handshake, never a CONNECT with the password.
func TestRoutesDoNotSendTheSecretToAnImpostor(t *testing.T) {
	defer goleak.VerifyNone(t)
	pub, _ := user(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		c.Write([]byte(`INFO {"server_id":"NIMPOSTOR","auth_required":true,"cluster":"agentd"}` + "\r\n"))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		// A CONNECT would be in clear text, with the password after
		// the verb; a TLS ClientHello starts with a record header.
		first := make([]byte, len("CONNECT"))
		n, _ := io.ReadFull(c, first)
		got <- string(first[:n])
	}()
	const secret = "the-route-secret"
	s, err := Start(Config{StoreDir: t.TempDir(), ServerName: "n1", Nkey: pub, ClusterName: "agentd",
		ClusterListen: clustertest.FreeAddr(t), Routes: []string{l.Addr().String()}, RouteSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	first := <-got
	// Closed before Shutdown: a connection the server dials meanwhile
	// would wait in the backlog for a ServerHello until the TLS timeout.
	l.Close()
	if first == "CONNECT" {
		t.Fatalf("the impostor on a route address got a CONNECT in clear text (%q), with the route secret in it", first)
	}
}
