package piserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd-dev/agentd/internal/server"
)

// slowLink is a client that reads slower than the model writes: each
// write takes a while. It records the most bytes its connection had
// queued at any write.
type slowLink struct {
	fakeLink
	delay time.Duration

	mu        sync.Mutex
	client    *server.Client // set once the connection is attached
	maxQueued int64
}

func (l *slowLink) write(ctx context.Context, f []byte) error {
	l.mu.Lock()
	if l.client != nil {
		l.maxQueued = max(l.maxQueued, l.client.QueuedBytes())
	}
	l.mu.Unlock()
	time.Sleep(l.delay)
	return l.fakeLink.write(ctx, f)
}

// A client that reads slower than the model writes ends with the same
// final message as a fast one, and what waits for it stays bounded by
// what it has not seen of the current message: deltas merge, nothing
// else is dropped or reordered. In pi's full format and in delta format.
func TestSlowReaderGetsTheLatestState(t *testing.T) {
	for _, delta := range []bool{false, true} {
		name := "full"
		if delta {
			name = "delta"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fx := newFixture(t, fixtureConfig{chunkDelay: time.Millisecond})
				fx.srv.codec.delta = delta
				fast := &fakeLink{}
				a := fx.connect(t, fast)
				a.handle([]byte(`{"type":"create_session","id":"c1","sessionId":"s1"}`))
				synctest.Wait()
				slow := &slowLink{delay: 20 * time.Millisecond}
				b := newConn(fx.srv, "test", slow)
				if err := b.start(); err != nil {
					t.Fatal(err)
				}
				slow.mu.Lock()
				slow.client = b.client
				slow.mu.Unlock()
				b.handle([]byte(`{"type":"switch_session","id":"sw","sessionId":"s1"}`))
				synctest.Wait()
				a.handle([]byte(`{"type":"prompt","id":"p1","sessionId":"s1","message":"` + words(2000) + `"}`))
				synctest.Wait()
				time.Sleep(time.Minute) // the slow client catches up
				synctest.Wait()

				wa, wb := fast.wires(t), slow.wires(t)
				final := func(ws []wire) string {
					for i := len(ws) - 1; i >= 0; i-- {
						if ws[i].eventType() == "message_end" {
							return ws[i].raw[strings.Index(ws[i].raw, `"event"`):]
						}
					}
					t.Fatalf("no message_end:\n%s", dump(ws))
					return ""
				}
				if final(wa) != final(wb) {
					t.Errorf("the slow client's last message_end differs from the fast one's")
				}
				// Nothing but deltas was merged away: the other events are
				// the same, in order. In the delta format the joined deltas
				// give the same text; in the full format each frame carries
				// the whole message so far, and the last one all of it.
				if sa, sb := nonDeltas(events(wa, "s1")), nonDeltas(events(wb, "s1")); strings.Join(sa, " ") != strings.Join(sb, " ") {
					t.Errorf("events other than deltas differ:\nfast %v\nslow %v", sa, sb)
				}
				if delta {
					if sa, sb := stream(events(wa, "s1")), stream(events(wb, "s1")); strings.Join(sa, " ") != strings.Join(sb, " ") {
						t.Errorf("streams differ:\nfast %v\nslow %v", sa, sb)
					}
					// A merged frame carries the seq of the newest delta in
					// it, so a client resuming from it misses nothing and
					// gets nothing twice.
					if la, lb := lastDeltaSeq(events(wa, "s1")), lastDeltaSeq(events(wb, "s1")); la != lb || la == 0 {
						t.Errorf("the last delta's seq: fast %d, slow %d", la, lb)
					}
					var prev uint64
					for _, w := range events(wb, "s1") {
						if w.seq() <= prev {
							t.Fatalf("the slow client's seqs go %d then %d", prev, w.seq())
						}
						prev = w.seq()
					}
				} else if la, lb := lastPartial(events(wa, "s1")), lastPartial(events(wb, "s1")); la != lb || la == "" {
					t.Errorf("the last message_update's message differs: fast %.80q, slow %.80q", la, lb)
				}
				nb := len(events(wb, "s1"))
				if na := len(events(wa, "s1")); nb >= na {
					t.Errorf("the slow client got %d event frames, the fast one %d: nothing merged", nb, na)
				}
				if b.client.Merged() == 0 {
					t.Error("no frame was merged for the slow client")
				}
				// Bounded by the current message, not its history: what
				// may wait before deltas merge (64 KiB), the largest frame
				// (the whole answer, in the full format) and a few small
				// ones.
				largest := 0
				for _, w := range wa {
					largest = max(largest, len(w.raw))
				}
				slow.mu.Lock()
				peak := slow.maxQueued
				slow.mu.Unlock()
				if peak > int64(64<<10+4*largest) {
					t.Errorf("the slow client's queue reached %d bytes; the largest frame is %d", peak, largest)
				}
				t.Logf("%s: fast %d event frames, slow %d; slow queue peak %d bytes (largest frame %d)", name, len(events(wa, "s1")), nb, peak, largest)
			})
		})
	}
}

// nonDeltas lists the events that are not deltas, with their seqs.
func nonDeltas(ws []wire) []string {
	var out []string
	for _, w := range ws {
		ev, _ := w.m["event"].(map[string]any)
		ame, _ := ev["assistantMessageEvent"].(map[string]any)
		if typ, _ := ame["type"].(string); w.eventType() == "message_update" && strings.HasSuffix(typ, "_delta") {
			continue
		}
		out = append(out, fmt.Sprintf("%d:%s", w.seq(), w.eventType()))
	}
	return out
}

// lastPartial is the message of the last full-format message_update.
func lastPartial(ws []wire) string {
	for i := len(ws) - 1; i >= 0; i-- {
		if ws[i].eventType() == "message_update" {
			ev, _ := ws[i].m["event"].(map[string]any)
			b, _ := json.Marshal(ev["message"])
			return string(b)
		}
	}
	return ""
}

// lastDeltaSeq is the seq of the last delta-format message_update.
func lastDeltaSeq(ws []wire) uint64 {
	for i := len(ws) - 1; i >= 0; i-- {
		if ws[i].eventType() == "message_update" {
			return ws[i].seq()
		}
	}
	return 0
}
