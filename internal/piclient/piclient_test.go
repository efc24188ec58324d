package piclient

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentd-dev/agentd/internal/jsonfield"
)

// fakeServer is a pi-server WebSocket that sends first, then answers each
// command with what answer makes of it (nothing when it returns nil);
// "end" closes the connection with 1008.
func fakeServer(t *testing.T, first string, answer func(id, typ string) []string) string {
	t.Helper()
	var wg sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer wrong" {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		wg.Add(1)
		defer wg.Done()
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		ctx := r.Context()
		if conn.Write(ctx, websocket.MessageText, []byte(first)) != nil {
			return
		}
		for {
			_, data, err := conn.Read(ctx)
			if err != nil {
				return
			}
			var cmd struct{ ID, Type string }
			if err := json.Unmarshal(data, &cmd); err != nil {
				t.Errorf("server got %s", data)
				return
			}
			for _, f := range answer(cmd.ID, cmd.Type) {
				if f == "end" {
					_ = conn.Close(websocket.StatusPolicyViolation, "Client too slow")
					return
				}
				if conn.Write(ctx, websocket.MessageText, []byte(f)) != nil {
					return
				}
			}
		}
	}))
	t.Cleanup(func() {
		srv.Close()
		wg.Wait()
	})
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// piAnswers answers as pi-server does: a lifecycle frame, an event and
// the response; "fail" fails, "later" is answered with the next command
// (before its response),
// "end" ends the connection.
func piAnswers() func(id, typ string) []string {
	var held string
	return func(id, typ string) []string {
		resp := func(id, typ string) string {
			if typ == "fail" {
				return `{"type":"response","id":"` + id + `","command":"fail","success":false,"error":"no such thing"}`
			}
			return `{"type":"response","id":"` + id + `","command":"` + typ + `","success":true,"data":{"sessionId":"s-` + id + `","n":3}}`
		}
		switch typ {
		case "later":
			held = resp(id, typ)
			return nil
		case "end":
			return []string{"end"}
		}
		out := []string{`{"type":"command_started","data":{"commandId":"` + id + `"}}`, `{"type":"event","sessionId":"s","seq":1,"event":{"type":"agent_start"}}`}
		if held != "" {
			// Before the response: the caller looks at Late once it has it.
			out, held = append(out, held), ""
		}
		return append(out, resp(id, typ))
	}
}

func TestConn(t *testing.T) {
	url := fakeServer(t, `{"type":"server_ready"}`, piAnswers())
	var mu sync.Mutex
	var frames []string
	ended := make(chan error, 1)
	c, err := Dial(context.Background(), url, Options{
		Frame: func(f Frame) {
			mu.Lock()
			defer mu.Unlock()
			s := string(f.Type)
			if f.Delivered {
				s += " delivered"
			}
			frames = append(frames, s)
		},
		Ended: func(err error) { ended <- err },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close("")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// A command answered with data.
	r, lat, err := c.Call(ctx, "c1", map[string]any{"type": "get_state"})
	if err != nil || !r.Success || lat <= 0 {
		t.Fatalf("get_state: %+v, %s, %v", r, lat, err)
	}
	var data struct {
		SessionID string `json:"sessionId"`
		N         int    `json:"n"`
	}
	if err := r.Decode(&data); err != nil || data.SessionID != "s-c1" || data.N != 3 {
		t.Errorf("Decode: %+v, %v", data, err)
	}
	if got := jsonfield.String(r.Get("sessionId")); got != "s-c1" {
		t.Errorf("Get(sessionId) = %q", got)
	}
	// A refusal.
	r, _, err = c.Call(ctx, "c2", map[string]any{"type": "fail"})
	if err != nil || r.Success || r.Error != "no such thing" || r.Frame != nil {
		t.Errorf("fail: %+v, %v", r, err)
	}
	// An id already waiting is refused without sending.
	ch, err := c.Send(ctx, "c3", map[string]any{"type": "later"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(ctx, "c3", map[string]any{"type": "later"}); err == nil {
		t.Error("a second command with id c3 was sent")
	}
	// A command that gives up: its response comes later and counts as
	// late, not as a frame for no command.
	c.Forget("c3", true)
	if _, _, err := c.Call(ctx, "c4", map[string]any{"type": "get_state"}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-ch:
		t.Errorf("the forgotten command got %+v", r)
	default:
	}
	if c.Late() != 1 {
		t.Errorf("Late() = %d, want 1", c.Late())
	}
	// The server ends the connection while a command waits: it fails as
	// lost, with the server's close, and so does the next one.
	_, _, err = c.Call(ctx, "c5", map[string]any{"type": "end"})
	var ce *CallError
	if !errors.As(err, &ce) || ce.Kind != ErrLost || websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Errorf("call when the server ends it: %v", err)
	}
	if err := <-ended; websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Errorf("Ended(%v)", err)
	}
	if _, _, err := c.Call(ctx, "c6", map[string]any{"type": "get_state"}); !errors.As(err, &ce) || ce.Kind != ErrLost {
		t.Errorf("call after the end: %v", err)
	}
	<-c.Done()
	mu.Lock()
	defer mu.Unlock()
	want := []string{"server_ready",
		"command_started", "event", "response delivered",
		"command_started", "event", "response delivered",
		"command_started", "event", "response delivered", "response delivered"}
	if strings.Join(frames, ",") != strings.Join(want, ",") {
		t.Errorf("frames:\n%q\nwant\n%q", frames, want)
	}
}

func TestDialFailures(t *testing.T) {
	ready := fakeServer(t, `{"type":"server_ready"}`, piAnswers())
	other := fakeServer(t, `{"type":"hello"}`, piAnswers())
	tests := []struct {
		name     string
		url      string
		o        Options
		status   int
		notReady bool
	}{
		{"refused token", ready, Options{Header: http.Header{"Authorization": {"Bearer wrong"}}}, http.StatusUnauthorized, false},
		{"not a pi-server", other, Options{}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Dial(context.Background(), tt.url, tt.o)
			if err == nil {
				c.Close("")
				t.Fatal("connected")
			}
			var de *DialError
			if tt.status != 0 && (!errors.As(err, &de) || de.Status != tt.status) {
				t.Errorf("err %v, want HTTP %d", err, tt.status)
			}
			if tt.notReady != errors.Is(err, ErrNotReady) {
				t.Errorf("err %v", err)
			}
		})
	}
	// With NotReady the connection goes on, the first frame handed on.
	var first []byte
	var got []string
	c, err := Dial(context.Background(), other, Options{NotReady: func(typ []byte) { first = append(first, typ...) },
		Frame: func(f Frame) { got = append(got, string(f.Type)) }})
	if err != nil {
		t.Fatal(err)
	}
	c.Close("")
	if string(first) != "hello" || len(got) != 1 || got[0] != "hello" {
		t.Errorf("NotReady(%q), frames %q", first, got)
	}
}

// The end of Until closes the connection.
func TestUntil(t *testing.T) {
	url := fakeServer(t, `{"type":"server_ready"}`, piAnswers())
	ctx, cancel := context.WithCancel(context.Background())
	c, err := Dial(context.Background(), url, Options{Until: ctx})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-c.Done()
	if !errors.Is(c.Err(), context.Canceled) && c.Err() == nil {
		t.Errorf("Err() = %v", c.Err())
	}
	c.Close("")
}
