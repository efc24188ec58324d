package embeddednats

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

func TestStartAcceptsClientsAndShutsDown(t *testing.T) {
	defer goleak.VerifyNone(t)
	s, err := Start(Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.ClientURL())
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
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no store", Config{}, "store directory"},
		{"bad listen", Config{StoreDir: "x", Listen: "127.0.0.1"}, `listen address "127.0.0.1"`},
		{"bad port", Config{StoreDir: "x", Listen: "127.0.0.1:http"}, `port "http"`},
		{"cluster without name", Config{StoreDir: "x", ClusterListen: "127.0.0.1:0"}, "cluster name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Start(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: %v, want an error mentioning %s", err, tc.want)
			}
		})
	}
}
