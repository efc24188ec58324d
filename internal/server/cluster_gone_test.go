package server

import (
	"context"
	"testing"

	"github.com/agentd-dev/agentd/internal/pipeline"
)

// A stream-opening command is answered after its client went away (the
// client hung up while the owner answered: SubmitWatch returns at once,
// and the face closes the client). The answer's subscription must not
// outlive the client: the client's detach has run, and nothing else
// would remove it. Left, each such request pinned a closed client (and
// its response writer) in the session's subscribers, and kept this
// node's follow of the session's stream running for ever: a client that
// opens streams and hangs up at once grew a node without bound, past the
// connection limit, which counts live clients only.
func TestSubscribeAfterTheClientLeft(t *testing.T) {
	nodes := startCluster(t, "a", "b")
	a, b := nodes["a"], nodes["b"]
	sid := sessionOn("b", "a", "b")
	if r := submit(t, b, pipeline.Command{Type: "t.create", ID: "c1", SessionID: sid}); r.Err != nil {
		t.Fatal(r.Err)
	}
	h, err := b.srv.Session(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	gone := func(t *testing.T, s *Server) *Client {
		c, err := s.Attach(newListLink(), ClientOptions{Face: "t"})
		if err != nil {
			t.Fatal(err)
		}
		c.Close(Close{Kind: CloseNormal})
		<-c.Done()
		return c
	}
	for _, tc := range []struct {
		name      string
		subscribe func(t *testing.T)
		check     func(t *testing.T)
	}{
		{"on another node, from the stream", func(t *testing.T) {
			after := uint64(0)
			a.srv.cl.subscribeRemote(gone(t, a.srv), sid, testCodec, &after, NewHold())
		}, func(t *testing.T) {
			if st := a.srv.ClusterStatus(); st.Followed != 0 {
				t.Errorf("node a follows %d sessions for clients that left, want 0", st.Followed)
			}
		}},
		{"on the owner", func(t *testing.T) {
			b.srv.Subscribe(gone(t, b.srv), h, testCodec, nil, nil)
		}, func(t *testing.T) {
			if n := h.Subscribers(); n != 0 {
				t.Errorf("the session has %d subscribers, all of them gone, want 0", n)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.subscribe(t)
			tc.check(t)
		})
	}
}
