package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/coder/websocket"

	"github.com/agentd-dev/agentd/internal/jsonfield"
	"github.com/agentd-dev/agentd/internal/piclient"
)

// BenchmarkClientRead reads small messages (a lifecycle frame's size)
// from the baseline server over loopback, as the bench's clients read
// them: with the library's Read and a cancellable context (a
// context.AfterFunc and a new buffer per message), or with piclient.ReadMessage.
func BenchmarkClientRead(b *testing.B) {
	var h baselineHandlers
	ts := httptest.NewServer(http.HandlerFunc(h.serve))
	defer func() {
		ts.Close()
		h.wait()
	}()
	for _, mode := range []string{"Read(ctx)", "ReadMessage"} {
		b.Run(mode, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c, _, err := websocket.Dial(ctx, "ws"+ts.URL[len("http"):], nil)
			if err != nil {
				b.Fatal(err)
			}
			defer c.CloseNow()
			if err := c.Write(ctx, websocket.MessageText, fmt.Appendf(nil, "%d %d", b.N, 150)); err != nil {
				b.Fatal(err)
			}
			var buf bytes.Buffer
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if mode == "ReadMessage" {
					err = piclient.ReadMessage(c, &buf)
				} else {
					_, _, err = c.Read(ctx)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/msg")
		})
	}
}

// frameType reads agentd's frames without parsing them, and any other
// frame by parsing it.
func TestFrameType(t *testing.T) {
	tests := []struct{ frame, want string }{
		{`{"type":"command_accepted","data":{"commandId":"c1"}}`, "command_accepted"},
		{`{"id":"c1","type":"response","command":"get_state"}`, "response"},
		{`{ "type" : "event" }`, "event"},
		{`{"type":"a\"b","x":1}`, `a"b`},
		{`{"type":""}`, ""},
		{`{"data":{}}`, ""},
		{`not json`, ""},
	}
	for _, tt := range tests {
		if got := string(frameType([]byte(tt.frame))); got != tt.want {
			t.Errorf("frameType(%s) = %q, want %q", tt.frame, got, tt.want)
		}
	}
}

// BenchmarkFrameType is what a client pays to tell a lifecycle frame's
// type: a parse, as the clients did, or frameType.
func BenchmarkFrameType(b *testing.B) {
	frame := []byte(`{"type":"command_finished","data":{"commandId":"bench-000123.g0.0","commandType":"get_state","sessionId":"bench-000123","dependsOn":[],"success":true}}`)
	var p jsonfield.Parser
	for _, mode := range []string{"parse", "frameType"} {
		b.Run(mode, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				if mode == "parse" {
					v, _ := p.Parse(frame)
					n += len(jsonfield.String(v.Get("type")))
				} else {
					n += len(frameType(frame))
				}
			}
			if n == 0 {
				b.Fatal("no type")
			}
		})
	}
}
