package cluster

import (
	"net/url"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/cluster/embeddednats"
)

// A node whose NATS goes away tries to reconnect for as long as it runs
// (nats.go gives up after 60 tries by default, about two minutes, and the
// node then stayed disconnected for good), and is connected again once
// NATS is back on its address.
func TestNodeReconnectsToNATS(t *testing.T) {
	dir := t.TempDir()
	srv, err := embeddednats.Start(embeddednats.Config{StoreDir: dir, Nkey: testKey.PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	n := join(t, srv.ClientURL(), "a")
	if got := n.nc.Opts.MaxReconnect; got >= 0 {
		t.Fatalf("MaxReconnect = %d: the node would give NATS up", got)
	}
	srv.Shutdown()
	waitConnected(t, n, false)
	again, err := embeddednats.Start(embeddednats.Config{StoreDir: dir, Nkey: testKey.PublicKey(), Listen: u.Host})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(again.Shutdown)
	waitConnected(t, n, true)
}

func waitConnected(t *testing.T, n *Node, want bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for n.Connected() != want {
		if time.Now().After(deadline) {
			t.Fatalf("node connected = %v after 30 s, want %v", !want, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
