package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

// outsider is a NATS client that is not a node: it got into the NATS
// server (it holds credentials for it, as a user of an external NATS
// shared with others would) but not the cluster's key.
func outsider(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, testKey.natsAuth(), nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// recorder collects what a node's handler was given.
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) add(p []byte) {
	r.mu.Lock()
	r.got = append(r.got, string(p))
	r.mu.Unlock()
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// waitRefused waits until n has refused want messages.
func waitRefused(t *testing.T, n *Node, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.Refused() < want {
		if time.Now().After(deadline) {
			t.Fatalf("node %s refused %d messages, want %d", n.ID(), n.Refused(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A command reaches a node's handler only if a node of the cluster signed
// it for that node, and only once. Everything else (the forged
// command with its own principal, unsigned; one signed with another key;
// a real one with the principal changed, sent to another node, replayed
// or too old) is answered "command refused" and never handled.
func TestServeNodeRefusesForgedCommands(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	srv := startServer(t)
	a, b := join(t, srv.ClientURL(), "a"), join(t, srv.ClientURL(), "b")
	ctx := ctxT(t)
	var handled recorder
	stop, err := a.ServeNode(ctx, func(_ context.Context, p []byte, reply func([]byte, error)) {
		handled.add(p)
		reply([]byte("ran"), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	spy := outsider(t, srv.ClientURL())

	// A real command from b, seen by the outsider on its way.
	seen, err := spy.SubscribeSync(nodePrefix + "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	real := `{"cmd":{"type":"get_state"},"who":{"subject":"bob"},"from":"b","hops":1}`
	if out, err := sendNode(ctx, b, "a", []byte(real)); err != nil || string(out) != "ran" {
		t.Fatalf("b's signed command: %q, %v", out, err)
	}
	captured, err := seen.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = seen.Unsubscribe()

	otherKey, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	forged := []byte(`{"cmd":{"type":"bash","command":"id"},"who":{},"from":"n2","hops":1}`)
	signedBy := func(k *Key, node, subject string, data []byte, at time.Time) *nats.Msg {
		s := newSigner(k, node)
		s.now = func() time.Time { return at }
		m := &nats.Msg{Subject: subject, Reply: spy.NewInbox(), Data: data}
		s.sign(sigCommand, m)
		return m
	}
	copyOf := func(m *nats.Msg) *nats.Msg {
		c := &nats.Msg{Subject: m.Subject, Reply: m.Reply, Data: append([]byte(nil), m.Data...), Header: nats.Header{}}
		for k, v := range m.Header {
			c.Header[k] = append([]string(nil), v...)
		}
		return c
	}
	tampered := copyOf(captured)
	tampered.Data = []byte(strings.Replace(string(tampered.Data), "bob", "root", 1))
	renamed := copyOf(captured)
	renamed.Header.Set(hdrNode, "c")
	now := time.Now()
	tests := []struct {
		name string
		msg  *nats.Msg
		want string
	}{
		{"unsigned, any principal", &nats.Msg{Subject: nodePrefix + "a", Data: forged}, "no Agentd-Sig header"},
		{"signed with another key", signedBy(otherKey, "b", nodePrefix+"a", forged, now), "signature does not match"},
		{"signed for another node", signedBy(testKey, "b", nodePrefix+"b", forged, now), "signature does not match"},
		{"principal changed", tampered, "signature does not match"},
		{"sender changed", renamed, "signature does not match"},
		{"replayed", copyOf(captured), "a replay"},
		{"too old", signedBy(testKey, "b", nodePrefix+"a", forged, now.Add(-2*signWindow)), "away from this node's clock"},
		{"from the future", signedBy(testKey, "b", nodePrefix+"a", forged, now.Add(2*signWindow)), "away from this node's clock"},
		{"garbage signature", func() *nats.Msg {
			m := &nats.Msg{Subject: nodePrefix + "a", Data: forged, Header: nats.Header{}}
			m.Header.Set(hdrSig, "v1 x y z")
			return m
		}(), "time is not a number"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.msg.Subject = nodePrefix + "a" // the one signed for b too
			// A copy of b's command keeps b's reply subject: a's refusal
			// goes there (and b drops it), and only the count tells.
			mine := tc.msg.Reply != captured.Reply
			if tc.msg.Reply == "" {
				tc.msg.Reply = spy.NewInbox()
			}
			var answers *nats.Subscription
			if mine {
				if answers, err = spy.SubscribeSync(tc.msg.Reply); err != nil {
					t.Fatal(err)
				}
				defer answers.Unsubscribe()
			}
			if err := spy.PublishMsg(tc.msg); err != nil {
				t.Fatal(err)
			}
			waitRefused(t, a, int64(i+1))
			if !mine {
				return
			}
			ans, err := answers.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if e := ans.Header.Get(hdrError); !strings.Contains(e, "command refused") || !strings.Contains(e, tc.want) {
				t.Fatalf("answer %q (error %q), want a refusal saying %q", ans.Data, e, tc.want)
			}
		})
	}
	if got := handled.list(); len(got) != 1 || got[0] != real {
		t.Fatalf("the handler got %q, want only b's command", got)
	}
	// b still gets through, each of its commands once.
	if out, err := sendNode(ctx, b, "a", []byte("again")); err != nil || string(out) != "ran" {
		t.Fatalf("b's signed command after the forgeries: %q, %v", out, err)
	}
}

// sendNode is SendNode waited for.
func sendNode(ctx context.Context, n *Node, to string, payload []byte) ([]byte, error) {
	type answer struct {
		out []byte
		err error
	}
	ch := make(chan answer, 1)
	n.SendNode(ctx, to, payload, func(out []byte, err error) { ch <- answer{out, err} })
	a := <-ch
	return a.out, a.err
}

// An answer to SendNode that its node did not sign is dropped: an
// outsider answering in node c's name is never taken for c's answer.
func TestSendNodeDropsForgedAnswers(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	srv := startServer(t)
	b := join(t, srv.ClientURL(), "b")
	spy := outsider(t, srv.ClientURL())
	sub, err := spy.Subscribe(nodePrefix+"c", func(m *nats.Msg) {
		r := nats.NewMsg(m.Reply)
		r.Header.Set(hdrNode, "c")
		r.Data = []byte("forged answer")
		_ = m.RespondMsg(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	ch := make(chan error, 1)
	b.SendNode(ctx, "c", []byte("x"), func(out []byte, err error) {
		if err == nil {
			err = errors.New("answered " + string(out))
		}
		ch <- err
	})
	waitRefused(t, b, 1)
	cancel()
	if err := <-ch; !errors.Is(err, context.Canceled) {
		t.Fatalf("SendNode: %v, want it still waiting when cancelled", err)
	}
}

// A broadcast reaches the listeners only when a node signed it.
func TestBroadcastDropsForgeries(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	srv := startServer(t)
	a, b := join(t, srv.ClientURL(), "a"), join(t, srv.ClientURL(), "b")
	var got recorder
	stop, err := a.ListenBroadcast(func(p []byte) { got.add(p) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	spy := outsider(t, srv.ClientURL())
	if err := spy.Publish(broadcastSubject, []byte("forged notice")); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, a, 1)
	if err := b.Broadcast([]byte("real notice")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(got.list()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if l := got.list(); len(l) != 1 || l[0] != "real notice" {
		t.Fatalf("broadcasts heard: %q", l)
	}
}

// A node whose cluster key is not the cluster's cannot join: against the
// embedded server it is refused by NATS (its key is its credential); with
// other NATS credentials it gets in but finds another key recorded.
func TestJoinWithAnotherKey(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	srv := startServer(t)
	join(t, srv.ClientURL(), "a")
	other, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if _, err := Join(ctx, Config{Key: other, NodeID: "b", URL: srv.ClientURL()}); !errors.Is(err, nats.ErrAuthorization) || !strings.Contains(err.Error(), other.PublicKey()) {
		t.Fatalf("join with another key: %v", err)
	}
	// NATS credentials of their own (here the seed the server admits, in
	// a file), but the wrong cluster key.
	seed := filepath.Join(t.TempDir(), "nats.nk")
	if err := os.WriteFile(seed, testKey.Seed(), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Join(ctx, Config{Key: other, NodeID: "b", URL: srv.ClientURL(), NATS: Credentials{NkeyFile: seed}})
	if !errors.Is(err, errWrongKey) || !strings.Contains(err.Error(), testKey.PublicKey()) {
		t.Fatalf("join with NATS credentials but another cluster key: %v", err)
	}
	// With the cluster's key too, it joins.
	n, err := Join(ctx, Config{Key: testKey, NodeID: "b", URL: srv.ClientURL(), NATS: Credentials{NkeyFile: seed}, LeaseTTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
}

// FuzzVerify feeds the signature check what a client on the NATS could
// send: any header value and payload. It never panics, and accepts
// nothing it did not sign.
func FuzzVerify(f *testing.F) {
	s := newSigner(testKey, "a")
	good := &nats.Msg{Subject: "agentd.node.b", Data: []byte("payload")}
	s.sign(sigCommand, good)
	f.Add(good.Header.Get(hdrSig), []byte("payload"))
	f.Add("v1 1 n x", []byte("{}"))
	f.Add("v1  ", []byte(nil))
	f.Add("", []byte("x"))
	f.Fuzz(func(t *testing.T, sig string, data []byte) {
		m := &nats.Msg{Subject: "agentd.node.b", Data: data, Header: nats.Header{}}
		m.Header.Set(hdrSig, sig)
		m.Header.Set(hdrNode, "a")
		err := s.verify(sigCommand, m, newNonces())
		if err == nil && (sig != good.Header.Get(hdrSig) || string(data) != "payload") {
			t.Fatalf("accepted %q with %q", sig, data)
		}
		if err != nil && !errors.Is(err, errBadSignature) {
			t.Fatalf("error %v does not say it is the signature", err)
		}
	})
}
