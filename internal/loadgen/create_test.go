package loadgen

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coder/websocket"
)

// TestCreateSessionRetries checks createSession sends create_session
// again while the server answers that it should try again (a cluster's
// nodes disagreeing on placement just after they start), and returns at
// once any other refusal, or the last answer when its time is up.
//
// It runs in a synctest bubble, the client and the server joined by
// in-memory pipes, so that "its time is up" is the bubble's clock: on a
// loaded machine the window ended in the middle of a create's write and
// the test saw that write's error instead of the server's answer.
func TestCreateSessionRetries(t *testing.T) {
	const again = "Session s is moving between nodes; try again"
	tests := []struct {
		name    string
		answers []string // the error of each create in turn, "" for success; the last repeats
		timeout time.Duration
		creates int    // how many creates the server gets; 0: at least two
		want    string // in the error; "" for none
		// took is how long createSession takes in the bubble's time,
		// where the server answers at once: its pauses between creates.
		took time.Duration
	}{
		{"success after try again", []string{again, again, ""}, 10 * time.Second, 3, "", 100 * time.Millisecond},
		{"refused", []string{"Session s already exists"}, 10 * time.Second, 1, "create_session s failed: Session s already exists", 0},
		{"try again until the timeout", []string{again}, 300 * time.Millisecond, 0, "create_session s failed: " + again, 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var handlers sync.WaitGroup
				var mu sync.Mutex
				creates := 0
				l := newPipeListener()
				srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					handlers.Add(1)
					defer handlers.Done()
					conn, err := websocket.Accept(w, r, nil)
					if err != nil {
						return
					}
					defer conn.CloseNow()
					ctx := r.Context()
					if conn.Write(ctx, websocket.MessageText, []byte(`{"type":"server_ready"}`)) != nil {
						return
					}
					for {
						_, data, err := conn.Read(ctx)
						if err != nil {
							return
						}
						var cmd struct{ ID, Type, SessionID string }
						if err := json.Unmarshal(data, &cmd); err != nil || cmd.Type != "create_session" {
							t.Errorf("server got %s", data)
							return
						}
						mu.Lock()
						answer := tt.answers[min(creates, len(tt.answers)-1)]
						creates++
						mu.Unlock()
						resp := map[string]any{"id": cmd.ID, "type": "response", "command": "create_session", "success": answer == ""}
						if answer == "" {
							resp["data"] = map[string]any{"sessionId": cmd.SessionID}
						} else {
							resp["error"] = answer
						}
						b, _ := json.Marshal(resp)
						if conn.Write(ctx, websocket.MessageText, b) != nil {
							return
						}
					}
				})}
				served := make(chan struct{})
				go func() {
					defer close(served)
					_ = srv.Serve(l)
				}()
				defer func() {
					_ = srv.Close()
					<-served
					handlers.Wait()
				}()
				hc := &http.Client{Transport: &http.Transport{DialContext: l.dial}}
				defer hc.CloseIdleConnections()
				var faults tally
				c, err := dial(context.Background(), hc, "ws://loadgen.test/", "", &clientOptions{timeout: 10 * time.Second, faults: &faults})
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				err = createSession(context.Background(), c, "s", tt.timeout)
				took := time.Since(start)
				c.close()
				if took != tt.took {
					t.Errorf("createSession took %s, want %s", took, tt.took)
				}
				switch {
				case tt.want == "" && err != nil:
					t.Errorf("createSession: %v", err)
				case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
					t.Errorf("createSession: %v, want %q", err, tt.want)
				}
				mu.Lock()
				defer mu.Unlock()
				if (tt.creates != 0 && creates != tt.creates) || (tt.creates == 0 && creates < 2) {
					t.Errorf("the server got %d creates, want %d (0: at least two)", creates, tt.creates)
				}
			})
		})
	}
}

// pipeListener is a net.Listener whose connections are in-memory pipes
// made by its dial, for a server and its clients in a synctest bubble
// (a goroutine waiting on a real socket is not durably blocked, so the
// bubble's clock would never move).
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial is an http.Transport's DialContext: a pipe whose other end the
// server accepts.
func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		client.Close()
		server.Close()
		return nil, net.ErrClosed
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
