package piclient

import (
	"testing"
	"time"

	"github.com/agentd-dev/agentd/internal/jsonfield"
)

// TestResponseOutlivesTheBuffer checks a response handed to its command
// holds its own copies: the reader reads the next frame into the same
// buffer and parses it with the same parser right after.
func TestResponseOutlivesTheBuffer(t *testing.T) {
	c := &Conn{pending: map[string]chan Reply{}, abandoned: map[string]struct{}{}}
	ch := make(chan Reply, 1)
	c.pending["c1"] = ch
	buf := []byte(`{"id":"c1","type":"response","success":false,"error":"first error","data":{"sessionId":"s-one"}}`)
	typ, v := c.frameType(buf)
	if string(typ) != "response" {
		t.Fatalf("type %q", typ)
	}
	c.deliver(time.Now(), buf, v)
	r := <-ch
	next := []byte(`{"id":"c2","type":"response","success":true,"error":"XXXXXXXXXXXX","data":{"sessionId":"s-two"}}`)
	if len(next) != len(buf) {
		t.Fatalf("frames of %d and %d bytes", len(buf), len(next))
	}
	copy(buf, next)
	if _, v := c.frameType(buf); v == nil {
		t.Fatal("next frame not parsed")
	}
	if r.Error != "first error" || r.Success || jsonfield.String(r.Get("sessionId")) != "s-one" {
		t.Errorf("reply after the next frame: err %q, success %t, sessionId %q", r.Error, r.Success, jsonfield.String(r.Get("sessionId")))
	}
}

// BenchmarkDeliver is what the reader pays to hand a response to its
// command.
func BenchmarkDeliver(b *testing.B) {
	response := []byte(`{"id":"bench-000001.g0.0","type":"response","command":"get_state","success":true,"data":{"sessionId":"bench-000001","isStreaming":false,"messageCount":4,"pendingMessageCount":0,"thinkingLevel":"off","autoCompactionEnabled":true}}`)
	c := &Conn{pending: map[string]chan Reply{}, abandoned: map[string]struct{}{}}
	ch := make(chan Reply, 1)
	b.ReportAllocs()
	for b.Loop() {
		c.pending["bench-000001.g0.0"] = ch
		c.handle(time.Time{}, response, []byte("response"), nil)
		<-ch
	}
}
