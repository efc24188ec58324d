package embeddednats

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/agentd-dev/agentd/internal/cluster/clustertest"
)

// Three servers routed with the TLS derived from the route secret; one
// of them stops and starts again on its route port and store while a
// replicated stream takes messages. The routes settle again
// (every server has its pool and system account connections to both
// others: the peers' reconnect attempts and extra pool connections are
// closed as duplicates, not kept connecting) and the stream answers
// through the restarted server with all three replicas current.
func TestRoutesSettleAfterARestart(t *testing.T) {
	defer goleak.VerifyNone(t)
	pub, auth := user(t)
	const secret = "the-route-secret"
	var addrs, dirs []string
	for range 3 {
		addrs = append(addrs, clustertest.FreeAddr(t))
		dirs = append(dirs, t.TempDir())
	}
	start := func(i int) (*Server, error) {
		return Start(Config{StoreDir: dirs[i], ServerName: fmt.Sprintf("n%d", i+1), Nkey: pub, ClusterName: "agentd",
			ClusterListen: addrs[i], Routes: addrs, RouteSecret: secret, ReadyTimeout: 30 * time.Second})
	}
	srv := make([]*Server, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() { srv[i], errs[i] = start(i) })
	}
	wg.Wait()
	defer func() {
		for _, s := range srv {
			if s != nil {
				s.Shutdown()
			}
		}
	}()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// A pool of 3 connections and one for the system account, to each
	// of the two others.
	const routes = 2 * 4
	settled := func() bool {
		return srv[0].NumRoutes() == routes && srv[1].NumRoutes() == routes && srv[2].NumRoutes() == routes
	}
	waitUntil(t, "the routes settle", settled)
	nc, err := nats.Connect(srv[1].ClientURL(), auth)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	waitUntil(t, "a stream of 3 replicas", func() bool {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: 3})
		return err == nil
	})
	srv[0].Shutdown()
	srv[0] = nil
	// Written by the two left (a quorum of three).
	waitUntil(t, "a write with n1 down", func() bool {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.Publish(c, "s.x", []byte("while n1 is down"))
		return err == nil
	})
	if srv[0], err = start(0); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the routes settle again", settled)
	nc0, err := nats.Connect(srv[0].ClientURL(), auth)
	if err != nil {
		t.Fatal(err)
	}
	defer nc0.Close()
	js0, err := jetstream.New(nc0)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "three current replicas, through n1", func() bool {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		st, err := js0.Stream(c, "S")
		if err != nil {
			return false
		}
		info, err := st.Info(c)
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" || info.State.Msgs == 0 {
			return false
		}
		current := 1
		for _, p := range info.Cluster.Replicas {
			if p.Current && !p.Offline {
				current++
			}
		}
		return current == 3
	})
}
