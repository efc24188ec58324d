package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/cluster"
	"github.com/agentd-dev/agentd/internal/cluster/embeddednats"
	"github.com/agentd-dev/agentd/internal/llm/faux"
	"github.com/agentd-dev/agentd/internal/pipeline"
	"github.com/agentd-dev/agentd/internal/session"
	"github.com/agentd-dev/agentd/internal/sessionspec"
)

// These tests run cluster nodes in one process over an embedded NATS
// server on 127.0.0.1; the end-to-end tests (cmd/agentd) run them as
// processes with pi-server clients.

// mirrorBuilder is fauxBuilder with the cluster's transcript mirror.
type mirrorBuilder struct{ p *faux.Provider }

func (b mirrorBuilder) Session(spec sessionspec.Spec) (*session.Session, error) {
	return session.New(session.Config{
		Cwd: spec.Cwd, SessionsDir: spec.SessionsDir, Open: spec.Open, Model: faux.Model(), Stream: b.p.Stream,
		FirstSeq: spec.FirstSeq, ReserveSeq: spec.ReserveSeq, EventLogSize: 256, TranscriptOptions: spec.TranscriptOptions,
	})
}

// clusterCodec encodes an event as its seq and type.
type clusterCodec struct{}

func (*clusterCodec) Encode(_ string, ev session.Event) Frame {
	return Frame{Data: []byte(strconv.FormatUint(ev.Seq, 10) + " " + string(ev.Type))}
}

// listLink records what a client was sent.
type listLink struct {
	mu     sync.Mutex
	frames []string
	more   chan struct{}
}

func newListLink() *listLink { return &listLink{more: make(chan struct{}, 1)} }

func (l *listLink) Write(_ context.Context, frames [][]byte) error {
	l.mu.Lock()
	for _, f := range frames {
		l.frames = append(l.frames, string(f))
	}
	l.mu.Unlock()
	select {
	case l.more <- struct{}{}:
	default:
	}
	return nil
}

func (l *listLink) Close(Close) {}

func (l *listLink) seqs() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []uint64
	for _, f := range l.frames {
		var n uint64
		if _, err := fmt.Sscan(f, &n); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// testNode is one node: its cluster membership and its server.
type testNode struct {
	id   string
	node *cluster.Node
	srv  *Server
}

// origin is a command's Origin in these tests: the principal and, for a
// subscription made on another node, the client to subscribe.
type testOrigin struct {
	c     *Client
	codec Codec
	hold  *Hold
}

func (o *testOrigin) Principal() Principal { return Principal{} }
func (o *testOrigin) SubscribeTarget() (*Client, Codec, *Hold) {
	return o.c, o.codec, o.hold
}

var testCodec = &clusterCodec{}

// startCluster starts an embedded NATS server and a server per node id.
// Each node has the commands t.create (creates the session, subscribing
// its client), t.where (answers the node it ran on) and t.prompt.
func startCluster(t testing.TB, ids ...string) map[string]*testNode {
	return startClusterSpread(t, true, ids...)
}

func startClusterSpread(t testing.TB, spread bool, ids ...string) map[string]*testNode {
	t.Helper()
	return startClusterBuilt(t, spread, func() Builder { return mirrorBuilder{faux.New(faux.Options{})} }, ids...)
}

// startClusterBuilt is startClusterSpread with each node's sessions made
// by a builder of its own.
func startClusterBuilt(t testing.TB, spread bool, builder func() Builder, ids ...string) map[string]*testNode {
	t.Helper()
	root := t.TempDir()
	key, err := cluster.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := embeddednats.Start(embeddednats.Config{StoreDir: filepath.Join(root, "nats"), Nkey: key.PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	out := map[string]*testNode{}
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		node, err := cluster.Join(ctx, cluster.Config{Key: key, NodeID: id, URL: ns.ClientURL(), LeaseTTL: time.Second, RequestTimeout: 5 * time.Second})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(root, id)
		cwd := filepath.Join(dir, "cwd")
		if err := os.MkdirAll(cwd, 0o755); err != nil {
			t.Fatal(err)
		}
		s, err := New(Config{Builder: builder(), Cwd: cwd, SessionsDir: filepath.Join(dir, "sessions"),
			StateDir: filepath.Join(dir, "state"), Journal: node.Journal(), Cluster: node, SpreadSessions: spread})
		if err != nil {
			t.Fatal(err)
		}
		tn := &testNode{id: id, node: node, srv: s}
		if err := s.Register(testCommands(tn)); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = s.Close()
			_ = node.Close()
		})
		out[id] = tn
	}
	// Every node sees every other before placing anything.
	for _, n := range out {
		deadline := time.Now().Add(10 * time.Second)
		for {
			m, err := n.node.Members(context.Background())
			if err == nil && len(m) == len(ids) {
				n.srv.cl.forgetMembers()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s sees members %v", n.id, m)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return out
}

func testCommands(tn *testNode) pipeline.Registry {
	who := func(cmd pipeline.Command) Principal { return principalOf(cmd.Origin) }
	return pipeline.Registry{
		"t.create": {Class: pipeline.ClassMutate, Lane: pipeline.LaneSession, Run: func(ctx context.Context, cmd pipeline.Command) (json.RawMessage, error) {
			h, err := tn.srv.Create(ctx, CreateRequest{ID: cmd.SessionID, Who: who(cmd)})
			if err != nil {
				return nil, err
			}
			switch o := cmd.Origin.(type) {
			case *Remote:
				o.Subscribe(h, nil)
			case *testOrigin:
				tn.srv.Subscribe(o.c, h, o.codec, nil, o.hold)
			}
			return json.RawMessage(strconv.Quote(tn.id)), nil
		}},
		"t.where": {Class: pipeline.ClassRead, Lane: pipeline.LaneSession, ReadOnly: true, Run: func(ctx context.Context, cmd pipeline.Command) (json.RawMessage, error) {
			if _, err := tn.srv.SessionFor(ctx, cmd.SessionID, who(cmd)); err != nil {
				return nil, err
			}
			return json.RawMessage(strconv.Quote(tn.id)), nil
		}},
		"t.prompt": {Class: pipeline.ClassLong, Lane: pipeline.LaneSession, Run: func(ctx context.Context, cmd pipeline.Command) (json.RawMessage, error) {
			h, err := tn.srv.SessionFor(ctx, cmd.SessionID, who(cmd))
			if err != nil {
				return nil, err
			}
			if err := h.Session().Prompt(session.UserMessage("hello", nil), session.BehaviorNone); err != nil {
				return nil, err
			}
			return nil, h.Session().Wait(ctx)
		}},
	}
}

// submit runs a command on node n and returns its response.
func submit(t testing.TB, n *testNode, cmd pipeline.Command) pipeline.Response {
	t.Helper()
	done := make(chan pipeline.Response, 1)
	n.srv.Submit(cmd, func(r pipeline.Response) { done <- r })
	select {
	case r := <-done:
		return r
	case <-time.After(20 * time.Second):
		t.Fatalf("%s on node %s: no answer", cmd.Type, n.id)
		return pipeline.Response{}
	}
}

func sessionOn(want string, nodes ...string) string {
	for i := 0; ; i++ {
		if id := "s" + strconv.Itoa(i); PlaceSession(id, nodes) == want {
			return id
		}
	}
}

// A command submitted on a node that does not run the session runs on
// the one that does; a client of the first node subscribed by that
// command gets the session's events from the stream, with their seqs.
func TestClusterRoutesAndFollows(t *testing.T) {
	nodes := startCluster(t, "a", "b")
	a, b := nodes["a"], nodes["b"]
	sid := sessionOn("b", "a", "b")

	link := newListLink()
	c, err := a.srv.Attach(link, ClientOptions{Face: "t"})
	if err != nil {
		t.Fatal(err)
	}
	o := &testOrigin{c: c, codec: testCodec, hold: NewHold()}
	r := submit(t, a, pipeline.Command{Type: "t.create", ID: "c1", SessionID: sid, Origin: o})
	o.hold.Release()
	if r.Err != nil || string(r.Data) != `"b"` {
		t.Fatalf("create from a: %+v (data %s), want it placed on b", r.Err, r.Data)
	}
	if got := a.srv.SessionCount(); got != 0 {
		t.Errorf("node a hosts %d sessions, want 0", got)
	}
	for _, n := range []*testNode{a, b} {
		r := submit(t, n, pipeline.Command{Type: "t.where", SessionID: sid})
		if r.Err != nil || string(r.Data) != `"b"` {
			t.Errorf("t.where from %s: %+v %s, want b", n.id, r.Err, r.Data)
		}
	}
	if r := submit(t, a, pipeline.Command{Type: "t.prompt", SessionID: sid}); r.Err != nil {
		t.Fatal(r.Err)
	}
	h, err := b.srv.Session(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	want := h.Session().Seq()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := link.seqs()
		if len(got) > 0 && got[len(got)-1] == want {
			for i := 1; i < len(got); i++ {
				if got[i] <= got[i-1] {
					t.Fatalf("seqs %v go back or repeat", got)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's client got seqs %v, want them up to %d", got, want)
		}
		select {
		case <-link.more:
		case <-time.After(time.Until(deadline)):
		}
	}
	// A second subscriber of node a, resuming from a cursor, shares the
	// follow and gets exactly what follows the cursor.
	link2 := newListLink()
	c2, err := a.srv.Attach(link2, ClientOptions{Face: "t"})
	if err != nil {
		t.Fatal(err)
	}
	cursor := want / 2
	a.srv.cl.subscribeRemote(c2, sid, testCodec, &cursor, nil)
	if st := a.srv.ClusterStatus(); st.Followed != 1 {
		t.Errorf("node a follows %d sessions, want 1 shared by its two clients", st.Followed)
	}
	deadline = time.Now().Add(10 * time.Second)
	for len(link2.seqs()) < int(want-cursor) {
		if time.Now().After(deadline) {
			t.Fatalf("resumed client got %v", link2.seqs())
		}
		select {
		case <-link2.more:
		case <-time.After(time.Until(deadline)):
		}
	}
	if got := link2.seqs(); got[0] != cursor+1 || got[len(got)-1] != want {
		t.Errorf("resumed after %d: %v", cursor, got)
	}
}

// Without SpreadSessions a new session lives on the node it was created
// through, and a command for it from another node still reaches it.
func TestClusterCreatesWhereAsked(t *testing.T) {
	nodes := startClusterSpread(t, false, "a", "b")
	sid := sessionOn("b", "a", "b") // its home is b, but it is created through a
	if r := submit(t, nodes["a"], pipeline.Command{Type: "t.create", SessionID: sid}); r.Err != nil || string(r.Data) != `"a"` {
		t.Fatalf("create through a: %+v %s, want it on a", r.Err, r.Data)
	}
	if r := submit(t, nodes["b"], pipeline.Command{Type: "t.where", SessionID: sid}); r.Err != nil || string(r.Data) != `"a"` {
		t.Fatalf("t.where through b: %+v %s, want a", r.Err, r.Data)
	}
	if r := submit(t, nodes["b"], pipeline.Command{Type: "t.create", SessionID: sid}); r.Err == nil {
		t.Fatalf("a second create of %s through b succeeded", sid)
	}
	// Every node lists it: a as hosted, b as known.
	var listed []string
	for _, k := range nodes["b"].srv.KnownSessions() {
		listed = append(listed, k.ID)
	}
	if len(listed) != 1 || listed[0] != sid {
		t.Errorf("node b knows %v, want [%s]", listed, sid)
	}
	if k := nodes["a"].srv.KnownSessions(); len(k) != 0 {
		t.Errorf("node a, which hosts %s, lists it as known too: %+v", sid, k)
	}
}

// BenchmarkClusterCommand measures a read command answered by the node
// that runs the session (local) and one submitted on another node
// (forwarded): the difference is what routing adds.
func BenchmarkClusterCommand(b *testing.B) {
	nodes := startCluster(b, "a", "b")
	sid := sessionOn("b", "a", "b")
	if r := submit(b, nodes["b"], pipeline.Command{Type: "t.create", SessionID: sid}); r.Err != nil {
		b.Fatal(r.Err)
	}
	for _, bc := range []struct{ name, node string }{{"local", "b"}, {"forwarded", "a"}} {
		b.Run(bc.name, func(b *testing.B) {
			n := nodes[bc.node]
			for b.Loop() {
				if r := submit(b, n, pipeline.Command{Type: "t.where", SessionID: sid}); r.Err != nil {
					b.Fatal(r.Err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/command")
		})
	}
}

// BenchmarkClusterCommandsParallel is BenchmarkClusterCommand with 64
// sessions commanded at once: commands per second through the owner
// (local) and through the other node (forwarded).
func BenchmarkClusterCommandsParallel(b *testing.B) {
	nodes := startCluster(b, "a", "b")
	var ids []string
	for i := 0; len(ids) < 64; i++ {
		id := "p" + strconv.Itoa(i)
		if PlaceSession(id, []string{"a", "b"}) != "b" {
			continue
		}
		if r := submit(b, nodes["b"], pipeline.Command{Type: "t.create", SessionID: id}); r.Err != nil {
			b.Fatal(r.Err)
		}
		ids = append(ids, id)
	}
	for _, bc := range []struct{ name, node string }{{"local", "b"}, {"forwarded", "a"}} {
		b.Run(bc.name, func(b *testing.B) {
			n := nodes[bc.node]
			var next atomic.Int64
			b.SetParallelism(32) // 64 goroutines on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := ids[int(next.Add(1))%len(ids)]
					if r := submit(b, n, pipeline.Command{Type: "t.where", SessionID: id}); r.Err != nil {
						b.Error(r.Err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commands/s")
		})
	}
}

// Sessions spread evenly over the nodes, also ids that differ only in
// their last digits, and a node leaving moves only its own sessions.
func TestPlaceSessionSpreads(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	for _, format := range []string{"bench-%06d", "%06d-bench", "session-%d"} {
		count := map[string]int{}
		moved := 0
		for i := range 3000 {
			id := fmt.Sprintf(format, i)
			home := PlaceSession(id, nodes)
			count[home]++
			if after := PlaceSession(id, []string{"n1", "n3"}); home != "n2" && after != home {
				moved++
			}
		}
		for _, n := range nodes {
			if c := count[n]; c < 850 || c > 1150 {
				t.Errorf("%s: node %s is home to %d of 3,000 sessions, want about 1,000 (%v)", format, n, c, count)
			}
		}
		if moved != 0 {
			t.Errorf("%s: %d sessions of the remaining nodes moved when n2 left", format, moved)
		}
	}
}
