package loadgen

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestCreateSessionRetries checks createSession sends create_session
// again while the server answers that it should try again (a cluster's
// nodes disagreeing on placement just after they start), and returns at
// once any other refusal, or the last answer when its time is up.
func TestCreateSessionRetries(t *testing.T) {
	const again = "Session s is moving between nodes; try again"
	tests := []struct {
		name    string
		answers []string // the error of each create in turn, "" for success; the last repeats
		timeout time.Duration
		creates int    // how many creates the server gets; 0: at least two
		want    string // in the error; "" for none
	}{
		{"success after try again", []string{again, again, ""}, 10 * time.Second, 3, ""},
		{"refused", []string{"Session s already exists"}, 10 * time.Second, 1, "create_session s failed: Session s already exists"},
		{"try again until the timeout", []string{again}, 300 * time.Millisecond, 0, "create_session s failed: " + again},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var handlers sync.WaitGroup
			var mu sync.Mutex
			creates := 0
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
			}))
			defer func() {
				ts.Close()
				handlers.Wait()
			}()
			hc := &http.Client{Transport: &http.Transport{}}
			defer hc.CloseIdleConnections()
			var faults tally
			c, err := dial(context.Background(), hc, "ws"+strings.TrimPrefix(ts.URL, "http"), "", &clientOptions{timeout: 10 * time.Second, faults: &faults})
			if err != nil {
				t.Fatal(err)
			}
			err = createSession(context.Background(), c, "s", tt.timeout)
			c.close()
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
	}
}
