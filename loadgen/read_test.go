package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/coder/websocket"
)

// BenchmarkClientRead reads small messages (a lifecycle frame's size)
// from the baseline server over loopback, as the bench's clients read
// them: with the library's Read and a cancellable context (a
// context.AfterFunc and a new buffer per message), or with readMessage.
func BenchmarkClientRead(b *testing.B) {
	var h baselineHandlers
	ts := httptest.NewServer(http.HandlerFunc(h.serve))
	defer func() {
		ts.Close()
		h.wait()
	}()
	for _, mode := range []string{"Read(ctx)", "readMessage"} {
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
				if mode == "readMessage" {
					err = readMessage(c, &buf)
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
