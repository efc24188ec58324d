package piserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coder/websocket"
)

// checkDeltas is what a client that builds the answer from the deltas
// (pi's example client, pi's RPC doc) makes of a session's events: per
// message, the deltas of each text block joined must be the block's text
// in message_end; in the full format, each message_update's partial
// message must hold exactly the deltas so far. It returns the number of
// message_update frames.
func checkDeltas(t *testing.T, ws []wire, full bool) int {
	t.Helper()
	updates, ends := 0, 0
	joined := map[float64]string{} // content index → deltas so far
	for _, w := range ws {
		ev, _ := w.m["event"].(map[string]any)
		switch w.eventType() {
		case "message_start":
			joined = map[float64]string{}
		case "message_update":
			updates++
			ame, _ := ev["assistantMessageEvent"].(map[string]any)
			if ame["type"] != "text_delta" {
				continue
			}
			i, _ := ame["contentIndex"].(float64)
			d, _ := ame["delta"].(string)
			joined[i] += d
			if !full {
				continue
			}
			for _, key := range []string{"message"} {
				m, _ := ev[key].(map[string]any)
				if got := blockText(m, int(i)); got != joined[i] {
					t.Fatalf("seq %d: the %s's text is %d characters, the deltas so far %d", w.seq(), key, len(got), len(joined[i]))
				}
			}
			p, _ := ame["partial"].(map[string]any)
			if got := blockText(p, int(i)); got != joined[i] {
				t.Fatalf("seq %d: the partial's text is %d characters, the deltas so far %d", w.seq(), len(got), len(joined[i]))
			}
		case "message_end":
			m, _ := ev["message"].(map[string]any)
			if m["role"] != "assistant" {
				continue
			}
			ends++
			content, _ := m["content"].([]any)
			for i := range content {
				if want := blockText(m, i); joined[float64(i)] != want {
					t.Errorf("message_end block %d: %d characters; the deltas add up to %d", i, len(want), len(joined[float64(i)]))
				}
			}
		}
	}
	if ends == 0 {
		t.Fatalf("no assistant message_end:\n%s", dump(ws))
	}
	return updates
}

func blockText(m map[string]any, i int) string {
	content, _ := m["content"].([]any)
	if i >= len(content) {
		return ""
	}
	b, _ := content[i].(map[string]any)
	s, _ := b["text"].(string)
	return s
}

// A client that does not read while a 1,000-word answer streams, then
// reads everything, gets fewer message_update frames than one that keeps
// up, and their deltas joined are the whole answer: a joined frame's delta
// is every delta it replaces, its partial message the newest. In pi's
// full format and in the delta format.
func TestLaggingClientGetsEveryDelta(t *testing.T) {
	for _, full := range []bool{true, false} {
		name := map[bool]string{true: "full", false: "delta"}[full]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fx := newFixture(t, fixtureConfig{chunkDelay: time.Millisecond})
				fx.srv.codec.delta = !full
				fast := &fakeLink{}
				a := fx.connect(t, fast)
				a.handle([]byte(`{"type":"create_session","id":"c1","sessionId":"s1"}`))
				synctest.Wait()
				lag := &fakeLink{gate: make(chan struct{})}
				b := fx.connect(t, lag)
				b.handle([]byte(`{"type":"switch_session","id":"sw","sessionId":"s1"}`))
				synctest.Wait()
				a.handle([]byte(`{"type":"prompt","id":"p1","sessionId":"s1","message":"` + words(1000) + `"}`))
				time.Sleep(time.Minute) // (the bubble's clock) the faux model streams a word a millisecond
				synctest.Wait()         // the run is over: every goroutine waits, the lagging writer on its gate
				if index(fast.wires(t), func(w wire) bool { return w.eventType() == "agent_end" }) < 0 {
					t.Fatal("the run did not end")
				}
				close(lag.gate)
				synctest.Wait()

				nFast := checkDeltas(t, events(fast.wires(t), "s1"), false)
				nLag := checkDeltas(t, events(lag.wires(t), "s1"), full)
				if nLag >= nFast || b.client.Merged() == 0 {
					t.Errorf("the lagging client got %d message_update frames (%d merged), the one that kept up %d", nLag, b.client.Merged(), nFast)
				}
				t.Logf("%s: %d message_update frames to the client that kept up, %d to the one that lagged", name, nFast, nLag)
			})
		})
	}
}

// The same over stdio, with a real pipe the client does not read from
// until the run is over: the server's writes block as they would on a
// terminal or a parent process that is busy.
func TestLaggingStdioClientGetsEveryDelta(t *testing.T) {
	for _, full := range []bool{true, false} {
		name := map[bool]string{true: "full", false: "delta"}[full]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fx := newFixture(t, fixtureConfig{chunkDelay: time.Millisecond})
				fx.srv.codec.delta = !full
				fast := &fakeLink{}
				a := fx.connect(t, fast)
				a.handle([]byte(`{"type":"create_session","id":"c1","sessionId":"s1"}`))
				synctest.Wait()

				inR, inW := io.Pipe()
				outR, outW := io.Pipe()
				// However the test ends, the server's reader and writer
				// are let go.
				defer inW.Close()
				defer outR.Close()
				served := make(chan error, 1)
				go func() {
					served <- fx.srv.ServeStdio(context.Background(), inR, outW)
					outW.Close()
				}()
				if _, err := fmt.Fprintln(inW, `{"type":"switch_session","id":"sw","sessionId":"s1"}`); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				a.handle([]byte(`{"type":"prompt","id":"p1","sessionId":"s1","message":"` + words(1000) + `"}`))
				time.Sleep(time.Minute) // (the bubble's clock) the faux model streams a word a millisecond
				synctest.Wait()         // the run is over; the stdio writer is blocked on the pipe
				if index(fast.wires(t), func(w wire) bool { return w.eventType() == "agent_end" }) < 0 {
					t.Fatal("the run did not end")
				}
				// Read everything; end the input once the run's last event
				// is read, so that the server drains and stops.
				var got []wire
				sc := bufio.NewScanner(outR)
				sc.Buffer(nil, 16<<20)
				for sc.Scan() {
					w := wire{raw: sc.Text()}
					if err := json.Unmarshal(sc.Bytes(), &w.m); err != nil {
						t.Fatalf("not JSON: %.200q", sc.Text())
					}
					got = append(got, w)
					if w.eventType() == "agent_end" {
						inW.Close()
					}
				}
				if err := <-served; err != nil {
					t.Fatal(err)
				}
				nFast := checkDeltas(t, events(fast.wires(t), "s1"), false)
				nLag := checkDeltas(t, events(got, "s1"), full)
				if nLag >= nFast {
					t.Errorf("the stdio client got %d message_update frames, the one that kept up %d: nothing was joined", nLag, nFast)
				}
				t.Logf("%s: %d message_update frames to the client that kept up, %d over stdio", name, nFast, nLag)
			})
		})
	}
}

// The same over a real WebSocket: a client that does not read until the
// run is over, then reads everything. How much the kernel's buffers took
// decides how many frames were joined; whatever it was, the deltas add up
// to the answer and each partial holds exactly the deltas so far.
func TestLaggingWebSocketClientGetsEveryDelta(t *testing.T) {
	for _, full := range []bool{true, false} {
		name := map[bool]string{true: "full", false: "delta"}[full]
		t.Run(name, func(t *testing.T) {
			fx := newFixture(t, fixtureConfig{})
			fx.srv.codec.delta = !full
			hs := httptest.NewServer(fx.srv.WebSocketHandler(WebSocketOptions{}))
			defer hs.Close()
			fast := newCountLink()
			a := newConn(fx.srv, "test", fast)
			if err := a.start(); err != nil {
				t.Fatal(err)
			}
			defer func() { a.closed(); <-a.done() }()
			a.handle([]byte(`{"type":"create_session","id":"c1","sessionId":"s1"}`))

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ws.CloseNow()
			ws.SetReadLimit(64 << 20)
			var got []wire
			read := func(until func(wire) bool) {
				t.Helper()
				for {
					_, b, err := ws.Read(ctx)
					if err != nil {
						t.Fatalf("read: %v", err)
					}
					w := wire{raw: string(b)}
					if err := json.Unmarshal(b, &w.m); err != nil {
						t.Fatalf("not JSON: %.200q", b)
					}
					got = append(got, w)
					if until(w) {
						return
					}
				}
			}
			if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type":"switch_session","id":"sw","sessionId":"s1"}`)); err != nil {
				t.Fatal(err)
			}
			read(func(w wire) bool { return w.typ() == "response" && w.id() == "sw" })
			// The run, while this client reads nothing.
			a.handle([]byte(`{"type":"prompt","id":"p1","sessionId":"s1","message":"` + words(1000) + `"}`))
			fast.waitEnds(1)
			read(func(w wire) bool { return w.eventType() == "agent_end" })
			n := checkDeltas(t, events(got, "s1"), full)
			t.Logf("%s: %d message_update frames over the WebSocket", name, n)
		})
	}
}
